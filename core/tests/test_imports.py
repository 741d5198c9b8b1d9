"""No module imports one that imports it back, in the core, in each plugin package and in
bench/, imports inside functions and under ``if TYPE_CHECKING:`` included: a cycle at the type
level is still one module that cannot be read without the other. And no module imports a layer
above its own: the core (``byoc``) no plugin, a plugin no other plugin, nothing bench/, and
within a plugin only its package's facade (``__init__``) its hooks module (``plugin``, the
entry point, on top of the rest)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import byoc
import pytest

ROOT = Path(byoc.__file__).parent
REPO = ROOT.parents[2]  # core/src/byoc -> the repository, when the core is run from it
PLUGINS = sorted(REPO.glob("plugins/*/src/byoc_*/__init__.py"))
BENCH = REPO / "bench"
CORE, PLUGIN, BENCH_LAYER = 0, 1, 2

# Within these plugins, each module imports only those after it (a package's submodules count
# as the package; plugins/openvino/README.md, "Where things live").
PLUGIN_LAYERS = {
    "byoc_openvino": (
        "plugin", "annotate", "runtime", "query", "rules", "trial", "handles", "artifact",
    ),
}  # fmt: skip
# Cycles allowed for now, each named by its modules (none: the last, dnnl's kinds.base <->
# lowering, went with issue #76). An entry whose cycle is gone fails too.
KNOWN_CYCLES: set[frozenset[str]] = set()


def _package(init: Path) -> dict[str, Path]:
    """The modules of the package whose ``__init__.py`` is ``init``, by dotted name."""
    out = {}
    for path in init.parent.rglob("*.py"):
        parts = path.relative_to(init.parent.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _bench() -> dict[str, Path]:
    """bench/'s scripts: they import each other as top-level modules (``from machine import``)."""
    return {path.stem: path for path in BENCH.glob("*.py")}


def layer(module: str, bench: dict[str, Path]) -> int:
    if module in bench:
        return BENCH_LAYER
    return CORE if module.split(".")[0] == "byoc" else PLUGIN


def import_graph(
    packages: dict[str, Path] | None = None, scripts: dict[str, Path] | None = None
) -> dict[str, set[str]]:
    """module -> the modules it imports, of ``packages`` (default: the core) and of
    ``scripts`` (top-level modules only they import, as bench/'s). ``from byoc import x`` is
    module ``byoc.x`` when there is one; relative imports are resolved."""
    packages = _package(ROOT / "__init__.py") if packages is None else packages
    scripts = scripts or {}
    graph: dict[str, set[str]] = {}
    for name, path in {**packages, **scripts}.items():
        known = {**packages, **scripts} if name in scripts else packages
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in known else base)
        graph[name] = set()
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


@cache
def core_graph() -> dict[str, set[str]]:
    return import_graph()


@cache
def everything() -> tuple[dict[str, set[str]], dict[str, Path]]:
    """The import graph of the core, every plugin package and bench/, and bench's scripts."""
    packages = _package(ROOT / "__init__.py")
    for init in PLUGINS:
        packages |= _package(init)
    bench = _bench()
    return import_graph(packages, bench), bench


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One path for every module that can reach itself."""
    found = []
    for start in sorted(graph):
        path = _path(graph, start, start)
        if path:
            found.append(path)
    return found


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    seen: set[str] = set()
    todo = [(start, [start])]
    while todo:
        node, path = todo.pop()
        for nxt in sorted(graph[node]):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                todo.append((nxt, [*path, nxt]))
    return None


def tangles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The sets of modules on a common cycle (each module of one reaches every other)."""
    on_cycle = [path[0] for path in cycles(graph)]
    return {
        frozenset(m for m in on_cycle if _path(graph, start, m) and _path(graph, m, start))
        for start in on_cycle
    }


def upward(graph: dict[str, set[str]], bench: dict[str, Path]) -> list[str]:
    """The imports of a layer above the importer's, of another plugin, of a plugin's hooks
    module by its package's modules but the facade, or of a module before the importer's in
    ``PLUGIN_LAYERS``."""
    found = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            mine, theirs = layer(name, bench), layer(target, bench)
            package, other = name.split(".")[0], target.split(".")[0]
            if theirs > mine:
                found.append(f"{name} -> {target} (a layer above)")
            elif mine == theirs == PLUGIN and package != other:
                found.append(f"{name} -> {target} (another plugin)")
            elif package == other and target == f"{other}.plugin" and name != other:
                found.append(f"{name} -> {target} (the hooks module, on top)")
            elif package == other and 0 <= _rank(target) < _rank(name):
                found.append(f"{name} -> {target} (before it in PLUGIN_LAYERS)")
    return found


