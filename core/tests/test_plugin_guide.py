"""docs/plugin-authors.md works when copied.

Its ``# file: PATH`` blocks make a plugin project; this builds it in a temporary directory,
registers the plugin without installing it (``byoc.Registry(only=[])`` and ``add``), and checks
that it matches onnxruntime on constants, broadcasting, repeated and shared values, saves and
loads, runs the guide's own test file and passes the conformance suite; that the guide's other
blocks run on their own; and that a plugin reading its operands from ``partition.inputs`` alone
fails the suite, as the guide says.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import tomllib
import types
import warnings
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import pytest
from byoc import plugins
from byoc.testing import conformance
from byoc.testing.build import make_model, node

# The guide shows the current registration: a deprecation warning from its plugin is an error.
pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning:byoc_mybackend")
ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "plugin-authors.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
_MARKER = re.compile(r"\A# file: (\S+)\n")
CONFIG = {"backends": ["mybackend"], "compile": {"placement": "static"}}
SUITE_ARGS = {  # the conformance suite's fixtures, for mybackend
    "conformance_backend": "mybackend",
    "backend_config": {
        "backends": ["mybackend"],
        "backend": {"mybackend": {"min_partition_nodes": 1, "prune": False}},
        "compile": {"placement": "static"},
    },
    "backend_tolerance": (1e-4, 1e-5),
    "backend_known_failures": {},
}


def blocks() -> list[tuple[str, str]]:
    """``(language, text)`` of each fenced block of the guide."""
    return _BLOCK.findall(GUIDE.read_text())


def project_files() -> dict[str, str]:
    """The files the guide's ``# file:`` blocks make: each file's blocks, in order."""
    parts: dict[str, list[str]] = {}
    for _language, text in blocks():
        marker = _MARKER.match(text)
        if marker:
            parts.setdefault(marker[1], []).append(text[marker.end() :].strip("\n"))
    return {path: "\n\n\n".join(texts) + "\n" for path, texts in parts.items()}


def standalone_python() -> list[str]:
    """The guide's Python blocks that are not part of the project."""
    return [text for lang, text in blocks() if lang == "python" and not _MARKER.match(text)]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The guide's project written out, its plugin module imported from ``src``."""
    root = tmp_path_factory.mktemp("byoc-mybackend")
    for path, text in project_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root / "src"))
        try:
            yield types.SimpleNamespace(
                root=root, plugin=importlib.import_module("byoc_mybackend.plugin")
            )
        finally:
            for name in [m for m in sys.modules if m.split(".")[0] == "byoc_mybackend"]:
                del sys.modules[name]


def registry_of(*plugin_objects: Any) -> byoc.Registry:
    reg = byoc.Registry(only=[])  # the onnxruntime fallback alone
    for plugin in plugin_objects:
        reg.add(plugin)
    return reg


def load_file(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the project --------------------------------------------------------------------------------


def test_the_guide_makes_a_complete_installable_project(project):
    assert set(project_files()) == {
        "pyproject.toml",
        "src/byoc_mybackend/__init__.py",
        "src/byoc_mybackend/plugin.py",
        "tests/test_mybackend.py",
        "tests/test_conformance.py",
    }
    for path, text in project_files().items():
        if path.endswith(".py"):
            compile(text, path, "exec")
    meta = tomllib.loads((project.root / "pyproject.toml").read_text())
    assert meta["build-system"]["requires"] and meta["build-system"]["build-backend"]
    assert meta["project"]["name"] == "byoc-mybackend" and meta["project"]["version"]
    (entry,) = meta["project"]["entry-points"]["byoc.backends"].items()
    assert entry == ("mybackend", "byoc_mybackend.plugin")
    assert (project.root / "src" / "byoc_mybackend" / "plugin.py").is_file()
    pyprojecttoml = pytest.importorskip("setuptools.config.pyprojecttoml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools' "support is experimental" notes
        pyprojecttoml.read_configuration(project.root / "pyproject.toml")  # pip's checks


def test_the_guide_plugin_matches_onnxruntime_and_saves_and_loads(project, tmp_path):
    """Constant operands (first and second), broadcasting constants and inputs, one value as
    two operands, and an output that a later node of the partition reads too."""
    rng = np.random.default_rng(0)
    model = make_model(
        [
            node("Add", ["x", "w"], "y"),  # a constant [4] against x [2, 3, 4]
            node("Mul", ["y", "b"], "m"),  # an input [3, 1]: both broadcast
            node("Sub", ["c", "m"], "s"),  # a constant first operand
            node("Mul", ["s", "s"], "q"),  # one value, two operands
            node("Div", ["q", "v"], "d"),
            node("Relu", ["d"], "r"),
        ],
        {"x": [2, 3, 4], "b": [3, 1]},
        ["r", "y"],  # y is read by Mul too
        constants={
            "w": rng.standard_normal(4).astype(np.float32),
            "c": rng.standard_normal((2, 3, 4)).astype(np.float32),
            "v": np.float32(2.5),
        },
    )
    reg = registry_of(project.plugin)
    report = byoc.compare(model, CONFIG, registry=reg)
    assert report.passed, report.table()
    (partition,) = report.plan.partitions
    assert partition.backend == "mybackend" and len(partition.nodes) == 6
    assert sorted(partition.inputs) == ["b", "x"] and sorted(partition.outputs) == ["r", "y"]

    compiled = byoc.compile(model, CONFIG, registry=reg)
    again = byoc.load(compiled.save(tmp_path / "m.byoc"), registry=reg)
    feeds = byoc.random_inputs(model)
    want = compiled.run(feeds)
    for name, value in again.run(feeds).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "not a program"),
        (b'{"inputs": ["x"], "consts": {}, "nodes": [], "outputs": 3}', "list of value names"),
        (b'{"inputs": ["x"], "consts": {}, "nodes": [["n", "Exp", ["x"], ["y"]]]}', "KeyError"),
        (
            b'{"inputs": ["x"], "consts": {}, "nodes": [["n", "Exp", ["x"], ["y"]]], '
            b'"outputs": ["y"]}',
            "'Exp' is not an op",
        ),
        (
            b'{"inputs": ["x"], "consts": {}, "nodes": [["n", "Add", ["x", "w"], ["y"]]], '
            b'"outputs": ["y"]}',
            "reads ['w'], which nothing defines",
        ),
        (
            b'{"inputs": [], "consts": {"w": {"shape": [2], "data": [1]}}, "nodes": [], '
            b'"outputs": ["w"]}',
            "cannot reshape",
        ),
    ],
)
def test_the_guide_plugin_refuses_damaged_artifacts(project, data, words):
    with pytest.raises(byoc.ArtifactError, match=re.escape(words)):
        project.plugin.byoc_deserialize(backend="mybackend", data=data)


