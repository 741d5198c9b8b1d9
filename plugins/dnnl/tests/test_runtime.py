"""dnnl: artifacts and the runtime: serialization, threads, damaged artifacts and bad inputs refused
before native code runs, thread safety, fpmath."""

from __future__ import annotations

import json
import struct

import byoc
import numpy as np
import onnx
import pytest
from byoc import host, placement
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin
from byoc_dnnl.codegen import Artifact
from byoc_dnnl.plugin import FPMATH

from .helpers import DNNL, MODES, assert_thread_safe, conv_stem, dnnl_step, rand, replace_graph


def test_bf16_option_is_close_and_validated() -> None:
    nodes, consts = conv_stem(16)
    model = make_model([*nodes, node("Relu", ["h"], "y")], {"x": [1, 3, 10, 12]}, ["y"], consts)
    cfg = {"backends": ["dnnl"], "backend": {"dnnl": {"fpmath": "bf16"}}}
    assert_matches_onnxruntime(model, cfg, rtol=2e-2, atol=5e-2)
    with pytest.raises(byoc.ConfigError, match="fpmath"):
        byoc.compile(model, {"backends": ["dnnl"], "backend": {"dnnl": {"fpmath": "fp8"}}})


def _dense() -> onnx.ModelProto:
    return make_model(
        [node("MatMul", ["x", "w"], "m"), node("Relu", ["m"], "y")],
        {"x": [4, 96]},
        ["y"],
        {"w": rand(96, 80)},
    )


def _conv() -> onnx.ModelProto:
    nodes, consts = conv_stem(16)
    return make_model([*nodes, node("Relu", ["h"], "y")], {"x": [1, 3, 10, 12]}, ["y"], consts)