def _rank(module: str) -> int:
    """The place of ``module``'s layer in its package's ``PLUGIN_LAYERS`` (-1: none)."""
    package, _, rest = module.partition(".")
    order = PLUGIN_LAYERS.get(package, ())
    first = rest.split(".")[0]
    return order.index(first) if first in order else -1


def _show(graph: dict[str, set[str]], tangle: frozenset[str]) -> str:
    start = min(tangle)
    return f"{', '.join(sorted(tangle))}: {' -> '.join(_path(graph, start, start) or [])}"


def test_the_core_has_no_import_cycles() -> None:
    found = cycles(core_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


@pytest.mark.skipif(not PLUGINS, reason="the plugins are not beside this core")
def test_plugins_and_bench_have_no_import_cycles_but_the_known_ones() -> None:
    graph, _ = everything()
    found = tangles(graph)
    new = [_show(graph, t) for t in found - KNOWN_CYCLES]
    assert not new, "import cycles:\n" + "\n".join(new)
    gone = [", ".join(sorted(t)) for t in KNOWN_CYCLES - found]
    assert not gone, "known cycles gone: remove them from KNOWN_CYCLES:\n" + "\n".join(gone)


@pytest.mark.skipif(not PLUGINS, reason="the plugins are not beside this core")
def test_no_module_imports_a_layer_above_its_own() -> None:
    graph, bench = everything()
    assert {layer(m, bench) for m in graph} == {CORE, PLUGIN, BENCH_LAYER}
    found = upward(graph, bench)
    assert not found, "imports upward:\n" + "\n".join(found)


def test_the_cycle_check_finds_every_module_on_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": {"e"}}
    assert cycles(graph)[:3] == [["a", "b", "c", "a"], ["b", "c", "a", "b"], ["c", "a", "b", "c"]]
    assert tangles(graph) == {frozenset("abc"), frozenset({"e", "e2"})}


def test_the_layer_check_finds_imports_upward() -> None:
    bench = {"zoo": Path("zoo.py")}
    graph = {
        "byoc.compiler": {"byoc_x.ops"},
        "byoc_x.ops": {"byoc_x.plugin", "byoc_y.ops", "zoo", "byoc.graph"},
        "byoc_x": {"byoc_x.plugin"},
        "zoo": {"byoc_x.ops", "byoc.graph"},
    }
    assert upward(graph, bench) == [
        "byoc.compiler -> byoc_x.ops (a layer above)",
        "byoc_x.ops -> byoc_x.plugin (the hooks module, on top)",
        "byoc_x.ops -> byoc_y.ops (another plugin)",
        "byoc_x.ops -> zoo (a layer above)",
    ]
    layered = {
        "byoc_openvino.rules.values": {"byoc_openvino.handles", "byoc_openvino.query"},
        "byoc_openvino.trial": {"byoc_openvino.handles"},
        "byoc_openvino.handles": {"byoc_openvino.trial"},
    }
    assert upward(layered, bench) == [
        "byoc_openvino.handles -> byoc_openvino.trial (before it in PLUGIN_LAYERS)",
        "byoc_openvino.rules.values -> byoc_openvino.query (before it in PLUGIN_LAYERS)",
    ]


def test_the_import_graph_counts_type_checking_imports() -> None:
    """hookspecs imports Partition from plan only under TYPE_CHECKING: the edge counts (plan
    once imported plugins that way, which made a cycle)."""
    assert "byoc.plan" in core_graph()["byoc.hookspecs"]


def test_the_import_graph_counts_imports_in_functions_relative_ones_too(tmp_path: Path) -> None:
    """openvino's trial once imported its hooks module inside a function, which closed a
    cycle; a relative import names a module of the package, an absolute one of another name
    none."""
    (tmp_path / "p" / "q").mkdir(parents=True)
    for name in ("__init__", "b", "c", "q/__init__", "q/d"):
        (tmp_path / "p" / f"{name}.py").write_text("")
    (tmp_path / "p" / "a.py").write_text(
        "def f():\n    from . import b\n    from .c import x\n    import e\n"
    )
    (tmp_path / "p" / "q" / "d.py").write_text("from .. import c\nfrom ..q import d\n")
    graph = import_graph(_package(tmp_path / "p" / "__init__.py"))
    assert graph["p.a"] == {"p.b", "p.c"}
    assert graph["p.q.d"] == {"p.c"}  # itself does not count
