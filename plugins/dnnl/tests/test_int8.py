"""dnnl: int8 kinds (qmatmul, qconv) and the quantization ops: quantize_dynamic's dense layers and
convolutions, quantize_static's QDQ groups."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin
from byoc_dnnl.codegen import Artifact

from .helpers import (
    DNNL,
    MODES,
    assert_refused_without_vnni,
    dnnl_step,
    int8_vnni,
    quantized_mlp,
    rand,
    run_as_written,
)


@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamically_quantized_dense_layers_run_in_int8(per_channel: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """quantize_dynamic's dense layers are dnnl.qmatmul composites, int8 convolutions over the
    rows whose source scale and zero point are found at run time, as DynamicQuantizeLinear
    finds them; GELU and the residual are their post-ops. Outputs equal onnxruntime's, and the
    compiled model saves and loads back."""
    model = quantized_mlp(tmp_path, per_channel)
    x = rand(1, 8, 32)
    report = assert_matches_onnxruntime(model, DNNL, {"x": x})
    decisions = report.plan.decisions
    assert {d.backend for d in decisions.values()} == {"dnnl"}
    assert sum(d.composite == "dnnl.qmatmul" for d in decisions.values()) == 10  # 2 x 5 nodes
    compiled = byoc.compile(model, DNNL)
    step = dnnl_step(compiled)
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    assert [k["kind"] for k in kernels] == ["qmatmul", "qmatmul"]
    assert [[p["kind"] for p in k["post_ops"]] for k in kernels] == [["eltwise"], ["binary"]]
    impls = [i for _, i in step.runtime.implementations()]
    assert sum(i.startswith("convolution") for i in impls) == 2, impls  # int8 1x1 convolutions
    assert not [i for i in impls if "ref" in i or "gemm" in i]
    again = byoc.load(compiled.save(tmp_path / "q.byoc"))
    np.testing.assert_array_equal(again.run({"x": x})["y"], compiled.run({"x": x})["y"])


@pytest.mark.parametrize("weights", ["QUInt8", "QInt8"])
def test_int8_layers_with_a_weights_zero_point_run_as_int8_matmuls(weights, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """uint8 or int8 weights with a zero point per layer such that w - zero point is not
    always an int8 value are qmatmul composites too: int8 matmuls whose weights' zero point
    oneDNN subtracts (its convolutions take none). Outputs equal onnxruntime's, and the
    compiled model saves and loads back."""
    model = quantized_mlp(tmp_path, weights=weights)
    tensors = {t.name: t for t in model.graph.initializer}
    for name, t in tensors.items():  # zero point max(w) - 128: w - it reaches 128, not int8
        if name.endswith("_zero_point") and name.replace("_zero_point", "_quantized") in tensors:
            w = onnx.numpy_helper.to_array(tensors[name.replace("_zero_point", "_quantized")])
            zero = np.array(int(w.max()) - 128).astype(w.dtype)
            t.CopyFrom(onnx.numpy_helper.from_array(zero, name))
    zero_points = [
        onnx.numpy_helper.to_array(t)
        for t in model.graph.initializer
        if t.name.endswith("_zero_point")
    ]
    assert zero_points and all(z.size == 1 and z != 0 for z in zero_points), zero_points
    x = rand(1, 8, 32)
    if not int8_vnni():  # refused: see saturating_kernels
        assert_refused_without_vnni(model, {"x": x})
        return
    report = assert_matches_onnxruntime(model, DNNL, {"x": x})
    assert sum(d.composite == "dnnl.qmatmul" for d in report.plan.decisions.values()) == 10
    compiled = byoc.compile(model, DNNL)
    impls = [i for _, i in dnnl_step(compiled).runtime.implementations()]
    assert sum(i.startswith("matmul") for i in impls) == 2, impls
    assert not [i for i in impls if i.startswith("convolution") or "ref" in i]
    again = byoc.load(compiled.save(tmp_path / "q.byoc"))
    np.testing.assert_array_equal(again.run({"x": x})["y"], compiled.run({"x": x})["y"])


def test_7_bit_uint8_weights_with_zero_points_per_column_run_as_int8(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """uint8 weights of 7 bits (``reduce_range``) with a zero point per column, as
    transformers.js quantizes its models: every w - zero point is an int8 value, so the
    weights become those differences, without a zero point, and the layers run as int8
    convolutions over the rows. Outputs equal onnxruntime's."""
    model = quantized_mlp(tmp_path, per_channel=True, weights="QUInt8", reduce_range=True)
    zero_points = [
        onnx.numpy_helper.to_array(t)
        for t in model.graph.initializer
        if t.name.endswith("_zero_point") and t.data_type == onnx.TensorProto.UINT8
    ]
    assert zero_points and all(len(set(z.tolist())) > 1 for z in zero_points), zero_points
    x = rand(1, 8, 32)
    if not int8_vnni():  # refused: see saturating_kernels
        assert_refused_without_vnni(model, {"x": x})
        return
    report = assert_matches_onnxruntime(model, DNNL, {"x": x})
    assert sum(d.composite == "dnnl.qmatmul" for d in report.plan.decisions.values()) == 10
    step = dnnl_step(byoc.compile(model, DNNL))
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    assert [len(k["inputs"]) for k in kernels] == [4, 4]  # no zero point left
    impls = [i for _, i in step.runtime.implementations()]
    assert sum(i.startswith("convolution") for i in impls) == 2, impls