def test_the_program_shown_is_what_codegen_writes(project):
    (shown,) = [text for lang, text in blocks() if lang == "json"]
    model = make_model(
        [node("Add", ["x", "w"], "y"), node("Relu", ["y"], "z")],
        {"x": [2, 3]},
        ["z"],
        constants={"w": np.array([1, -2, 3], np.float32)},
    )
    plan = byoc.partition(model, CONFIG, registry=registry_of(project.plugin))
    assert json.loads(project.plugin.codegen(plan.partitions[0])) == json.loads(shown)


def test_the_guide_test_file_passes(project, tmp_path):
    module = load_file(project.root / "tests" / "test_mybackend.py", "guide_test_mybackend")
    tests = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
    assert tests
    for test in tests:
        test(**({"tmp_path": tmp_path} if "tmp_path" in inspect.signature(test).parameters else {}))


# -- the conformance suite ------------------------------------------------------------------------


def run_suite(monkeypatch: pytest.MonkeyPatch, reg: byoc.Registry, *names: str) -> list[str]:
    """Run tests of the conformance suite with ``reg`` as the process's registry (the suite
    uses the installed plugins, and the guide's project is not installed); the names of
    those that skipped."""
    monkeypatch.setitem(plugins._cache, os.environ.get(plugins.ENV_VAR), reg)
    skipped = []
    for name in names:
        test = getattr(conformance, name)
        try:
            test(**{k: SUITE_ARGS[k] for k in inspect.signature(test).parameters})
        except pytest.skip.Exception:
            skipped.append(name)
    return skipped


def test_the_guide_plugin_passes_the_conformance_suite(project, monkeypatch):
    module = load_file(project.root / "tests" / "test_conformance.py", "guide_test_conformance")
    names = [n for n in dir(module) if n.startswith("test_")]
    assert set(names) == {n for n in conformance.__all__ if n.startswith("test_")}
    # every test but test_backend_is_listed, which asks `byoc backends` what is installed
    tests = [n for n in names if n != "test_backend_is_listed"]
    skipped = run_suite(monkeypatch, registry_of(project.plugin), *tests)
    # it claims none of the ops with variants, has no patterns, and does not declare
    # softmax_masks
    assert skipped == [
        "test_claimed_op_variants_match_onnxruntime",
        "test_patterns_match_onnxruntime",
        "test_softmax_masks_may_hold_minus_inf",
    ]


class InputsOnly:
    """The first plugin the guide warns about: its runtime knows ``partition.inputs`` and the
    values its nodes make, not the constants bound inside the partition."""

    @byoc.hookimpl
    def byoc_register_backends(self, register: Any) -> None:
        register(byoc.BackendSpec("mybackend"))  # the guide's backend, written naively

    @byoc.hookimpl
    def byoc_supported_ops(self, backend: str, config: Any) -> dict[str, Any]:
        return {op: self.float32 for op in ("Add", "Sub", "Mul", "Relu")}

    @staticmethod
    def float32(view: byoc.NodeView) -> str | None:
        types = [view.input_type(i) for i in range(len(view.inputs))]
        return None if all(t and t.dtype == np.float32 for t in types) else "not float32"

    @byoc.hookimpl
    def byoc_codegen(self, backend: str, partition: byoc.Partition, config: Any) -> Any:
        steps = [(v.op_type, v.inputs, v.outputs[0]) for v in partition.steps()]
        return list(partition.inputs), steps, list(partition.outputs)

    @byoc.hookimpl
    def byoc_create_runtime(self, backend: str, artifact: Any, config: Any) -> Any:
        return types.SimpleNamespace(run=lambda inputs: self.run(artifact, inputs))

    @staticmethod
    def run(artifact: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
        names, steps, outputs = artifact
        values = dict(zip(names, inputs, strict=True))
        kernels = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}
        for op, args, out in steps:
            kernel = kernels.get(op, lambda x: np.maximum(x, np.float32(0)))
            values[out] = kernel(*(values[a] for a in args))
        return [values[o] for o in outputs]


