"""dnnl's C source mode (codegen = "c"): the generated C++ file, its kernel library calls,
`--dump-dir`, `.byoc` round trips, a rebuild from source on another host, damaged files."""

from __future__ import annotations

import dataclasses
import struct

import byoc
import numpy as np
import pytest
from byoc.cli import main
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import csource, plugin

C = {
    "backends": ["dnnl"],
    "backend": {"dnnl": {"codegen": "c"}},
    "compile": {"placement": "static"},
}
RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def block():
    """Conv+Relu, a residual Add, a view, MaxPool, Gemm+Relu, Softmax: two outputs, one of them
    a view (Flatten) of a kernel's output. The same weights on every call."""
    rng = np.random.default_rng(1)
    nodes = [
        node("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]),
        node("Relu", ["c"], "r"),
        node("Conv", ["r", "w2"], "c2", pads=[1, 1, 1, 1]),
        node("Add", ["c2", "r"], "s"),
        node("MaxPool", ["s"], "p", kernel_shape=[2, 2], strides=[2, 2]),
        node("Flatten", ["p"], "f"),
        node("Gemm", ["f", "g", "gb"], "d", transB=1),
        node("Relu", ["d"], "dr"),
        node("Softmax", ["dr"], "y", axis=-1),
    ]
    shapes = {"w": (8, 3, 3, 3), "b": (8,), "w2": (8, 8, 3, 3), "g": (10, 240), "gb": (10,)}
    weights = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
    return make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "f"], weights)


def dnnl_step(compiled: byoc.CompiledModel):  # type: ignore[no-untyped-def]
    return next(s for s in compiled.steps if s.unit.backend == "dnnl")


@pytest.fixture(scope="module")
def compiled() -> byoc.CompiledModel:
    return byoc.compile(block(), C)


def test_matches_onnxruntime_and_the_json_mode(compiled: byoc.CompiledModel) -> None:
    assert_matches_onnxruntime(block(), C)
    x = {"x": rand(1, 3, 10, 12)}
    json_mode = byoc.compile(block(), {**C, "backend": {"dnnl": {}}})
    for name, value in compiled.run(x).items():
        np.testing.assert_allclose(value, json_mode.run(x)[name], rtol=1e-5, atol=1e-5)
    assert [s.unit.backend for s in compiled.steps] == ["dnnl"]


def test_the_file_calls_the_kernel_library(compiled: byoc.CompiledModel) -> None:
    artifact = dnnl_step(compiled).artifact
    text, symbol = artifact.source, artifact.graph["symbol"]
    assert artifact.suffix == ".cpp" and '#include "dnnl_kernels.h"' in text
    assert "// dnnl.conv2d_bias_relu: " in text and "conv(c, false, In{{1, 3, 10, 12}}" in text
    assert '{"sum", "", 0x0.0p+0f, 0x0.0p+0f, In{{1, 8, 10, 12}}}' in text  # the residual Add
    assert "softmax(c, 1, In{{1, 10}})" in text
    for entry in ("_create(", "_run(", "_implementation(", "_destroy("):
        assert f"{symbol}{entry}" in text
    assert "float *t" in text and "// a view" in text  # Flatten shares its input's buffer
    runtime = dnnl_step(compiled).runtime
    assert isinstance(runtime, csource.CRuntime)
    kinds = [impl.split()[0] for _, impl in runtime.implementations()]
    assert kinds[0] == "convolution" and "softmax" in kinds


def test_dump_dir_writes_the_cpp_file(tmp_path) -> None:
    model, cfg = tmp_path / "m.onnx", tmp_path / "byoc.toml"
    import onnx

    onnx.save(block(), model)
    cfg.write_text(
        'backends = ["dnnl"]\n[compile]\nplacement = "static"\n[backend.dnnl]\ncodegen = "c"\n'
    )
    assert main(["compile", str(model), "-c", str(cfg), "--dump-dir", str(tmp_path / "d")]) == 0
    (cpp,) = (tmp_path / "d").glob("*.cpp")
    assert "run(*s.k[0], f," in cpp.read_text()