def test_int8_layers_dnnl_cannot_run_stay_with_onnxruntime(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """8-bit weights whose zero points differ between columns make no qmatmul composite, and
    the reason is given; a DynamicQuantizeLinear whose output something else reads stays with
    onnxruntime; in C source mode the int8 layers are not claimed."""

    def refusals(model: onnx.ModelProto, config: dict = DNNL, first: bool = False) -> list[str]:
        """The refusals, when the first (or every) dense layer is no qmatmul composite."""
        decisions = byoc.partition(model, config).decisions
        layers = ["m1_quant"] if first else ["m1_quant", "m2_quant"]
        assert all(decisions[n].composite != "dnnl.qmatmul" for n in layers)
        return [r for d in decisions.values() for _, r in d.refusals]

    u8 = refusals(quantized_mlp(tmp_path, per_channel=True, weights="QUInt8"))
    assert any("zero points differ between columns" in r for r in u8)
    model = quantized_mlp(tmp_path)
    model.graph.output.append(
        onnx.helper.make_tensor_value_info("x_scale", onnx.TensorProto.FLOAT, [])
    )
    assert any("read by something other" in r for r in refusals(model, first=True))
    refusals(quantized_mlp(tmp_path), {**DNNL, **MODES[1]})


def quantized_convs(tmp_path, **conv: int) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    """Two convolutions (bias, Relu; the second reads the first) quantized by
    ``quantize_dynamic``: each is DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul by the
    scales -> Add of the bias. ``conv`` holds the first one's kernel, pads, group, stride and
    the weights' type and whether they are per channel."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    k, pad, group, stride = (
        conv.get(a, d) for a, d in (("k", 3), ("pad", 1), ("group", 1), ("stride", 1))
    )
    c = {"w1": rand(16, 8 // group, k, k) / 4, "b1": rand(16), "w2": rand(8, 16, 3, 3) / 4}
    nodes = [
        node("Conv", ["x", "w1", "b1"], "c1", pads=[pad] * 4, group=group, strides=[stride] * 2),
        node("Relu", ["c1"], "r1"),
        node("Conv", ["r1", "w2"], "c2", pads=[1, 1, 1, 1]),
        node("Relu", ["c2"], "y"),
    ]
    onnx.save(make_model(nodes, {"x": [1, 8, 12, 10]}, ["y"], c), tmp_path / "f.onnx")
    quantize_dynamic(
        tmp_path / "f.onnx",
        tmp_path / "q.onnx",
        per_channel=bool(conv.get("per_channel")),
        weight_type=QuantType.QUInt8 if conv.get("uint8") else QuantType.QInt8,
        extra_options={"WeightSymmetric": True},
    )
    return onnx.load(tmp_path / "q.onnx")


def test_int8_artifact_from_a_vnni_cpu_is_refused_on_a_cpu_without(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """int8 convolutions compiled where oneDNN uses VNNI, loaded where it does not (their
    16-bit pair sums could saturate): loading fails with an error saying to compile again,
    rather than running them. Here without VNNI: the artifact is made without codegen's
    check; with it: the saved model is loaded in a process where oneDNN is held to AVX2."""
    model = quantized_convs(tmp_path)
    if not int8_vnni():
        from byoc_dnnl.codegen import codegen

        artifact = codegen(byoc.partition(model, DNNL).partitions[0])
        with pytest.raises(byoc.BackendError, match=r"no VNNI.*Compile the model again"):
            plugin.byoc_create_runtime("dnnl", artifact, {})
        return
    path = byoc.compile(model, DNNL).save(tmp_path / "q.byoc")
    code = (
        "import sys, byoc\n"
        "try:\n"
        "    byoc.load(sys.argv[1])\n"
        "except byoc.BackendError as exc:\n"
        "    print(exc)\n"
    )
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "this CPU has no VNNI" in done.stdout and "Compile the model again" in done.stdout
    x = rand(1, 8, 12, 10)
    assert byoc.load(path).run({"x": x})["y"].shape == (1, 8, 12, 10)  # with VNNI: loads


@pytest.mark.parametrize(
    "conv",
    [
        {},
        {"k": 1, "pad": 0},
        {"group": 8},
        {"stride": 2, "pad": 0},
        {"per_channel": 1},
        {"uint8": 1},
    ],
)
def test_dynamically_quantized_convolutions_run_in_int8(conv: dict, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """quantize_dynamic's convolutions (3x3 padded, 1x1, depthwise, strided; weights int8 per
    layer or per channel, or uint8 with zero point 128) are dnnl.qconv composites: oneDNN int8
    convolutions whose source is quantized at run time as DynamicQuantizeLinear does, dividing
    by the scale. Outputs equal onnxruntime's, and the compiled model saves and loads back."""
    model = quantized_convs(tmp_path, **conv)
    x = rand(1, 8, 12, 10) + 0.3
    if not int8_vnni():  # refused: see saturating_kernels
        assert_refused_without_vnni(model, {"x": x})
        return
    report = assert_matches_onnxruntime(model, DNNL, {"x": x}, rtol=0, atol=1e-5)
    decisions = report.plan.decisions
    assert {d.backend for d in decisions.values()} == {"dnnl"}
    assert sum(d.composite == "dnnl.qconv" for d in decisions.values()) == 9  # 5 + 4 (no bias)
    compiled = byoc.compile(model, DNNL)
    step = dnnl_step(compiled)
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    assert [k["kind"] for k in kernels] == ["qconv", "qconv"]
    assert [[p["alg"] for p in k["post_ops"]] for k in kernels] == [["relu"], ["relu"]]
    impls = [i for _, i in step.runtime.implementations()]
    assert sum(i.startswith("convolution") for i in impls) == 2, impls
    assert not [i for i in impls if "ref" in i], impls
    again = byoc.load(compiled.save(tmp_path / "q.byoc"))
    np.testing.assert_array_equal(again.run({"x": x})["y"], compiled.run({"x": x})["y"])