@pytest.mark.filterwarnings("ignore:.*returned to onnxruntime at compile")
def test_a_plugin_reading_operands_from_partition_inputs_alone_fails_the_suite(monkeypatch):
    reg = registry_of(InputsOnly())
    run_suite(monkeypatch, reg, "test_claimed_ops_match_onnxruntime")  # a node alone: passes
    with pytest.raises(AssertionError, match=r"Add on input 1 constant: .*KeyError"):
        run_suite(monkeypatch, reg, "test_claimed_ops_in_partitions")


# -- the other blocks -----------------------------------------------------------------------------


def test_the_other_python_blocks_run_on_their_own(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # byoc.native's cache
    monkeypatch.setenv("OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    found = standalone_python()
    assert len(found) == 3, "a new block: check it here"
    for i, text in enumerate(found):
        try:
            exec(compile(text, f"plugin-authors.md block {i}", "exec"), {"__name__": "guide"})
        except SystemExit as exc:  # the byoc.native example finds no C compiler
            pytest.skip(str(exc))
    assert capsys.readouterr().out == "42\n"


def test_the_options_example_registers_a_backend_with_a_local_cache_and_threads():
    (example,) = [text for text in standalone_python() if "byoc.BackendSpec(" in text]
    space: dict[str, Any] = {}
    exec(compile(example, "plugin-authors.md options", "exec"), space)

    class Plugin:
        @byoc.hookimpl
        def byoc_register_backends(self, register: Any) -> None:
            register(space["spec"])

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the guide shows the current form
        backend = registry_of(Plugin()).backends["mylib"]
    assert backend.local_options == {"cache_dir"}
    table = byoc.Config(backend={"mylib": {"threads": 4}}).backend_table("mylib", backend.options)
    assert (table["threads"], table["cache_dir"]) == (4, "")


def test_the_pattern_example_forms_its_composite_and_its_check_refuses(project, monkeypatch):
    (patterns,) = [text for text in standalone_python() if "byoc_pattern_table" in text]
    fused = types.ModuleType("guide_fused")  # mybackend's plugin.py with the table added
    monkeypatch.setitem(sys.modules, fused.__name__, fused)  # for its dataclass
    source = (project.root / "src" / "byoc_mybackend" / "plugin.py").read_text()
    exec(compile(source + "\n\n" + patterns, "guide_fused.py", "exec"), fused.__dict__)
    reg = registry_of(fused)
    rng = np.random.default_rng(1)

    def plan(bias_shape: tuple[int, ...]) -> byoc.Plan:
        model = make_model(
            [
                node("Conv", ["x", "k", "kb"], "conv1", pads=[1, 1, 1, 1]),
                node("Add", ["conv1", "bias"], "add1"),
                node("Relu", ["add1"], "relu1"),
            ],
            {"x": [1, 2, 6, 6]},
            ["relu1"],
            constants={
                "k": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
                "kb": rng.standard_normal(4).astype(np.float32),
                "bias": rng.standard_normal(bias_shape).astype(np.float32),
            },
        )
        return byoc.partition(model, CONFIG, registry=reg)

    formed = plan((4, 1, 1))
    assert [c.name for p in formed.partitions for c in p.composites] == [
        "mybackend.conv2d_bias_relu"
    ]
    refused = plan((6,))  # broadcast along the width, not one value per channel
    assert not [c for p in refused.partitions for c in p.composites]
    assert (
        "mybackend",
        "pattern mybackend.conv2d_bias_relu: the bias has shape [6], not one value per channel",
    ) in refused.decisions["relu1"].refusals


def test_the_sizes_the_guide_states_are_right():
    text = GUIDE.read_text()
    said = int(re.search(r"`plugins/examplejson/` \(about (\d+) lines", text)[1])
    source = ROOT / "plugins" / "examplejson" / "src" / "byoc_examplejson"
    lines = sum(len((source / f).read_text().splitlines()) for f in ("plugin.py", "ops.py"))
    assert abs(said - lines) <= lines // 10, f"examplejson has {lines} lines, the guide says {said}"
    said = int(re.search(r"plugin\.py +the hooks, about (\d+) lines", text)[1])
    lines = len(project_files()["src/byoc_mybackend/plugin.py"].splitlines())
    assert abs(said - lines) <= lines // 10, f"plugin.py has {lines} lines, the guide says {said}"