def test_a_saved_model_loads_and_runs(compiled: byoc.CompiledModel, tmp_path) -> None:
    path = compiled.save(tmp_path / "m.byoc")
    again = byoc.load(path)
    x = {"x": rand(1, 3, 10, 12)}
    for name, value in again.run(x).items():
        np.testing.assert_array_equal(value, compiled.run(x)[name])
    assert isinstance(dnnl_step(again).runtime, csource.CRuntime)


def test_a_library_built_elsewhere_is_rebuilt_from_the_source(compiled) -> None:  # type: ignore[no-untyped-def]
    data = plugin.byoc_serialize(backend="dnnl", artifact=dnnl_step(compiled).artifact)
    untrusted = plugin.byoc_deserialize(backend="dnnl", data=data, trust_native=False)
    assert untrusted.library is None  # a carried library is used only when trusted
    artifact = plugin.byoc_deserialize(backend="dnnl", data=data, trust_native=True)
    artifact.library = dataclasses.replace(artifact.library, host="another-host", data=b"junk")
    runtime = plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})
    assert artifact.library.usable_here()
    x = rand(1, 3, 10, 12)
    np.testing.assert_array_equal(runtime.run([x])[0], dnnl_step(compiled).runtime.run([x])[0])


def test_a_library_that_does_not_load_here_is_rebuilt(compiled) -> None:  # type: ignore[no-untyped-def]
    from byoc import native

    artifact = dnnl_step(compiled).artifact
    junk = dataclasses.replace(
        artifact.library, data=b"junk", sha256=native.sha256(b"junk"), host=native.host_tag()
    )
    again = dataclasses.replace(artifact, library=junk, prebuilt=None)
    runtime = plugin.byoc_create_runtime(backend="dnnl", artifact=again, config={})
    assert again.library.data != b"junk"
    x = rand(1, 3, 10, 12)
    np.testing.assert_array_equal(runtime.run([x])[0], dnnl_step(compiled).runtime.run([x])[0])


def _parts(data: bytes) -> list[bytes]:
    at, parts = 12, []
    while at < len(data):
        (n,) = struct.unpack("<Q", data[at : at + 8])
        parts.append(data[at + 8 : at + 8 + n])
        at += 8 + n
    return parts


def _joined(head: bytes, parts: list[bytes]) -> bytes:
    return head + b"".join(struct.pack("<Q", len(p)) + p for p in parts)


def test_damaged_c_artifacts_are_refused(compiled: byoc.CompiledModel) -> None:
    data = plugin.byoc_serialize(backend="dnnl", artifact=dnnl_step(compiled).artifact)
    parts = _parts(data)
    assert len(parts) == 4
    graph, index, weights, c_part = parts
    edited = c_part.replace(b"run(*s.k[0]", b"run(*s.k[1]")  # C++ not generated from the graph
    from byoc import native

    header, cpp, library = native.unpack(c_part, plugin.C_MAGIC, "test")
    rewritten = native.pack(plugin.C_MAGIC, header, cpp.replace("k[0]", "k[1]"), library)
    other_graph = graph.replace(b'"symbol": "dnnl_0"', b'"symbol": "dnnl_9"')
    for bad, match in [
        (_joined(data[:12], [graph, index, weights]), "truncated before the C source"),
        (_joined(data[:12], [graph, index, weights, edited]), "sha256"),
        (_joined(data[:12], [graph, index, weights, rewritten]), "not what this byoc-dnnl"),
        (_joined(data[:12], [other_graph, index, weights, c_part]), "symbol"),
        (data[:-3], "truncated"),
    ]:
        with pytest.raises(byoc.ArtifactError, match=match):
            plugin.byoc_deserialize(backend="dnnl", data=bad, trust_native=False)


def test_a_bad_codegen_option_is_a_config_error() -> None:
    with pytest.raises(byoc.ConfigError, match=r"'backend\.dnnl\.codegen' must be one of json, c"):
        byoc.compile(block(), {**C, "backend": {"dnnl": {"codegen": "verilog"}}})


def test_node_names_cannot_escape_the_comments() -> None:
    model = block()
    model.graph.node[0].name = 'conv\n#include "evil.h"\\'
    compiled = byoc.compile(model, C)
    text = dnnl_step(compiled).artifact.source
    assert '#include "evil.h"' not in text and "evil" in text