def older_quantized_conv(zero_point: int, group: int = 1) -> onnx.ModelProto:
    """A convolution as older onnxruntimes' ``quantize_dynamic`` wrote it (ddddocr's models):
    uint8 weights with a zero point, the bias quantized at run time (``int32(floor(bias /
    scale))``, reshaped to a channel vector, added to the int32 product before the Cast),
    then Swish."""
    rng = np.random.default_rng(3)
    oc, ic = 16, 8 if group == 1 else 1
    scale = ["xs", "ws"]
    nodes = [
        node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xzp"]),
        node("Mul", scale, "s1"),
        node("Div", ["b", "s1"], "bd"),
        node("Floor", ["bd"], "bf"),
        node("Cast", ["bf"], "bi", to=onnx.TensorProto.INT32),
        node("Reshape", ["bi", "shape"], "br"),
        node("ConvInteger", ["xq", "w", "xzp", "wzp"], "acc", pads=[1, 1, 1, 1], group=group),
        node("Add", ["acc", "br"], "acc_b"),
        node("Cast", ["acc_b"], "accf", to=onnx.TensorProto.FLOAT),
        node("Mul", scale, "s2"),
        node("Mul", ["accf", "s2"], "c"),
        node("Sigmoid", ["c"], "sg"),
        node("Mul", ["c", "sg"], "y"),
    ]
    c = {
        "w": rng.integers(0, 256, (oc, ic, 3, 3)).astype(np.uint8),
        "wzp": np.uint8(zero_point),
        "ws": np.float32(0.02),
        "b": rand(oc),
        "shape": np.array([1, oc, 1, 1], np.int64),
    }
    return make_model(nodes, {"x": [1, 8 if group == 1 else oc, 12, 10]}, ["y"], c)


