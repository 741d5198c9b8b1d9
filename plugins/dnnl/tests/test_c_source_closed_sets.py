"""dnnl's C source mode compiles C++ on load, generated from the JSON graph a .byoc file
carries: only names of ops.py's closed tables (kernel kinds, algorithms, post-op kinds), a
checked C identifier (the symbol) and checked numbers reach that C++. A file whose graph has C
metacharacters in any of its fields is refused before anything is compiled; free text (a
kernel's name and members, an input's name) reaches the C++ only through ``_comment``, which
keeps them inside a comment or a C string.

Each case edits one field of a real C source artifact (conv+relu, a residual add: a sum
post-op, a binary post-op, pooling, eltwise, a binary kernel with an eltwise post-op, resample,
transpose, reduce, concat, a view, a dense layer, softmax), writes the C++ this byoc-dnnl
generates from the edited graph when it generates any (an attacker would), and loads the file
with every native build blocked."""

from __future__ import annotations

import copy
import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import onnx
import pytest
from byoc import native
from byoc.testing.build import make_model, node
from byoc_dnnl import csource, plugin
from byoc_dnnl.codegen import Artifact

C = {
    "backends": ["dnnl"],
    "backend": {"dnnl": {"codegen": "c"}},
    "compile": {"placement": "static"},
}
PAYLOADS = [
    'x"); system("touch PWNED"); //',
    'relu"\n#include "/etc/passwd"\nsystem("touch PWNED");//',
]
# Free text: fields whose value no table bounds. They reach the C++ only through csource's
# _comment (a kernel's name: a `//` comment and the name its errors give; its members: the
# comment), or not at all (an input node's name). Every other string of the graph is
# closed-set (format, symbol, op, dtype, kind, attrs' alg, post-ops' kind and alg, const names
# that index the weights): an edited one is refused.
FREE_TEXT = {("kernel", "name"), ("kernel", "members"), ("input", "name")}


def model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    nodes = [
        node("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]),
        node("Relu", ["c"], "r"),
        node("Conv", ["r", "w2"], "c2", pads=[1, 1, 1, 1]),
        node("Add", ["c2", "r"], "s"),  # a sum post-op
        node("Mul", ["s", "k"], "m"),  # a binary post-op
        node("MaxPool", ["m"], "p", kernel_shape=[2, 2], strides=[2, 2]),
        node("Sigmoid", ["p"], "e"),
        node("Add", ["e", "p"], "a"),  # a binary kernel
        node("Tanh", ["a"], "t"),  # its eltwise post-op
        node("Resize", ["t", "", "scales"], "rs", mode="nearest"),
        node("Transpose", ["rs"], "tt", perm=[0, 1, 3, 2]),
        node("ReduceMean", ["tt"], "rm", axes=[1], keepdims=1),
        node("Concat", ["tt", "rm"], "cc", axis=1),
        node("Flatten", ["cc"], "f"),
        node("Gemm", ["f", "g", "gb"], "d", transB=1),
        node("Relu", ["d"], "dr"),
        node("Softmax", ["dr"], "y", axis=-1),
    ]
    shapes = {"w": (8, 3, 3, 3), "b": (8,), "w2": (8, 8, 3, 3), "k": (8, 1, 1)}
    shapes |= {"g": (10, 1080), "gb": (10,)}
    weights: dict[str, Any] = {
        k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()
    }
    weights["scales"] = np.array([1, 1, 2, 2], np.float32)
    return make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], weights)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    compiled = byoc.compile(model(), C)
    assert [s.unit.backend for s in compiled.steps] == ["dnnl"]
    path = compiled.save(tmp_path_factory.mktemp("closed") / "m.byoc")
    return path, compiled.steps[0].artifact.graph


def test_the_artifact_has_the_kinds_and_post_ops_under_test(saved) -> None:  # type: ignore[no-untyped-def]
    graph = saved[1]
    kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
    kinds = {n["kind"] for n in kernels}
    assert kinds >= {"conv", "pool", "eltwise", "binary", "resample", "transpose", "reduce"}
    assert kinds >= {"concat", "view", "matmul", "softmax"}
    posts = {p["kind"] for n in kernels for p in n["post_ops"]}
    assert posts == {"eltwise", "sum", "binary"}