@pytest.mark.parametrize(
    ("flags", "model", "precision"),
    [
        (("avx512_bf16",), _dense, "bf16"),  # dense layers typed bf16 by the shim
        (("avx512_bf16",), _conv, "fp32"),  # oneDNN 3.2 ignores fpmath without AMX
        (("avx512_bf16", "amx_bf16"), _conv, "bf16"),
    ],
)
def test_placement_is_offered_bf16_only_where_onednn_computes_in_it(
    monkeypatch, tmp_path, flags, model, precision
) -> None:
    monkeypatch.setattr(placement.cache, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(host, "cpu", lambda: host.Cpu("x86_64", "test cpu", flags, 2))
    cfg = {"backends": ["dnnl"], "compile": {"placement": "static", "precision": "bf16"}}
    compiled = byoc.compile(model(), cfg)
    (m,) = compiled.plan.placement.measurements
    assert m.precision == precision
    if precision == "fp32":
        assert m.precision_note == "in fp32: dnnl offers no bf16 on this CPU"


@pytest.mark.skipif(
    "avx512_bf16" not in host.cpu().flags or "amx_bf16" in host.cpu().flags,
    reason="the typed bf16 dense layers are made on CPUs with AVX512_BF16 and no AMX",
)
def test_dense_layers_compute_in_bf16_without_amx() -> None:
    x, model, runs = {"x": rand(4, 96)}, _dense(), {}
    for fpmath in FPMATH:
        cfg = {"backends": ["dnnl"], "backend": {"dnnl": {"fpmath": fpmath}}}
        runs[fpmath] = byoc.compile(model, cfg).run(x)["y"]
    want = byoc.compile(model, {"backends": []}).run(x)["y"]
    np.testing.assert_allclose(runs["strict"], want, rtol=1e-4, atol=1e-4)
    error = np.abs(runs["bf16"] - want).max() / np.abs(want).max()
    assert 1e-5 < error < 2e-2  # rounded to bfloat16, not float32 any more


@pytest.fixture(scope="module")
def compiled() -> byoc.CompiledModel:
    model = make_model(
        [node("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), node("Relu", ["c"], "y")],
        {"x": [1, 3, 10, 12]},
        ["y"],
        {"w": rand(8, 3, 3, 3), "b": rand(8)},
    )
    return byoc.compile(model, DNNL)


def test_serialize_deserialize_run(compiled: byoc.CompiledModel) -> None:
    step = dnnl_step(compiled)
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    again = plugin.byoc_deserialize(backend="dnnl", data=data, trust_native=False)
    assert again.source == step.artifact.source and again.suffix == ".json"
    runtime = plugin.byoc_create_runtime(backend="dnnl", artifact=again, config={})
    x = rand(1, 3, 10, 12)
    np.testing.assert_array_equal(runtime.run([x])[0], step.runtime.run([x])[0])


def test_loading_with_threads_caps_onednn_threads(compiled: byoc.CompiledModel, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = compiled.save(tmp_path / "m.byoc")
    assert byoc.load(path).backend_configs["dnnl"]["threads"] == 0  # one per core
    again = byoc.load(path, threads=1)  # one Ray worker's share of the cores
    assert again.backend_configs["dnnl"]["threads"] == 1
    assert dnnl_step(again).runtime.threads == 1
    x = {"x": rand(1, 3, 10, 12)}
    np.testing.assert_allclose(again.run(x)["y"], compiled.run(x)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_each_net_makes_its_primitives_for_its_own_threads(mode: dict) -> None:
    """oneDNN splits a primitive's work for the OpenMP threads of the thread that creates it,
    and keeps that split at run time. A net built after a one-thread net (one Ray worker's
    share) used to inherit its one thread: a model compiled twice in one process ran its big
    convolution 2.7x slower the second time. And a one-thread net built first used every core."""
    nodes, consts = conv_stem(16)
    nodes.append(node("Conv", ["h", "w1"], "y", pads=[1, 1, 1, 1]))
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], {**consts, "w1": rand(16, 16, 3, 3)})
    x = {"x": rand(1, 3, 10, 12)}
    want = None
    for threads in (1, 2, 1):
        config = {**DNNL, **mode, "compile": {"placement": "static"}}
        config["backend"] = {
            "dnnl": {**config.get("backend", {}).get("dnnl", {}), "threads": threads}
        }
        model_threads = byoc.compile(model, config)
        runtime = dnnl_step(model_threads).runtime
        assert runtime.threads == threads
        assert runtime.kernel_threads() and set(runtime.kernel_threads()) == {threads}
        got = model_threads.run(x)["y"]
        want = got if want is None else want
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _damaged(data: bytes) -> list[bytes]:
    glen = struct.unpack("<Q", data[12:20])[0]
    graph = json.loads(data[20 : 20 + glen])

    def with_graph(g: dict) -> bytes:
        return replace_graph(data, g)

    forward = json.loads(json.dumps(graph))
    forward["nodes"][-1]["inputs"][0] = len(forward["nodes"]) - 1
    huge = json.loads(json.dumps(graph))
    huge["nodes"][0]["shape"] = [1 << 20, 1 << 20, 1 << 20]
    const_big = json.loads(json.dumps(graph))
    for n in const_big["nodes"]:
        if n["op"] == "const":
            n["shape"] = [n["shape"][0] * 2, *n["shape"][1:]]
    wrong_conv = json.loads(json.dumps(graph))
    wrong_conv["nodes"][-1]["shape"] = [1, 8, 99, 12]  # not what the conv computes
    bad_kind = json.loads(json.dumps(graph))
    bad_kind["nodes"][-1]["kind"] = "launch_missiles"
    return [
        data[:5],
        b"NOTDNNL!" + data[8:],
        data[:-7],
        data + b"x",
        data[:20] + b"]" + data[21:],
        with_graph(forward),
        with_graph(huge),
        with_graph(const_big),
        with_graph(wrong_conv),
        with_graph(bad_kind),
    ]


def test_damaged_artifacts_raise_artifact_error(compiled: byoc.CompiledModel) -> None:
    data = plugin.byoc_serialize(backend="dnnl", artifact=dnnl_step(compiled).artifact)
    for bad in _damaged(data):
        with pytest.raises(byoc.ArtifactError):
            artifact = plugin.byoc_deserialize(backend="dnnl", data=bad, trust_native=False)
            plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


def test_bad_inputs_are_refused_before_native_code(compiled: byoc.CompiledModel) -> None:
    runtime = dnnl_step(compiled).runtime
    good = rand(1, 3, 10, 12)
    for bad in (
        [],
        [good, good],
        [good[:, :, :5]],
        [good.astype(np.float64)],
        ["text"],
        [rand(1, 3, 12, 10)],
    ):
        with pytest.raises(byoc.InputError):
            runtime.run(bad)
    strided = rand(1, 3, 10, 24)[:, :, :, ::2]  # non-contiguous: copied, not refused
    np.testing.assert_array_equal(
        runtime.run([strided])[0], runtime.run([np.ascontiguousarray(strided)])[0]
    )


def test_run_is_thread_safe(compiled: byoc.CompiledModel) -> None:
    assert_thread_safe(compiled, [rand(1, 3, 10, 12) for _ in range(4)])


def test_artifact_source_is_tvm_style_json(compiled: byoc.CompiledModel) -> None:
    art: Artifact = dnnl_step(compiled).artifact
    graph = art.graph
    assert {"nodes", "arg_nodes", "heads"} <= set(graph)
    assert [graph["nodes"][i]["op"] for i in graph["arg_nodes"]] == ["input"]