@pytest.mark.parametrize("group", [1, 16])
@pytest.mark.parametrize("zero_point", [121, 0, 128])
def test_older_quantized_convolutions_with_a_weights_zero_point_run_in_int8(
    zero_point: int, group: int, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """uint8 weights with any zero point (oneDNN's int8 convolutions take none: a second
    convolution of all-one weights sums each window, the zero point's share), on one group or
    depthwise, and a bias quantized at run time: one qconv kernel, outputs equal onnxruntime's
    (within float32 rounding), saved and loaded back."""
    model = older_quantized_conv(zero_point, group)
    x = rand(1, 8 if group == 1 else 16, 12, 10) + 0.2
    if not int8_vnni():  # refused: see saturating_kernels
        assert_refused_without_vnni(model, {"x": x})
        return
    report = assert_matches_onnxruntime(model, DNNL, {"x": x}, rtol=1e-5, atol=1e-5)
    decisions = report.plan.decisions
    assert {d.backend for d in decisions.values()} == {"dnnl"}
    assert sum(d.composite == "dnnl.qconv" for d in decisions.values()) == 10
    compiled = byoc.compile(model, DNNL)
    step = dnnl_step(compiled)
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    assert [(k["kind"], k["attrs"]["int_bias"]) for k in kernels] == [("qconv", 1)]
    impls = [i for _, i in step.runtime.implementations()]
    convolutions = 1 if zero_point == 128 else 2  # the product, and the windows' sums
    assert sum(i.startswith("convolution") for i in impls) == convolutions, impls
    assert not [i for i in impls if "ref" in i], impls
    again = byoc.load(compiled.save(tmp_path / "q.byoc"))
    np.testing.assert_array_equal(again.run({"x": x})["y"], compiled.run({"x": x})["y"])


def test_quantized_convolutions_dnnl_cannot_run_stay_with_onnxruntime(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A weights' zero point on a grouped convolution whose groups have several output
    channels, or with one weights' scale per channel, makes no qconv composite, and the
    reason is given; the model still matches onnxruntime."""
    model = quantized_convs(tmp_path, group=2, uint8=1)
    for t in model.graph.initializer:  # weights up to 228 (or more): w - 60 is not int8
        if t.name.endswith("_zero_point") and t.data_type == onnx.TensorProto.UINT8:
            t.CopyFrom(onnx.numpy_helper.from_array(np.uint8(60), t.name))
    decisions = byoc.partition(model, DNNL).decisions
    reasons = [r for d in decisions.values() for _, r in d.refusals]
    assert any("groups of several channels" in r for r in reasons), reasons
    assert_matches_onnxruntime(model, DNNL, {"x": rand(1, 8, 12, 10)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("weight", "not an int8 value"),
        ("scale", "one or one per column"),
        ("zero point", "zero point must be one constant int8 value"),
    ],
)
def test_int8_layers_with_damaged_weights_are_refused_when_loaded(
    damage, message, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A damaged artifact whose int8 weights (or their zero point) are not int8 values, or
    whose weights' scale has the wrong size, raises ArtifactError when it is loaded."""
    step = dnnl_step(byoc.compile(quantized_mlp(tmp_path), DNNL))
    graph = step.artifact.graph
    qmatmul = next(n for n in graph["nodes"] if n.get("kind") == "qmatmul")
    w, scale = (graph["nodes"][qmatmul["inputs"][i]]["name"] for i in (1, 3))
    weights = dict(step.artifact.weights)
    if damage == "weight":
        weights[w] = weights[w].copy()
        weights[w].flat[0] = 300.5
    elif damage == "zero point":  # the scale (0 < scale < 1) read as the weights' zero point
        qmatmul["inputs"].append(qmatmul["inputs"][3])
    else:
        weights[scale] = np.ones(5, np.float32)
        graph["nodes"][qmatmul["inputs"][3]]["shape"] = [5]
    artifact = Artifact(json.dumps(graph), weights)
    with pytest.raises(byoc.ArtifactError, match=message):
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


def statically_quantized(tmp_path, per_channel: bool) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    """A small conv net (3x3 conv, Relu, depthwise conv, residual Add, Swish, global pooling,
    a dense layer) through ``onnxruntime.quantization.quantize_static``: QDQ format, u8
    activations, s8 weights, 4 seeded random calibration batches."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(5)
    c = {
        "w0": rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3,
        "b0": rng.standard_normal(16).astype(np.float32) * 0.1,
        "w1": rng.standard_normal((16, 1, 3, 3)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
        "wd": rng.standard_normal((16, 10)).astype(np.float32) * 0.3,
        "bd": rng.standard_normal(10).astype(np.float32) * 0.1,
    }
    nodes = [
        node("Conv", ["x", "w0", "b0"], "c0", pads=[1, 1, 1, 1]),
        node("Relu", ["c0"], "r0"),
        node("Conv", ["r0", "w1", "b1"], "c1", pads=[1, 1, 1, 1], group=16),
        node("Add", ["c1", "r0"], "a"),
        node("Sigmoid", ["a"], "s"),
        node("Mul", ["a", "s"], "m"),
        node("GlobalAveragePool", ["m"], "p"),
        node("Flatten", ["p"], "f"),
        node("Gemm", ["f", "wd", "bd"], "y"),
    ]
    source, target = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(make_model(nodes, {"x": [1, 3, 12, 10]}, ["y"], c), source)

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(
                [{"x": rng.standard_normal((1, 3, 12, 10)).astype(np.float32)} for _ in range(4)]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantize_static(
        source,
        target,
        Batches(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
    )
    return onnx.load(target)


@pytest.mark.parametrize("per_channel", [False, True])
def test_statically_quantized_convolutions_run_in_int8_between_u8_tensors(
    per_channel: bool, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """quantize_static's QDQ net is one dnnl partition: its convolutions and dense layer are
    int8 kernels that read the u8 tensors the QuantizeLinears before them write (and the
    convolutions write the next one's u8);
    the rest runs in float32 between them, each QuantizeLinear and DequantizeLinear a few
    post-ops. Outputs equal onnxruntime's run of the QDQ graph as written (optimizations off)
    and its int8 kernels' to one quantum of the output; saved, the model loads back."""
    model = statically_quantized(tmp_path, per_channel)
    x = rand(1, 3, 12, 10)
    if not int8_vnni():  # refused: see saturating_kernels
        assert_refused_without_vnni(model, {"x": x})
        return
    (as_written,) = run_as_written(model, {"x": x})
    last = next(n for n in model.graph.node if n.output[0] == "y")  # y's DequantizeLinear
    assert last.op_type == "DequantizeLinear"
    scale = next(
        onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name == last.input[1]
    )
    compiled = byoc.compile(model, DNNL)
    assert [s.unit.backend for s in compiled.steps] == ["dnnl"]
    y = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(y, as_written, rtol=0, atol=float(scale) * 1.01)
    assert_matches_onnxruntime(model, DNNL, {"x": x}, rtol=0, atol=float(scale) * 1.01)
    step = dnnl_step(compiled)
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    layers = [k for k in kernels if k["kind"] in ("qconv", "qmatmul")]
    assert [k["kind"] for k in layers] == ["qconv", "qconv", "qmatmul"]  # the Gemm: int8 too
    assert all("src_scale" in k["attrs"] for k in layers)
    assert any(k["attrs"].get("dst") == "uint8" for k in kernels), kernels
    impls = [i for _, i in step.runtime.implementations()]
    assert sum(i.startswith("convolution") for i in impls) == 3, impls  # the Gemm's 1x1
    assert not [i for i in impls if "ref" in i], impls
    again = byoc.load(compiled.save(tmp_path / "q.byoc"))
    np.testing.assert_array_equal(again.run({"x": x})["y"], y)


@pytest.mark.parametrize("source", ["direct", "concat", "slice"])
def test_a_dense_layer_of_s8_integers_equals_onnxruntime_as_written(source: str) -> None:
    """A QDQ dense layer of s8 integers (``quantize_static``'s int8 activations) by int8
    weights, one product per output value: its output equals onnxruntime's run of the graph as
    written to one quantum. Without VNNI oneDNN halves the weights of an s8 source (odd ones
    round), and there the layer is refused with that reason; also when the source is a Concat
    of quantized values or a Slice, which dnnl quantizes first and moves as integers (random
    graphs 147 and 228, quantized: one output value in five or three a step off)."""
    rng = np.random.default_rng(3)
    c = {
        "s": np.float32(0.05),
        "z": np.int8(0),
        "w": rng.integers(-127, 128, (1, 16)).astype(np.int8),
        "ws": np.float32(0.02),
        "os": np.float32(0.013),
    }
    nodes = [
        node("QuantizeLinear", ["x", "s", "z"], "xq"),
        node("DequantizeLinear", ["xq", "s", "z"], "xd"),
        node("DequantizeLinear", ["w", "ws", "z"], "wd"),
        node("MatMul", ["xd", "wd"], "m"),
        node("QuantizeLinear", ["m", "os", "z"], "mq"),
        node("DequantizeLinear", ["mq", "os", "z"], "y"),
    ]
    if source == "concat":  # the Concat of two quantized tensors, quantized again
        nodes[1:2] = [
            node("DequantizeLinear", ["xq", "s", "z"], "xa"),
            node("Relu", ["x"], "r"),
            node("QuantizeLinear", ["r", "s", "z"], "rq"),
            node("DequantizeLinear", ["rq", "s", "z"], "ra"),
            node("Concat", ["xa", "ra"], "cat", axis=1),
            node("QuantizeLinear", ["cat", "s", "z"], "cq"),
            node("DequantizeLinear", ["cq", "s", "z"], "xd"),
        ]
    if source == "slice":  # every other channel of a computed tensor, then quantized
        nodes[0:1] = [
            node("Relu", ["x"], "r"),
            node("Slice", ["r", "start", "end", "axis", "step"], "sl"),
            node("QuantizeLinear", ["sl", "s", "z"], "xq"),
        ]
        c |= {
            k: np.array([v], np.int64)
            for k, v in zip(("start", "end", "axis", "step"), (0, 32, 1, 2), strict=True)
        }
    shape = [2, {"direct": 16, "concat": 8, "slice": 32}[source], 1]
    model = make_model(nodes, {"x": shape}, ["y"], c)
    x = rng.standard_normal(shape).astype(np.float32) * 2
    config = {"backends": ["dnnl"], "backend": {"dnnl": {"min_partition_nodes": 1}}}
    report = assert_matches_onnxruntime(model, config, {"x": x}, rtol=0, atol=0.013 * 1.01)
    (as_written,) = run_as_written(model, {"x": x})
    y = byoc.compile(model, config).run({"x": x})["y"]
    np.testing.assert_allclose(y, as_written, rtol=0, atol=0.013 * 1.01)
    reasons = [r for d in report.plan.decisions.values() for _, r in d.refusals]
    halved = any("halves the weights of an s8 source" in r for r in reasons)
    assert halved == (not int8_vnni()), reasons


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("dst", "unknown destination type 'int4'"),
        ("source", "a static source is a u8 or s8 tensor"),
        ("output", "an output is not float32"),
    ],
)
def test_damaged_u8_tensors_are_refused_when_loaded(damage: str, message: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A damaged artifact naming an unknown element type, an int8 convolution whose static
    source is float32, or a u8 tensor as the partition's output raises ArtifactError."""
    model = statically_quantized(tmp_path, False)
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (tested above)")
    step = dnnl_step(byoc.compile(model, DNNL))
    graph = step.artifact.graph
    nodes = graph["nodes"]
    u8 = next(i for i, n in enumerate(nodes) if n.get("attrs", {}).get("dst") == "uint8")
    if damage == "dst":
        nodes[u8]["attrs"]["dst"] = "int4"
    elif damage == "source":
        qconv = next(n for n in nodes if n.get("kind") == "qconv")
        qconv["inputs"][0] = graph["arg_nodes"][0]
    else:
        graph["heads"] = [u8]
    with pytest.raises(byoc.ArtifactError, match=message):
        plugin.byoc_create_runtime("dnnl", Artifact(json.dumps(graph), step.artifact.weights), {})


def test_a_dequantized_constant_stays_in_the_partition_reading_it_when_another_is_pruned() -> None:
    """The DequantizeLinear of a constant scalar read by a region that is pruned (too small)
    and by a dnnl partition that is kept: the partition gets its own copy, onnxruntime's
    segment its own; the scalar is no partition's input (dnnl's runtime takes none: a
    statically quantized DistilBERT failed to compile with "unsupported shape []" once
    dnnl refused its int8 layers)."""
    c = {"w": rand(32, 32, 3, 3) / 32, "b": rand(32), "q": np.uint8(7), "s": np.float32(0.5)}
    nodes = [
        node("DequantizeLinear", ["q", "s"], "three"),
        node("Add", ["x", "three"], "a1"),
        node("Sin", ["a1"], "s1"),
        node("Conv", ["s1", "w", "b"], "c2", pads=[1, 1, 1, 1]),
        node("Add", ["c2", "three"], "a2"),
        node("Relu", ["a2"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 32, 32, 32]}, ["y"], c)
    config = {
        **DNNL,
        "compile": {"placement": "static"},
        "backend": {"dnnl": {"min_partition_nodes": 3}},
    }
    report = assert_matches_onnxruntime(model, config)
    (part,) = [p for p in report.plan.partitions if p.backend == "dnnl"]
    assert "three" not in part.inputs and "three" not in part.outputs
    assert "c2" in {n for n in part.model.graph.node for n in n.output}


def test_a_dequantized_constant_read_by_two_partitions_is_copied_into_each() -> None:
    """A DequantizeLinear of a constant scalar read by Adds in two dnnl partitions (an
    onnxruntime op between them) is copied into both, as a constant node is: neither partition
    reads it as an input (a scalar input the runtime could not take)."""
    c = {"w": rand(32, 32, 3, 3) / 32, "b": rand(32), "q": np.uint8(7), "s": np.float32(0.5)}
    nodes = [
        node("DequantizeLinear", ["q", "s"], "three"),
        node("Conv", ["x", "w", "b"], "c1", pads=[1, 1, 1, 1]),
        node("Add", ["c1", "three"], "a1"),
        node("Sin", ["a1"], "s1"),
        node("Conv", ["s1", "w", "b"], "c2", pads=[1, 1, 1, 1]),
        node("Add", ["c2", "three"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 32, 32, 32]}, ["y"], c)
    report = assert_matches_onnxruntime(model, {**DNNL, "compile": {"placement": "static"}})
    parts = report.plan.partitions
    assert len(parts) == 2 and all(p.backend == "dnnl" for p in parts)
    assert all("three" not in p.inputs and "three" not in p.outputs for p in parts)


@pytest.mark.usefixtures("keep_tiny")
@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_dequantized_weights_that_are_also_an_output_are_copied_out(mode: dict) -> None:
    """A model output folded to a constant inside the partition (the float weights a
    DequantizeLinear makes of int8 ones, which a convolution also reads) is written by a copy:
    before, the dnnl artifact named a constant as a head, which its runtime refuses, and the
    compile failed."""
    wq = np.random.default_rng(0).integers(-5, 5, (4, 3, 3, 3)).astype(np.int8)
    consts = {"wq": wq, "s": np.float32(0.1), "z": np.int8(0)}
    nodes = [
        node("DequantizeLinear", ["wq", "s", "z"], "w"),
        node("Conv", ["x", "w"], "y", pads=[1, 1, 1, 1]),
    ]
    model = make_model(nodes, {"x": [1, 3, 8, 8]}, ["y", "w"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config, {"x": rand(1, 3, 8, 8)})
    assert [(p.backend, p.nodes) for p in report.plan.partitions] == [("dnnl", ["w", "y"])]