def _strings(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every string in a JSON value."""
    if isinstance(value, str):
        return [path]
    if not isinstance(value, dict | list):
        return []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return [p for k, v in items for p in _strings(v, (*path, k))]


def _set(graph: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    edited = copy.deepcopy(graph)
    at = edited
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return edited


def _cases(graph: dict[str, Any]) -> list[tuple[str, tuple[Any, Any], dict[str, Any]]]:
    """``(what, (node op, field), edited graph)``: every string of the graph set to each
    payload, and an ``alg`` given to every post-op that names none (a sum's)."""
    paths = _strings(graph)
    paths += [
        ("nodes", i, "post_ops", j, "alg")
        for i, n in enumerate(graph["nodes"])
        for j, p in enumerate(n.get("post_ops", []))
        if "alg" not in p
    ]
    cases = []
    for payload in PAYLOADS:
        for path in paths:
            op = graph["nodes"][path[1]]["op"] if path[0] == "nodes" else None
            field = (op, path[2] if op else path[0])
            cases.append((f"{path} = {payload!r}", field, _set(graph, path, payload)))
    return cases


def _forged(data: bytes, graph: dict[str, Any]) -> bytes:
    """The dnnl artifact ``data`` with its graph replaced by ``graph`` and, as an attacker would
    write it, the C++ this byoc-dnnl generates from that graph (the original C++ when it
    generates none)."""
    artifact = plugin.byoc_deserialize(backend="dnnl", data=data, trust_native=False)
    try:
        cpp = csource.generate(copy.deepcopy(graph), artifact.weights)
    except byoc.ArtifactError:
        cpp = artifact.source
    forged = Artifact(cpp, artifact.weights, ".cpp", graph_source=json.dumps(graph))
    return plugin.byoc_serialize(backend="dnnl", artifact=forged)


def _member(path: Path) -> bytes:
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        unit = next(u for u in manifest["units"] if u["backend"] == "dnnl")
        return z.read(unit["member"])


def _rewritten(src: Path, dst: Path, data: bytes) -> Path:
    """A copy of ``src`` whose dnnl member is ``data``, its sha256 and size fixed up."""
    with zipfile.ZipFile(src) as zin:
        manifest = json.loads(zin.read("manifest.json"))
        members = {i.filename: zin.read(i) for i in zin.infolist() if i.filename != "manifest.json"}
    unit = next(u for u in manifest["units"] if u["backend"] == "dnnl")
    members[unit["member"]] = data
    unit["sha256"], unit["size"] = hashlib.sha256(data).hexdigest(), len(data)
    with zipfile.ZipFile(dst, "w") as zout:
        zout.writestr("manifest.json", json.dumps(manifest))
        for name, member in members.items():
            zout.writestr(name, member)
    return dst


def test_an_edited_string_is_refused_before_any_build_or_stays_in_a_comment(
    saved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Loading refuses (ArtifactError) every edited closed-set string without building
    anything; an edited free-text one reaches the build only inside a comment or a string."""
    path, graph = saved
    data = _member(path)
    lines = plugin.byoc_deserialize(backend="dnnl", data=data, trust_native=False).source.count(
        "\n"
    )
    built: list[str] = []

    def blocked(source: str, *args: Any, **kwargs: Any) -> Any:
        built.append(source)
        raise byoc.BackendError("the test blocks every native build")

    monkeypatch.setattr(native, "build", blocked)
    cases = _cases(graph)
    assert len(cases) > 100
    accepted = []
    for what, field, edited in cases:
        built.clear()
        with pytest.raises(byoc.ByocError) as refused:
            byoc.load(_rewritten(path, tmp_path / "edited.byoc", _forged(data, edited)))
        if isinstance(refused.value, byoc.ArtifactError):
            assert not built, what
            continue
        assert field in FREE_TEXT, f"{what}: not refused ({refused.value})"
        (cpp,) = built  # the partition's C++, generated from the edited graph
        assert 'system("' not in cpp and not any(p in cpp for p in PAYLOADS), what
        assert cpp.count("\n") == lines, what  # the newline did not start a line of its own
        accepted.append(field)
    assert set(accepted) == FREE_TEXT  # each free-text field was loaded and built


def test_a_sum_post_op_names_no_algorithm(saved) -> None:  # type: ignore[no-untyped-def]
    """The bug this file is about: a sum post-op's ``alg`` went into the C++ unchecked."""
    path, graph = saved
    i, j = next(
        (i, j)
        for i, n in enumerate(graph["nodes"])
        for j, p in enumerate(n.get("post_ops", []))
        if p["kind"] == "sum"
    )
    data = _member(path)
    plugin.byoc_deserialize(backend="dnnl", data=_forged(data, graph), trust_native=False)
    for alg in ("relu", 'x"); system("touch PWNED"); //'):
        edited = _set(graph, ("nodes", i, "post_ops", j, "alg"), alg)
        with pytest.raises(byoc.ArtifactError, match=f"node {i}: unknown sum post-op algorithm"):
            plugin.byoc_deserialize(backend="dnnl", data=_forged(data, edited), trust_native=False)


@pytest.mark.parametrize("value", ["3", True, 3.5, 1e40, '1); system("touch PWNED"); //'])
def test_numbers_written_into_the_cpp_must_be_numbers(saved, value: Any) -> None:  # type: ignore[no-untyped-def]
    """A shape, a window, an axis that is not an int, or a post-op's alpha that is not a
    finite number float32 holds, is refused: never converted (``int("3")``)."""
    path, graph = saved
    data = _member(path)
    kernels = [i for i, n in enumerate(graph["nodes"]) if n["op"] == "kernel"]
    conv, softmax = kernels[0], kernels[-1]
    targets = [
        ("nodes", conv, "shape", 1),
        ("nodes", conv, "attrs", "strides", 0),
        ("nodes", softmax, "attrs", "axis"),
    ]
    if not isinstance(value, float) or value > 1e38:
        targets.append(("nodes", conv, "post_ops", 0, "alpha"))
    for target in targets:
        edited = _forged(data, _set(graph, target, value))
        with pytest.raises(byoc.ArtifactError):
            plugin.byoc_deserialize(backend="dnnl", data=edited, trust_native=False)
