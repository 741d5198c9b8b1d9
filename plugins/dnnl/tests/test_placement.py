"""dnnl: which partitions stay on dnnl: memory-bound and tiny partitions, lone dense layers,
reference kernels, an unavailable backend, a real model."""

from __future__ import annotations

import os
import subprocess
import sys

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin
from byoc_dnnl.runtime import Runtime

from .helpers import DNNL, conv_stem, rand, softmax_between_convs


@pytest.mark.usefixtures("keep_tiny")
def test_unclaimed_qdq_groups_and_memory_bound_partitions_stay_with_onnxruntime() -> None:
    """A QuantizeLinear read by a DequantizeLinear of another scale is refused (its integers
    would leave the partition), so are that DequantizeLinear and the node reading it: the
    QDQ group stays with onnxruntime. A partition left with no layer with weights (here a lone
    Softmax) goes back too, saying why."""
    scale, zero = np.float32(0.05), np.uint8(128)
    nodes = [
        *conv_stem()[0],
        node("QuantizeLinear", ["h", "s", "z"], "hq"),
        node("DequantizeLinear", ["hq", "s2", "z"], "hd"),
        node("GlobalAveragePool", ["hd"], "p"),
        node("Flatten", ["p"], "f"),
        node("Softmax", ["f"], "y", axis=-1),
    ]
    consts = {**conv_stem()[1], "s": scale, "s2": np.float32(0.04), "z": zero}
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    report = assert_matches_onnxruntime(model, DNNL)
    decisions = report.plan.decisions
    assert decisions["h"].backend == "dnnl"  # the Conv: a float input, feeding a Quantize
    reason = "read by other than a DequantizeLinear of its scale and zero point"
    assert ("dnnl", reason) in decisions["hq"].refusals
    assert ("dnnl", "its QuantizeLinear runs elsewhere") in decisions["hd"].refusals
    assert decisions["p"].backend == "onnxruntime"
    assert ("dnnl", "reads a DequantizeLinear: onnxruntime runs this QDQ group in int8") in (
        decisions["p"].refusals
    )
    assert decisions["y"].backend == "onnxruntime"
    assert any(
        r.startswith("pruned: no layer with constant weights") for _, r in decisions["y"].refusals
    )


def test_a_tiny_partition_between_onnxruntime_ops_stays_with_onnxruntime() -> None:
    """A partition with onnxruntime ops around it whose layers do fewer than TINY_MACS
    multiply-adds in all goes back to onnxruntime with the reason (its boundaries cost more
    than dnnl gains: Silero VAD's one-frame model); the same layers as the whole model, or
    with more work, stay on dnnl."""
    c = {"w": rand(16, 8, 3, 3) / 8, "b": rand(16)}
    layers = [node("Conv", ["s", "w", "b"], "c", pads=[1, 1, 1, 1]), node("Relu", ["c"], "r")]
    around = [node("Sin", ["x"], "s"), *layers, node("Sin", ["r"], "y")]
    small = make_model(around, {"x": [1, 8, 16, 16]}, ["y"], c)  # 0.3M multiply-adds
    decisions = assert_matches_onnxruntime(small, DNNL).plan.decisions
    assert decisions["c"].backend == decisions["r"].backend == "onnxruntime"
    reasons = [r for _, r in decisions["c"].refusals]
    assert any(r.startswith("pruned: its layers do 294912 multiply-adds") for r in reasons)
    whole = [node("Identity", ["x"], "s"), *layers[:1], node("Relu", ["c"], "y")]
    decisions = byoc.partition(make_model(whole, {"x": [1, 8, 16, 16]}, ["y"], c), DNNL).decisions
    assert {d.backend for d in decisions.values()} == {"dnnl"}
    large = make_model(around, {"x": [1, 8, 64, 64]}, ["y"], c)  # 4.7M
    assert plugin.TINY_MACS <= 16 * 16 * 8 * 9 * 64 * 64
    assert byoc.partition(large, DNNL).decisions["c"].backend == "dnnl"


