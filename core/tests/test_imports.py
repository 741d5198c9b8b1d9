"""The core's modules import each other without cycles, imports inside functions and under
``if TYPE_CHECKING:`` included: a cycle at the type level is still one module that cannot be
read without the other."""

from __future__ import annotations

import ast
from pathlib import Path

import byoc

ROOT = Path(byoc.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the core modules it imports (``from byoc import x`` is module ``byoc.x``
    when there is one)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.append(sub if sub in modules else node.module)
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


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


def test_the_core_has_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_cycle_check_finds_every_module_on_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"], ["b", "c", "a", "b"], ["c", "a", "b", "c"]]


def test_the_import_graph_counts_type_checking_imports() -> None:
    """hookspecs imports Partition from plan only under TYPE_CHECKING: the edge counts (plan
    once imported plugins that way, which made a cycle)."""
    assert "byoc.plan" in import_graph()["byoc.hookspecs"]