@pytest.mark.usefixtures("keep_tiny")
def test_a_lone_dense_layer_between_onnxruntime_ops_stays_with_onnxruntime() -> None:
    """A partition whose only work is one small float MatMul or Gemm (views and transposes
    around it), nothing fused, goes back to onnxruntime with the reason (onnxruntime-optimized
    transformers have exactly this between their contrib ops); a large one (at least
    LONE_MACS multiply-adds), and two dense layers with the activation between them, stay on
    dnnl."""
    c = {"w1": rand(16, 32), "w2": rand(32, 16), "b": rand(32)}
    lone = [
        node("Sin", ["x"], "s"),  # dnnl claims no Sin
        node("Transpose", ["s"], "t", perm=[0, 2, 1]),
        node("MatMul", ["t", "w1"], "m"),
        node("Sin", ["m"], "y"),
    ]
    model = make_model(lone, {"x": [1, 16, 8]}, ["y"], c)
    decisions = assert_matches_onnxruntime(model, DNNL, {"x": rand(1, 16, 8)}).plan.decisions
    assert decisions["m"].backend == "onnxruntime"
    assert any(r.startswith("pruned: a lone float dense layer") for _, r in decisions["m"].refusals)
    fused = [
        *lone[:2],
        node("MatMul", ["t", "w1"], "m0"),
        node("Add", ["m0", "b"], "m1"),
        node("Relu", ["m1"], "m2"),
        node("MatMul", ["m2", "w2"], "m"),
        node("Sin", ["m"], "y"),
    ]
    model = make_model(fused, {"x": [1, 16, 8]}, ["y"], c)
    decisions = assert_matches_onnxruntime(model, DNNL, {"x": rand(1, 16, 8)}).plan.decisions
    assert {decisions[n].backend for n in ("m0", "m1", "m2", "m")} == {"dnnl"}
    assert plugin.LONE_MACS <= 256 * 1024 * 1024
    large = [node("Sin", ["x"], "s"), node("MatMul", ["s", "w"], "m"), node("Sin", ["m"], "y")]
    model = make_model(large, {"x": [256, 1024]}, ["y"], {"w": rand(1024, 1024) / 32})
    decisions = byoc.partition(model, DNNL).decisions
    assert decisions["m"].backend == "dnnl"


@pytest.mark.usefixtures("keep_tiny")
def test_a_kernel_on_onednns_reference_implementation_goes_to_onnxruntime(monkeypatch) -> None:
    """Codegen builds the net, reads the implementation oneDNN picked for each kernel and
    refuses the nodes of a reference one, with the reason."""
    real = Runtime.implementations

    def reference_softmax(self):  # type: ignore[no-untyped-def]
        return [(k, "softmax ref:any" if i.startswith("softmax") else i) for k, i in real(self)]

    monkeypatch.setattr(Runtime, "implementations", reference_softmax)
    report = assert_matches_onnxruntime(softmax_between_convs(1), DNNL)
    decisions = report.plan.decisions
    assert decisions["p"].backend == "onnxruntime"
    ((backend, reason),) = decisions["p"].refusals
    assert backend == "dnnl" and reason.startswith(
        "refused at codegen: oneDNN has only a slow kernel for it (softmax ref:any"
    )
    assert decisions["h"].backend == decisions["y"].backend == "dnnl"


def test_unavailable_backend_says_why_and_claims_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), CXX=str(tmp_path / "no-such-g++"))
    env["BYOC_PLUGINS"] = "dnnl"  # installed, not named: a warning, no claims
    code = (
        "import warnings, byoc\n"
        "from byoc.testing.build import make_model, node\n"
        "import numpy as np\n"
        "warnings.simplefilter('ignore')\n"
        "m = make_model([node('Relu', ['x'], 'y')], {'x': [2, 3]}, ['y'])\n"
        "print(byoc.partition(m).to_json()['partitions'])\n"
        "try:\n"
        "    byoc.partition(m, {'backends': ['dnnl']})\n"
        "except byoc.ConfigError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    first, named = done.stdout.strip().splitlines()
    assert first == "[]" and "'dnnl' is named in 'backends' but cannot be used" in named
    shown = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "backends"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "no-such-g++" in shown.stdout + shown.stderr


@pytest.mark.realmodel
def test_real_model_p1_matches(real_model) -> None:  # type: ignore[no-untyped-def]
    report = assert_matches_onnxruntime(
        real_model("P1"), {"backends": ["dnnl"], "shapes": {"x": [1, 3, 48, 192]}}
    )
    assert len(report.plan.fallback_nodes) < len(report.plan.decisions) // 10
