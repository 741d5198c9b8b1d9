"""dnnl backend: ops and patterns match onnxruntime, composites are claimed, artifacts round-trip,
damaged artifacts and bad inputs are refused before native code runs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import ops, plugin
from byoc_dnnl.codegen import Artifact
from byoc_dnnl.runtime import Runtime

DNNL = {"backends": ["dnnl"]}
RNG = np.random.default_rng(0)


@pytest.fixture
def keep_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a tiny test model with onnxruntime ops around its partition: the size rule
    (plugin.TINY_MACS, tested on its own) would send the partition back to onnxruntime."""
    monkeypatch.setattr(plugin, "TINY_MACS", 0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def conv_stem(c_out: int = 8) -> tuple[list, dict]:
    """x[1,3,10,12] -> Conv 3x3 -> 'h' [1,c_out,10,12]: gives each case a compute-heavy op."""
    return [node("Conv", ["x", "w0", "b0"], "h", pads=[1, 1, 1, 1])], {
        "w0": rand(c_out, 3, 3, 3),
        "b0": rand(c_out),
    }


def claimed(report: byoc.CompareReport, op_type: str) -> None:
    plan = report.plan
    owners = [
        d.backend
        for name, d in plan.decisions.items()
        if plan.model.graph.node[_index(plan, name)].op_type == op_type
    ]
    assert owners and all(o == "dnnl" for o in owners), (op_type, owners, plan.table())


def _index(plan: byoc.Plan, name: str) -> int:
    return next(i for i, n in enumerate(plan.model.graph.node) if n.name == name)


# (op, extra inputs {name: shape}, attrs, constants); each reads 'h' [1,8,10,12]
UNARY = [
    ("Relu", {}, {}),
    ("LeakyRelu", {}, {"alpha": 0.2}),
    ("Sigmoid", {}, {}),
    ("Tanh", {}, {}),
    ("HardSigmoid", {}, {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}, {}),
    ("Elu", {}, {"alpha": 0.7}),
    ("Erf", {}, {}),
    ("Abs", {}, {}),
]


@pytest.mark.parametrize(("op", "attrs"), [(u[0], u[2]) for u in UNARY])
def test_unary_ops_match_onnxruntime(op: str, attrs: dict) -> None:
    nodes, consts = conv_stem()
    model = make_model(
        [*nodes, node(op, ["h"], "y", **attrs)], {"x": [1, 3, 10, 12]}, ["y"], consts
    )
    claimed(assert_matches_onnxruntime(model, DNNL), op)


def test_clip_matches_onnxruntime() -> None:
    nodes, consts = conv_stem()
    consts |= {"lo": np.float32(-0.5), "hi": np.float32(0.7)}
    model = make_model(
        [*nodes, node("Clip", ["h", "lo", "hi"], "y")], {"x": [1, 3, 10, 12]}, ["y"], consts
    )
    claimed(assert_matches_onnxruntime(model, DNNL), "Clip")


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("other", ["channel", "full", "scalar", "row", "input_first"])
def test_binary_ops_with_broadcasting(op: str, other: str) -> None:
    nodes, consts = conv_stem()
    inputs: dict = {"x": [1, 3, 10, 12]}
    b = {"channel": rand(8, 1, 1), "scalar": np.float32(1.5), "row": rand(12)}.get(other)
    if other in ("full", "input_first"):
        inputs["z"] = [1, 8, 10, 12] if other == "full" else [8, 1, 1]
    else:
        consts["c"] = b if op != "Div" else np.abs(b) + 0.5  # type: ignore[operator]
    operand = "z" if "z" in inputs else "c"
    args = [operand, "h"] if other == "input_first" and op != "Div" else ["h", operand]
    model = make_model([*nodes, node(op, args, "y")], inputs, ["y"], consts)
    claimed(assert_matches_onnxruntime(model, DNNL), op)


@pytest.mark.parametrize(
    ("attrs", "w_shape"),
    [
        ({"pads": [1, 1, 1, 1]}, (6, 8, 3, 3)),
        ({"strides": [2, 2], "pads": [0, 1, 2, 1]}, (6, 8, 3, 3)),
        ({"dilations": [2, 2], "pads": [2, 2, 2, 2]}, (6, 8, 3, 3)),
        ({"group": 8, "pads": [1, 1, 1, 1]}, (8, 1, 3, 3)),
        ({"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 2]}, (6, 4, 3, 3)),
        ({"auto_pad": "VALID"}, (6, 8, 1, 1)),
    ],
)
def test_conv_attributes(attrs: dict, w_shape: tuple) -> None:
    nodes, consts = conv_stem()
    consts |= {"w": rand(*w_shape), "b": rand(w_shape[0])}
    model = make_model(
        [*nodes, node("Conv", ["h", "w", "b"], "y", **attrs)], {"x": [1, 3, 10, 12]}, ["y"], consts
    )
    claimed(assert_matches_onnxruntime(model, DNNL), "Conv")


def test_conv1d_and_unsupported_conv_is_refused_with_reason() -> None:
    model = make_model(
        [node("Conv", ["x", "w"], "y")], {"x": [1, 4, 9]}, ["y"], {"w": rand(5, 4, 3)}
    )
    claimed(assert_matches_onnxruntime(model, DNNL), "Conv")
    dynamic = make_model(
        [node("Conv", ["x", "w"], "y")], {"x": ["N", 4, 9]}, ["y"], {"w": rand(5, 4, 3)}
    )
    plan = byoc.partition(dynamic, DNNL)
    reasons = [r for _, r in plan.decisions["y"].refusals]
    assert any("dynamic shape" in r for r in reasons), reasons


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
        {"group": 2},
    ],
)
def test_conv_transpose(attrs: dict) -> None:
    nodes, consts = conv_stem()
    consts |= {
        "w": rand(8, 3 if attrs.get("group") != 2 else 2, 3, 3),
        "b": rand(3 if attrs.get("group") != 2 else 4),
    }
    model = make_model(
        [*nodes, node("ConvTranspose", ["h", "w", "b"], "y", **attrs)],
        {"x": [1, 3, 10, 12]},
        ["y"],
        consts,
    )
    claimed(assert_matches_onnxruntime(model, DNNL), "ConvTranspose")


@pytest.mark.parametrize(
    ("oc", "k", "stride", "shuffled"),
    [(1, 2, 2, True), (3, 3, 3, True), (5, 2, 2, False), (1, 3, 2, False)],
)
def test_a_conv_transpose_of_few_channels_whose_kernel_is_its_stride_is_a_depth_to_space(
    oc: int, k: int, stride: int, shuffled: bool
) -> None:
    """A ConvTranspose of up to 4 output channels whose kernel equals its stride (no overlap:
    a DBNet head) runs as a 1x1 convolution, then a view, transpose and view; with more
    channels, or overlapping windows (kernel 3, stride 2), it stays one deconvolution. Both
    match onnxruntime."""
    nodes, consts = conv_stem()
    consts |= {"w": rand(8, oc, k, k), "b": rand(oc)}
    deconv = node("ConvTranspose", ["h", "w", "b"], "d", strides=[stride, stride])
    sigmoid = node("Sigmoid", ["d"], "y")
    model = make_model([*nodes, deconv, sigmoid], {"x": [1, 3, 10, 12]}, ["y"], consts)
    assert_matches_onnxruntime(model, DNNL)
    step = _dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    kernels = [n["kind"] for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    assert ("deconv" not in kernels) == shuffled, kernels
    if shuffled:
        assert kernels.count("conv") == 2 and "transpose" in kernels, kernels


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("GlobalAveragePool", {}),
        ("GlobalMaxPool", {}),
    ],
)
def test_pooling(op: str, attrs: dict) -> None:
    nodes, consts = conv_stem()
    model = make_model(
        [*nodes, node(op, ["h"], "y", **attrs)], {"x": [1, 3, 11, 12]}, ["y"], consts
    )
    claimed(assert_matches_onnxruntime(model, DNNL), op)


MODES = [{}, {"backend": {"dnnl": {"codegen": "c"}}}]


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_pooling_and_lrn_over_a_plain_source_run_channels_last(mode: dict) -> None:
    """A MaxPool or LRN reading the partition's NCHW input would run oneDNN's scalar
    ``simple_nchw`` or reference kernel (10-100x slower than its jit kernels) where oneDNN
    has no jit kernel for NCHW (pooling on AVX2; LRN depends on the CPU); it runs on a
    channels-last copy instead, in both codegen modes."""
    consts = {"w": rand(16, 32, 3, 3)}
    nodes = [
        node("MaxPool", ["x"], "p", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("LRN", ["x"], "n0", size=5, alpha=0.02, beta=0.75, bias=1.5),
        node("MaxPool", ["n0"], "n", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("Concat", ["p", "n"], "pn", axis=1),
        node("Conv", ["pn", "w"], "y", pads=[1, 1, 1, 1]),
    ]
    model = make_model(nodes, {"x": [1, 16, 21, 21]}, ["y"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "MaxPool")
    claimed(report, "LRN")
    impls = dnnl_impls(byoc.compile(model, config))
    assert any(i.startswith("pooling ") for i in impls), impls
    assert any(i.startswith("lrn ") for i in impls), impls
    assert not any(i.split()[1].startswith(ops.SLOW) for i in impls), impls


def test_lrn_of_even_size_is_refused_with_reason() -> None:
    """oneDNN's LRN window is centred; ONNX's reaches one channel further up for even sizes
    (onnxruntime refuses to run them at all, so this compares nothing)."""
    nodes, consts = conv_stem()
    nodes.append(node("LRN", ["h"], "y", size=4))
    plan = byoc.partition(make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts), DNNL)
    decision = plan.decisions["y"]
    assert decision.backend == "onnxruntime"
    assert "LRN of size 4" in str(decision.refusals), decision.refusals


@pytest.mark.usefixtures("keep_tiny")
def test_inference_dropout_is_claimed_and_training_dropout_is_not() -> None:
    """Inference-mode Dropout is the identity, so it does not cut a partition in two, also
    with a mask output nothing reads (as old exporters write it); Dropout whose mask is read,
    or in training mode, stays with onnxruntime."""
    nodes, consts = conv_stem()
    consts |= {"w1": rand(8, 8, 1, 1), "on": np.array(True)}
    nodes += [
        node("Dropout", ["h"], ["d", "unused"]),
        node("Conv", ["d", "w1"], "y"),
        node("Dropout", ["y", "", "on"], "t"),
        node("Dropout", ["y"], ["u", "mask"]),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "t", "u", "mask"], consts)
    plan = byoc.partition(model, DNNL)
    assert plan.decisions["d"].backend == "dnnl"
    assert "training mode" in str(plan.decisions["t"].refusals)
    assert "mask output that is read" in str(plan.decisions["u"].refusals)
    assert len(plan.partitions) == 1, plan.table()
    inference = make_model(nodes[:3], {"x": [1, 3, 10, 12]}, ["y"], consts)
    assert_matches_onnxruntime(inference, DNNL)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_slice_keeps_a_temporal_conv_net_in_one_partition(mode: dict) -> None:
    """A dilated 1-D conv block that pads with Concat and trims with Slice (as TCNs and U-Nets
    do) is one partition: static Slices are windows of their source, any axis, negative and
    clamped bounds, on a channels-last source too."""
    i64 = np.int64
    consts = {
        "w0": rand(16, 4, 3),
        "w1": rand(16, 16, 3),
        "zeros": np.zeros((1, 16, 4), np.float32),
        "s0": np.array([2], i64),
        "e0": np.array([-2], i64),
        "ax": np.array([2], i64),
        "s1": np.array([0, 1], i64),
        "e1": np.array([1000, 15], i64),
        "ax1": np.array([2, 1], i64),
    }
    nodes = [
        node("Conv", ["x", "w0"], "h", pads=[1, 1]),
        node("Slice", ["h", "s0", "e0", "ax"], "t"),  # trim 2 steps each side
        node("Concat", ["zeros", "t"], "p", axis=2),
        node("Conv", ["p", "w1"], "c", dilations=[2]),
        node("Slice", ["c", "s1", "e1", "ax1"], "y"),  # channels 1..14, every step
    ]
    model = make_model(nodes, {"x": [1, 4, 40]}, ["y"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Slice")
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_slices_with_steps_keep_a_focus_layer_in_the_partition(mode: dict) -> None:
    """YOLO's focus layer (space-to-depth as four Slices with step 2, then Concat and Conv) is
    claimed: a Slice with steps reads a stepped view of its source, on a plain input and on a
    channels-last conv output alike; clamped ends and a step of 3 too."""
    i64 = np.int64
    consts = {"w": rand(8, 12, 3, 3), "w2": rand(4, 8, 1, 1), "two": np.array([2, 2], i64)}
    consts |= {"axes": np.array([2, 3], i64), "end": np.array([1 << 40, 1 << 40], i64)}
    nodes = []
    for k, (r, c) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        consts[f"s{k}"] = np.array([r, c], i64)
        nodes.append(node("Slice", ["x", f"s{k}", "end", "axes", "two"], f"f{k}"))
    consts |= {"s": np.array([1, 0], i64), "e": np.array([9, -1], i64), "st": np.array([3, 2], i64)}
    nodes += [
        node("Concat", ["f0", "f1", "f2", "f3"], "cat", axis=1),
        node("Conv", ["cat", "w"], "h", pads=[1, 1, 1, 1]),
        node("Slice", ["h", "s", "e", "axes", "st"], "t"),  # of a conv output: channels-last
        node("Conv", ["t", "w2"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 14, 16]}, ["y"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Slice")
    assert len(report.plan.partitions) == 1 and not report.plan.segments


@pytest.mark.usefixtures("keep_tiny")
def test_slice_with_negative_or_overhanging_steps_is_refused_with_reason() -> None:
    nodes, consts = conv_stem()
    consts |= {
        k: np.array(v, np.int64) for k, v in [("s", [9]), ("e", [0]), ("a", [2]), ("st", [-2])]
    }
    consts |= {k: np.array([v], np.int64) for k, v in [("st2", 2), ("z", 0), ("e2", 11), ("a3", 3)]}
    nodes += [
        node("Slice", ["h", "s", "e", "a", "st"], "y"),
        node("Slice", ["h", "z", "e2", "a", "st2"], "over"),  # 0, 2, .. 10 of 11: one too many
        node("Slice", ["h", "z", "e2", "a3", "st2"], "fine"),  # 0, 2, .. 10 of 12
    ]
    model = make_model(nodes, {"x": [1, 3, 11, 12]}, ["y", "over", "fine"], consts)
    plan = byoc.partition(model, DNNL)
    assert "negative steps" in str(plan.decisions["y"].refusals)
    assert "overhangs" in str(plan.decisions["over"].refusals)
    assert plan.decisions["fine"].backend == "dnnl"


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_residual_add_with_the_conv_second_fuses_as_a_sum(mode: dict) -> None:
    """PyTorch exports ``x + conv(x)`` as Add(x, conv): the Add is commutative, so it becomes the
    convolution's sum post-op as Add(conv, x) does, not a separate binary kernel."""
    nodes, consts = conv_stem()
    consts |= {"w1": 0.1 * rand(8, 8, 3, 3), "w2": 0.1 * rand(8, 8, 3, 3)}
    nodes += [
        node("Conv", ["h", "w1"], "c1", pads=[1, 1, 1, 1]),
        node("Add", ["h", "c1"], "r1"),
        node("Conv", ["r1", "w2"], "c2", pads=[1, 1, 1, 1]),
        node("Mul", ["r1", "c2"], "y"),  # not a sum: a binary post-op
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    assert_matches_onnxruntime(model, config)
    compiled = byoc.compile(model, config)
    impls = dnnl_impls(compiled)
    kinds = [i.split()[0] for i in impls]
    assert kinds.count("convolution") == 3 and "binary" not in kinds, impls
    graph = _dnnl_step(compiled).artifact.graph
    post_ops = [[p["kind"] for p in n["post_ops"]] for n in graph["nodes"] if n["op"] == "kernel"]
    assert post_ops == [[], ["sum"], ["binary"]], post_ops


def dnnl_kinds(compiled: byoc.CompiledModel) -> list[str]:
    """The kinds of the kernels in the JSON graphs of the dnnl partitions."""
    return [
        n["kind"]
        for s in compiled.steps
        if s.unit.backend == "dnnl"
        for n in s.artifact.graph["nodes"]
        if n["op"] == "kernel"
    ]


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize("read_later", [False, True])
def test_residual_sums_add_in_place_when_nothing_reads_the_input_after(
    mode: dict, read_later: bool
) -> None:
    """A sum post-op accumulates into its destination, so the residual input is copied there
    first, unless nothing reads it after the block's last convolution: then the destination is
    the input's own storage (two residual blocks in a row, each adding into its input). When a
    later layer reads the first block's input, its copy stays, and that layer reads the input
    unchanged."""
    nodes, consts = conv_stem()
    consts |= {f"w{i}": 0.1 * rand(8, 8, 3, 3) for i in range(1, 7)}
    nodes.append(node("Conv", ["h", "w1"], "x0", pads=[1, 1, 1, 1]))
    for i, (x, r) in enumerate([("x0", "r1"), ("r1", "r2")]):
        nodes += [
            node("Conv", [x, f"w{2 + 2 * i}"], f"a{i}", pads=[1, 1, 1, 1]),
            node("Relu", [f"a{i}"], f"t{i}"),
            node("Conv", [f"t{i}", f"w{3 + 2 * i}"], f"c{i}", pads=[1, 1, 1, 1]),
            node("Add", [f"c{i}", x], r),
        ]
    nodes.append(node("Conv", ["r2", "w6"], "o", pads=[1, 1, 1, 1]))
    nodes.append(node("Mul", ["o", "x0"], "y") if read_later else node("Relu", ["o"], "y"))
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    assert_matches_onnxruntime(model, config)
    if mode:
        return  # the C source mode copies: its kernels are the op-level library's
    step = _dnnl_step(byoc.compile(model, config))
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    sums = [k for k, n in enumerate(kernels) if "sum" in [p["kind"] for p in n["post_ops"]]]
    assert len(sums) == 2, [n["post_ops"] for n in kernels]
    steps = [[i.split()[0] for k, i in step.runtime.implementations() if k == s] for s in sums]
    copied = [["reorder", "convolution"], ["convolution"]]
    assert steps == (copied if read_later else [["convolution"], ["convolution"]]), steps


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_shufflenet_v2_unit_is_one_partition_with_one_shuffle_kernel(mode: dict) -> None:
    """ShuffleNet v2's unit: Split the channels, convolve one half, Concat, then the channel
    shuffle (Reshape to (N, g, C/g, H, W), Transpose, Reshape back). Split is claimed as windows
    of its input, and the shuffle is one kernel (a reorder in the source's own layout) instead
    of a view, a transpose and a view; unequal split sizes too."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"w1": rand(4, 4, 1, 1), "w2": rand(8, 8, 3, 3), "sizes": np.array([3, 5], i64)}
    consts |= {"split": np.array([1, 2, 4, 10, 12], i64), "back": np.array([1, 8, 10, 12], i64)}
    consts["split4"] = np.array([1, 4, 2, 10, 12], i64)
    nodes += [
        node("Split", ["h"], ["a", "b"], axis=1, num_outputs=2),
        node("Conv", ["b", "w1"], "c"),
        node("Relu", ["c"], "r"),
        node("Concat", ["a", "r"], "cat", axis=1),
        node("Reshape", ["cat", "split"], "g"),
        node("Transpose", ["g"], "t", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t", "back"], "s"),
        node("Conv", ["s", "w2"], "u", pads=[1, 1, 1, 1]),
        node("Reshape", ["u", "split4"], "g4"),  # 4 groups, of a convolution's output
        node("Transpose", ["g4"], "t4", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t4", "back"], "s4"),
        node("Split", ["s4", "sizes"], ["y", "z"], axis=-3),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "z"], consts, opset=18)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Split")
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    kinds = dnnl_kinds(byoc.compile(model, config))
    assert kinds.count("shuffle") == 2 and "transpose" not in kinds and "view" not in kinds, kinds
    assert kinds.count("slice") == 4, kinds


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_zero_pad_before_a_convolution_becomes_its_padding(mode: dict) -> None:
    """A causal 1-D conv's left Pad (pads as an input, then with axes, opset 18), an
    asymmetric "same" Pad before a stride-2 conv (EfficientNet's), and a Concat of zeros in
    front of a dilated conv are the convolutions' own padding: no copy is left."""
    i64 = np.int64
    consts = {"w0": rand(8, 4, 3), "w1": rand(8, 8, 3), "w2": rand(8, 8, 3)}
    consts |= {"p0": np.array([0, 0, 2, 0, 0, 0], i64), "p1": np.array([4, 0], i64)}
    consts |= {"ax": np.array([-1], i64), "z": np.zeros((1, 8, 3), np.float32)}
    consts |= {"p2": np.array([0, 1], i64), "w3": rand(8, 8, 3)}
    nodes = [
        node("Pad", ["x", "p0"], "xp"),
        node("Conv", ["xp", "w0"], "h0"),  # causal: 2 on the left
        node("Relu", ["h0"], "r0"),
        node("Pad", ["r0", "p1", "", "ax"], "rp"),
        node("Conv", ["rp", "w1"], "h1", dilations=[2]),
        node("Concat", ["z", "h1", "z"], "hp", axis=2),
        node("Conv", ["hp", "w2"], "h2", dilations=[3]),
        node("Pad", ["h2", "p2", "", "ax"], "h3"),  # "same" for stride 2: one more on the right
        node("Conv", ["h3", "w3"], "y", strides=[2]),
    ]
    model = make_model(nodes, {"x": [1, 4, 24]}, ["y"], consts, opset=18)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Pad")
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    assert dnnl_kinds(byoc.compile(model, config)) == ["conv"] * 4


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_tanh_runs_as_twice_a_logistic_minus_one(mode: dict) -> None:
    """oneDNN's AVX2 tanh is several times slower than its logistic, so tanh is
    2 * logistic(2x) - 1: post-ops after a conv, and a standalone Tanh (after a Concat) is one
    binary kernel, x + x with those post-ops. Within 1e-6 of tanh from -12 to 12."""
    nodes, consts = conv_stem()
    nodes += [
        node("Tanh", ["h"], "t"),
        node("Concat", ["t", "x"], "c", axis=1),
        node("Tanh", ["c"], "u"),
        node("Conv", ["u", "w1"], "y"),
    ]
    consts["w1"] = rand(4, 11, 1, 1)
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "u"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    x = np.linspace(-12, 12, 360, dtype=np.float32).reshape(1, 3, 10, 12)
    x[0, 0, 0, :6] = [0, 1e-7, -1e-7, 1e-3, 50, -50]
    out = byoc.compile(model, config).run({"x": x})["u"]
    assert np.max(np.abs(out[:, 8:] - np.tanh(x.astype(np.float64)))) < 1e-6
    assert_matches_onnxruntime(model, config)
    impls = dnnl_impls(byoc.compile(model, config))
    assert not any(i.startswith("eltwise") for i in impls), impls
    assert sum(i.startswith("binary") for i in impls) == 1, impls


def dilated_block(pads: list[int], dilation: int = 128, strides: int = 1, batch: int = 1):
    """x (batch, 64, 300) -> Conv k=3 (bias, dilation, pads, strides) -> Relu, plus x when the
    shapes agree (a residual, as TCNs and WaveNets add one)."""
    nodes = [
        node("Conv", ["x", "w", "b"], "c", dilations=[dilation], pads=pads, strides=[strides]),
        node("Relu", ["c"], "r"),
    ]
    residual = sum(pads) == 2 * dilation and strides == 1
    nodes.append(node("Add", ["x", "r"], "y") if residual else node("Sigmoid", ["r"], "y"))
    consts = {"w": rand(64, 64, 3) * 0.1, "b": rand(64)}
    return make_model(nodes, {"x": [batch, 64, 300]}, ["y"], consts)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize(
    "case, convolutions",
    [
        ({"pads": [0, 0]}, 3),
        ({"pads": [128, 128]}, 3),  # "same", with a residual
        ({"pads": [256, 0], "strides": 2}, 3),  # causal
        ({"pads": [128, 128], "batch": 2}, 1),  # a batch's windows are not dense
        ({"pads": [16, 16], "dilation": 16}, 1),  # taps 4 KiB apart: oneDNN's own is faster
    ],
    ids=["unpadded", "same-residual", "causal-strided", "batch", "near"],
)
def test_a_dilated_1d_conv_with_far_apart_taps_is_one_1x1_conv_per_tap(
    mode: dict, case: dict, convolutions: int
) -> None:
    """oneDNN's dilated convolution slows down as its taps move apart; when they are 32 KiB
    apart or more (dilation x channels x 4 bytes), the JSON runtime runs one 1x1 convolution
    per tap over a window of the source, summed in place, the post-ops (a residual too) on the
    last. Padded, strided and residual forms match onnxruntime; a batch and close taps keep
    one convolution, and so does C source mode."""
    model = dilated_block(**case)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    assert_matches_onnxruntime(model, config)
    compiled = byoc.compile(model, config)
    assert dnnl_kinds(compiled) == ["conv"], dnnl_kinds(compiled)
    convs = [i for i in dnnl_impls(compiled) if i.startswith("convolution ")]
    assert len(convs) == (convolutions if not mode else 1), convs
    assert all("1x1" in i for i in convs) == (len(convs) == 3), convs


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_identity_views_do_not_stop_fusion(mode: dict) -> None:
    """Paddle exports an Identity after every op, and its learnable affine blocks scale and
    shift by scalars around each activation: Conv, Add bias, Identity, Mul, Identity, Add,
    Identity, HardSwish, Mul, Add, Identity, Conv. The Identities go, the scalar affine
    before the activation folds into the weights and the two after it are one linear post-op:
    two conv kernels, nothing else. An Identity that is a partition output stays."""
    nodes, consts = conv_stem()
    consts |= {"a": np.float32(0.7), "b": np.float32(0.2), "c": np.float32(1.3)}
    consts |= {"d": np.float32(-0.1), "w1": rand(4, 8, 1, 1), "b1": rand(1, 8, 1, 1)}
    nodes += [
        node("Add", ["h", "b1"], "h1"),
        node("Identity", ["h1"], "i1"),
        node("Mul", ["a", "i1"], "m1"),
        node("Identity", ["m1"], "i2"),
        node("Add", ["i2", "b"], "a1"),
        node("Identity", ["a1"], "i3"),
        node("HardSwish", ["i3"], "s"),
        node("Mul", ["c", "s"], "m2"),
        node("Add", ["m2", "d"], "a2"),
        node("Identity", ["a2"], "i4"),
        node("Conv", ["i4", "w1"], "y"),
        node("Identity", ["y"], "z"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "z"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    assert_matches_onnxruntime(model, config)
    graph = _dnnl_step(byoc.compile(model, config)).artifact.graph
    kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
    assert [k["kind"] for k in kernels] == ["conv", "conv", "view"]
    assert [p["alg"] for p in kernels[0]["post_ops"]] == ["hardswish", "linear"]


def test_a_div_by_a_subnormal_is_not_folded_into_the_weights() -> None:
    """Dividing by a number whose inverse overflows float32 (1e-40, scalar or per channel)
    stays a division (a binary post-op): folded, the weights would hold inf and 0 / v would
    read NaN. A normal divisor folds into the convolution's weights."""
    nodes, consts = conv_stem()
    tiny = np.float32(1e-40)
    consts |= {"s": tiny, "v": np.full((1, 8, 1, 1), tiny), "n": np.float32(4.0)}
    for divisor, post_ops in (("s", ["div"]), ("v", ["div"]), ("n", [])):
        nodes_d = [*nodes, node("Div", ["h", divisor], "y")]
        model = make_model(nodes_d, {"x": [1, 3, 10, 12]}, ["y"], consts)
        step = _dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
        (conv,) = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
        assert [p["alg"] for p in conv["post_ops"]] == post_ops, divisor
        assert all(np.isfinite(w).all() for w in step.artifact.weights.values()), divisor


def test_a_rank_one_transpose_between_views_is_no_shuffle() -> None:
    """Reshape to one dim, Transpose of it, Reshape back: not a channel shuffle (the shuffle
    rewrite once indexed a dim that is not there and failed codegen)."""
    nodes, consts = conv_stem()
    consts |= {"flat": np.array([-1], np.int64), "back": np.array([1, 8, 10, 12], np.int64)}
    nodes += [
        node("Reshape", ["h", "flat"], "f"),
        node("Transpose", ["f"], "t", perm=[0]),
        node("Reshape", ["t", "back"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    assert_matches_onnxruntime(model, {**DNNL, "compile": {"placement": "static"}})


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_reduce_over_the_spatial_axes_is_a_global_pooling(mode: dict) -> None:
    """Squeeze-excite as Paddle exports it (PP-OCRv6): ReduceMean over axes 2 and 3 with
    keepdims, then 1x1 convs; also without keepdims (a view of the pooled result), ReduceMax,
    axes as an input (opset 18) and a 1-D signal. One partition, pooling kernels."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"w1": rand(4, 8, 1, 1), "w2": rand(8, 4, 1, 1), "sp": np.array([-1, 2], i64)}
    consts |= {"w3": rand(8, 5), "w4": rand(6, 8, 3), "ax": np.array([2], i64)}
    nodes += [
        node("ReduceMean", ["h", "sp"], "m"),  # axes [3, 2] as an input
        node("Conv", ["m", "w1"], "s1"),
        node("Relu", ["s1"], "s2"),
        node("Conv", ["s2", "w2"], "s3"),
        node("Sigmoid", ["s3"], "s4"),
        node("Mul", ["h", "s4"], "se"),
        node("ReduceMax", ["se", "sp"], "g", keepdims=0),  # (1, 8)
        node("Reshape", ["se", "shape"], "seq"),  # (1, 8, 120): a 1-D signal
        node("Conv", ["seq", "w4"], "c1"),
        node("ReduceMean", ["c1", "ax"], "y1", keepdims=0),  # (1, 6)
        node("MatMul", ["g", "w3"], "y0"),
    ]
    consts["shape"] = np.array([1, 8, 120], i64)
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y0", "y1"], consts, opset=18)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "ReduceMean")
    claimed(report, "ReduceMax")
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    assert dnnl_kinds(byoc.compile(model, config)).count("pool") == 3


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_reduce_over_adjacent_axes_is_a_pooling(mode: dict) -> None:
    """A sentence embedding's mean pooling (ReduceSum over the tokens of the masked hidden
    states and of the mask, Clip, Div), and reduces over the channels, the last axis, all axes
    (none named), axes of size 1 only, and none (noop_with_empty_axes): one partition whose
    reduce kernels all run oneDNN's jit pooling, in both codegen modes."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"w": rand(12, 16), "t": np.array([1], i64), "lo": np.float32(1e-9)}
    consts |= {"c": np.array([1], i64), "cs": np.array([1, 2, 3], i64), "z": np.array([], i64)}
    consts |= {"n": np.array([0], i64), "last": np.array([-1], i64)}
    nodes += [
        node("Reshape", ["h", "seq"], "hs"),  # (1, 80, 12): 80 tokens of 12 features
        node("MatMul", ["hs", "w"], "e"),  # (1, 80, 16)
        node("Mul", ["e", "mask"], "em"),
        node("ReduceSum", ["em", "t"], "s", keepdims=0),  # (1, 16)
        node("ReduceSum", ["mask", "t"], "ms", keepdims=0),  # (1, 1)
        node("Clip", ["ms", "lo"], "mc"),
        node("Div", ["s", "mc"], "y0"),
        node("ReduceSum", ["h", "c"], "y1"),  # over 8 channels of 120 pixels
        node("ReduceMean", ["h", "cs"], "y2", keepdims=0),  # (1,): every axis but the batch
        node("ReduceMax", ["e", "last"], "y3"),  # (1, 80, 1): a rank-3 global pooling
        node("ReduceSum", ["e"], "y4"),  # (1, 1, 1): all axes
        node("ReduceMean", ["e", "n"], "y5"),  # axes of size 1 only: a view
        node("ReduceSum", ["e", "z"], "y6", noop_with_empty_axes=1),  # an identity
    ]
    consts["seq"] = np.array([1, 80, 12], i64)
    outputs = ["y0", "y1", "y2", "y3", "y4", "y5", "y6"]
    model = make_model(nodes, {"x": [1, 3, 10, 12], "mask": [1, 80, 1]}, outputs, consts, opset=18)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    for op_type in ("ReduceSum", "ReduceMean", "ReduceMax"):
        claimed(report, op_type)
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    compiled = byoc.compile(model, config)
    kinds = dnnl_kinds(compiled)
    assert (kinds.count("reduce"), kinds.count("pool")) == (5, 1), kinds
    impls = [i for s in compiled.steps for _, i in s.runtime.implementations()]
    assert sum(i.startswith("pooling jit") for i in impls) == 6, impls


def test_reduce_over_axes_apart_is_refused_with_reason() -> None:
    """A sum over the channels and the columns (not the rows between them) is no pooling of a
    view: onnxruntime computes it, and byoc explain says why."""
    nodes, consts = conv_stem()
    consts["a"] = np.array([1, 3], np.int64)
    nodes += [node("ReduceSum", ["h", "a"], "y")]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts, opset=18)
    decisions = assert_matches_onnxruntime(model, DNNL).plan.decisions
    assert decisions["y"].backend == "onnxruntime"
    assert any("must be adjacent" in r for _, r in decisions["y"].refusals)


@pytest.mark.usefixtures("keep_tiny")
def test_pad_that_is_not_a_zero_padding_of_a_convolution_is_a_concat() -> None:
    """A Pad by another value, or of the channels, or read by something else than a conv, is
    computed (a Concat of constant blocks); reflect padding and crops are refused with the
    reason."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"pc": np.array([0, 1, 1, 0, 0, 2, 0, 1], i64), "v": np.float32(1.5)}
    consts |= {"neg": np.array([0, 0, -1, 0, 0, 0, 0, 0], i64), "w1": rand(4, 11, 3, 3)}
    nodes += [
        node("Pad", ["h", "pc", "v"], "hp"),  # value 1.5, channels 1 + 2 and rows too
        node("Conv", ["hp", "w1"], "y"),
        node("Pad", ["h", "pc"], "r", mode="reflect"),
        node("Pad", ["h", "neg"], "c"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "r", "c"], consts)
    config = {**DNNL, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    assert report.plan.decisions["hp"].backend == "dnnl"
    assert "'reflect' is not supported" in str(report.plan.decisions["r"].refusals)
    assert "negative pads" in str(report.plan.decisions["c"].refusals)
    assert dnnl_kinds(byoc.compile(model, config)).count("concat") == 3


def test_only_an_exact_channel_shuffle_becomes_a_shuffle_kernel() -> None:
    """A Reshape-Transpose-Reshape that swaps other dims, or whose middle value is also a model
    output, is kept as it is; the shuffle of the convolution's (blocked) output is one kernel."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"split": np.array([1, 2, 4, 10, 12], i64), "back": np.array([1, 8, 10, 12], i64)}
    nodes += [
        node("Reshape", ["h", "split"], "g"),
        node("Transpose", ["g"], "t", perm=[0, 1, 2, 4, 3]),
        node("Reshape", ["t", "back"], "y"),
        node("Transpose", ["g"], "t2", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t2", "back"], "z"),
        node("Reshape", ["h", "split"], "g3"),
        node("Transpose", ["g3"], "t3", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t3", "back"], "w"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y", "z", "g", "w"], consts)
    config = {**DNNL, "compile": {"placement": "static"}}
    assert_matches_onnxruntime(model, config)
    kinds = dnnl_kinds(byoc.compile(model, config))
    assert kinds.count("shuffle") == 1 and kinds.count("transpose") == 2, kinds


# (mode, coordinate_transformation_mode, nearest_mode, scales or None, sizes or None)
RESIZES = [
    ("nearest", "asymmetric", "floor", [1, 1, 2, 2], None),  # PyTorch's and Paddle's upsample
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 2, 3], None),
    ("nearest", "asymmetric", "floor", None, [1, 8, 30, 36]),
    ("nearest", "half_pixel", "round_prefer_ceil", [1, 1, 3, 3], None),
    ("linear", "half_pixel", "", [1, 1, 2, 2], None),
    ("linear", "pytorch_half_pixel", "", None, [1, 8, 20, 30]),
    ("linear", "half_pixel", "", [1, 1, 0.5, 0.25], None),
]


def _resize(mode: str, how: str, rounding: str, scales: list | None, sizes: list | None):
    """Conv -> Resize -> Conv over x [1,3,10,12]: the Resize sits inside a partition."""
    nodes, consts = conv_stem()
    consts |= {"w1": rand(8, 8, 3, 3), "roi": np.zeros(0, np.float32)}
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
    else:
        consts["sizes"] = np.array(sizes, np.int64)
    ins = ["h", "roi", "scales" if scales is not None else "", *(["sizes"] if sizes else [])]
    attrs = {"mode": mode, "coordinate_transformation_mode": how}
    if rounding:
        attrs["nearest_mode"] = rounding
    nodes += [node("Resize", ins, "r", **attrs), node("Conv", ["r", "w1"], "y", pads=[1, 1, 1, 1])]
    return make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize("case", RESIZES, ids=lambda c: f"{c[0]}-{c[1]}-{c[3] or c[4]}")
def test_resize_is_claimed_where_onednn_resamples_the_same(case: tuple, mode: dict) -> None:
    """Upsampling in detectors' feature pyramids (and linear resizes) runs on oneDNN's
    resampling inside the partition, matching onnxruntime, with no slow implementation."""
    model = _resize(*case)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "Resize")
    assert len(report.plan.partitions) == 1
    impls = dnnl_impls(byoc.compile(model, config))
    assert any(i.startswith("resampling ") for i in impls), impls
    assert not any(i.split()[1].startswith(ops.SLOW) for i in impls), impls


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        (("cubic", "half_pixel", "", [1, 1, 2, 2], None), "mode 'cubic'"),
        (("nearest", "asymmetric", "floor", [1, 2, 2, 2], None), "batch or channel axis"),
        (("linear", "asymmetric", "", [1, 1, 2, 2], None), "other positions than oneDNN"),
        (("linear", "align_corners", "", [1, 1, 2, 2], None), "other positions than oneDNN"),
        (("nearest", "half_pixel", "floor", [1, 1, 2, 2], None), "other positions than oneDNN"),
        (("nearest", "tf_crop_and_resize", "", [1, 1, 2, 2], None), "'tf_crop_and_resize'"),
        (("nearest", "half_pixel", "round_prefer_floor", [1, 1, 0.5, 0.5], None), "tie"),
    ],
)
def test_resize_oneDNN_computes_otherwise_is_refused_with_reason(case: tuple, reason: str) -> None:
    """oneDNN resamples at half-pixel positions and rounds ties up: any other mapping (or a
    cubic resize, or one that scales channels) stays with onnxruntime, with the reason."""
    plan = byoc.partition(_resize(*case), DNNL)
    decision = plan.decisions["r"]
    assert decision.backend == "onnxruntime"
    assert reason in str(decision.refusals), decision.refusals


def test_batchnorm_standalone_and_concat() -> None:
    nodes, consts = conv_stem()
    consts |= {"s": rand(8), "bb": rand(8), "m": rand(8), "v": np.abs(rand(8)) + 0.5}
    model = make_model(
        [
            *nodes,
            node("Relu", ["h"], "r"),
            node("BatchNormalization", ["r", "s", "bb", "m", "v"], "bn"),
            node("Concat", ["bn", "h"], "y", axis=1),
        ],
        {"x": [1, 3, 10, 12]},
        ["y"],
        consts,
    )
    report = assert_matches_onnxruntime(model, DNNL)
    claimed(report, "BatchNormalization")
    claimed(report, "Concat")


def test_matmul_gemm_softmax_layernorm_transformer_block() -> None:
    """A small attention + GELU MLP block, all float32 static: dnnl claims all the compute."""
    d, f, t = 16, 32, 6
    consts = {
        "wq": rand(d, d),
        "wk": rand(d, d),
        "wv": rand(d, d),
        "bq": rand(d),
        "scale": np.float32(0.25),
        "g": rand(d),
        "beta": rand(d),
        "w1": rand(d, f),
        "b1": rand(f),
        "w2": rand(f, d),
        "b2": rand(d),
        "sqrt2": np.float32(np.sqrt(2.0)),
        "one": np.float32(1.0),
        "half": np.float32(0.5),
    }
    nodes = [
        node("LayerNormalization", ["x", "g", "beta"], "ln", axis=-1, epsilon=1e-5),
        node("MatMul", ["ln", "wq"], "q0"),
        node("Add", ["q0", "bq"], "q"),
        node("MatMul", ["ln", "wk"], "k"),
        node("MatMul", ["ln", "wv"], "v"),
        node("Transpose", ["k"], "kt", perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], "s0"),
        node("Mul", ["s0", "scale"], "s"),
        node("Softmax", ["s"], "p", axis=-1),
        node("MatMul", ["p", "v"], "att"),
        node("Add", ["att", "x"], "res"),
        node("MatMul", ["res", "w1"], "h0"),
        node("Add", ["h0", "b1"], "h1"),
        node("Div", ["h1", "sqrt2"], "e0"),
        node("Erf", ["e0"], "e1"),
        node("Add", ["e1", "one"], "e2"),
        node("Mul", ["h1", "e2"], "e3"),
        node("Mul", ["e3", "half"], "gelu"),
        node("MatMul", ["gelu", "w2"], "o0"),
        node("Add", ["o0", "b2"], "y"),
    ]
    model = make_model(nodes, {"x": [2, t, d]}, ["y"], consts)
    report = assert_matches_onnxruntime(model, DNNL)
    for op in ("MatMul", "Softmax", "LayerNormalization", "Erf", "Transpose"):
        claimed(report, op)
    assert {"dnnl.dense_bias", "dnnl.gelu"} <= {d.composite for d in report.plan.decisions.values()}
    gemm = make_model(  # with an activation: a lone dense layer is onnxruntime's
        [
            node("Gemm", ["x", "w", "c"], "g", transB=1, alpha=0.5, beta=2.0),
            node("Relu", ["g"], "y"),
        ],
        {"x": [4, 6]},
        ["y"],
        {"w": rand(5, 6), "c": rand(5)},
    )
    claimed(assert_matches_onnxruntime(gemm, DNNL), "Gemm")


def test_a_softmax_writes_over_its_source_only_when_nothing_reads_it_later() -> None:
    """In place when the scores die at the softmax: its arena holds one score tensor less."""
    arena = []
    for later in ("x", "s"):
        nodes = [
            node("MatMul", ["x", "w"], "s"),
            node("Softmax", ["s"], "p", axis=-1),
            node("MatMul", ["p", "w"], "y0"),
            node("Add", ["y0", later], "y"),
        ]
        model = make_model(nodes, {"x": [4, 32, 32]}, ["y"], {"w": rand(32, 32)})
        config = {**DNNL, "compile": {"placement": "static"}}
        claimed(assert_matches_onnxruntime(model, config), "Softmax")
        (step,) = [s for s in byoc.compile(model, config).steps if s.unit.backend == "dnnl"]
        arena.append(step.runtime.arena_bytes)
    assert arena[1] - arena[0] == 4 * 32 * 32 * 4


def _spelled_layernorm(
    opset: int, square: str, affine: bool, axis: int = -1, gamma: tuple = (16,)
) -> onnx.ModelProto:
    """MatMul -> LayerNormalization spelled in basic ops (as exporters before opset 17 write
    it) -> MatMul, over [2, 16, 16]."""
    i64 = np.int64
    consts = {"w0": rand(16, 16), "w1": rand(16, 8), "two": np.float32(2.0)}
    consts |= {"eps": np.float32(1e-5), "g": rand(*gamma), "b": rand(1, 16)}
    axes: dict = {"axes": [axis]} if opset < 18 else {}
    extra = ["ax"] if opset >= 18 else []
    if extra:
        consts["ax"] = np.array([axis], i64)
    nodes = [
        node("MatMul", ["x", "w0"], "h"),
        node("ReduceMean", ["h", *extra], "mean", **axes),
        node("Sub", ["h", "mean"], "d"),
        node("Pow", ["d", "two"], "sq") if square == "Pow" else node("Mul", ["d", "d"], "sq"),
        node("ReduceMean", ["sq", *extra], "var", **axes),
        node("Add", ["eps", "var"], "ve"),
        node("Sqrt", ["ve"], "std"),
        node("Div", ["d", "std"], "n"),
    ]
    if affine:
        nodes += [node("Mul", ["n", "g"], "ng"), node("Add", ["ng", "b"], "ln")]
    else:
        nodes += [node("Identity", ["n"], "ln")]
    nodes += [node("MatMul", ["ln", "w1"], "y")]
    return make_model(nodes, {"x": [2, 16, 16]}, ["y"], consts, opset=opset)


@pytest.mark.parametrize(
    "opset,square,affine", [(13, "Pow", True), (18, "Mul", True), (13, "Pow", False)]
)
@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_layernorm_spelled_in_basic_ops_is_one_layernorm_kernel(
    opset: int, square: str, affine: bool, mode: dict
) -> None:
    """PP-OCR's SVTR blocks and transformers exported before opset 17 spell LayerNormalization
    out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add): it runs as one oneDNN
    layer normalization, so the model stays one partition."""
    model = _spelled_layernorm(opset, square, affine)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    ln = {n for n, d in report.plan.decisions.items() if d.composite == "dnnl.layernorm"}
    assert ln == {"mean", "d", "sq", "var", "ve", "std", "n", *(("ng", "ln") if affine else ())}
    assert dnnl_kinds(byoc.compile(model, config)) == ["matmul", "layernorm", "matmul"]


def test_a_mean_or_gamma_along_another_axis_is_not_a_layernorm() -> None:
    """A mean over another axis is no layer normalization; a gamma of shape (C, 1) varies
    along axis -2, so the normalization is one but the Mul stays outside it."""
    plan = byoc.partition(_spelled_layernorm(13, "Pow", True, axis=1), DNNL)
    assert "dnnl.layernorm" not in {d.composite for d in plan.decisions.values()}
    assert "other axes than the last" in str(plan.decisions["n"].refusals), plan.decisions["n"]
    model = _spelled_layernorm(13, "Pow", True, gamma=(16, 1))
    report = assert_matches_onnxruntime(model, DNNL)
    decisions = report.plan.decisions
    assert decisions["n"].composite == "dnnl.layernorm" and decisions["ng"].composite is None
    assert "gamma varies along other axes" in str(decisions["ln"].refusals)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize("cube", ["pow", "muls"])
def test_gelu_tanh_is_one_post_op_and_powers_are_eltwise(mode: dict, cube: str) -> None:
    """GELU's tanh approximation as GPT-2 (``gelu_new``: a Pow) and PyTorch (two Muls) spell it
    after a dense layer is the composite ``dnnl.gelu_tanh``, one gelu_tanh post-op of the layer;
    Pow by a constant (2: a square, 1.5: oneDNN's pow), Abs and Sqrt are eltwise kernels."""
    f32 = np.float32
    consts = {"w": rand(16, 32), "b": rand(32), "w2": rand(32, 16), "three": f32(3.0)}
    consts |= {"k": f32(0.044715), "s": f32(np.sqrt(2 / np.pi)), "one": f32(1.0)}
    consts |= {"half": f32(0.5), "two": f32(2.0), "e": f32(1.5)}
    if cube == "pow":
        cubed = [node("Pow", ["h", "three"], "cube")]
    else:
        cubed = [node("Mul", ["h", "h"], "sq"), node("Mul", ["h", "sq"], "cube")]
    nodes = [
        node("MatMul", ["x", "w"], "m"),
        node("Add", ["m", "b"], "h"),
        *cubed,
        node("Mul", ["k", "cube"], "kc"),
        node("Add", ["h", "kc"], "in"),
        node("Mul", ["s", "in"], "sc"),
        node("Tanh", ["sc"], "t"),
        node("Add", ["one", "t"], "t1"),
        node("Mul", ["half", "h"], "hh"),
        node("Mul", ["hh", "t1"], "g"),
        node("MatMul", ["g", "w2"], "y"),
        node("Pow", ["y", "two"], "p2"),
        node("Abs", ["y"], "ab"),
        node("Pow", ["ab", "e"], "p15"),
        node("Sqrt", ["ab"], "rt"),
        node("Add", ["p2", "p15"], "z0"),
        node("Add", ["z0", "rt"], "z"),
    ]
    model = make_model(nodes, {"x": [2, 8, 16]}, ["z"], consts, opset=17)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    for op_type in ("Tanh", "Pow", "Abs", "Sqrt"):
        claimed(report, op_type)
    assert "dnnl.gelu_tanh" in {d.composite for d in report.plan.decisions.values()}
    compiled = byoc.compile(model, config)
    graph = _dnnl_step(compiled).artifact.graph
    kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
    assert [p["alg"] for p in kernels[0]["post_ops"]] == ["gelu_tanh"]
    algs = [n["attrs"]["alg"] for n in kernels if n["kind"] == "eltwise"]
    assert sorted(algs) == ["abs", "pow", "sqrt", "square"]


def test_pow_by_a_computed_exponent_is_refused_with_reason() -> None:
    """x ** e with e computed at run time is no eltwise: onnxruntime computes it."""
    nodes, consts = conv_stem()
    nodes += [node("Abs", ["h"], "a"), node("Pow", ["a", "h"], "y")]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    decisions = assert_matches_onnxruntime(model, DNNL).plan.decisions
    assert decisions["y"].backend == "onnxruntime"
    assert any("exponent must be constants" in r for _, r in decisions["y"].refusals)


def test_a_gelu_lookalike_with_its_constants_swapped_is_not_gelu() -> None:
    """0.5 in the inner Mul and 1/sqrt(2) outside is not GELU: the pattern asks for each value
    where it stands, not for a Mul by that number anywhere in the match."""
    consts = {"inner": np.float32(0.5), "one": np.float32(1.0), "outer": np.float32(2**-0.5)}
    nodes = [
        node("Conv", ["x", "w0", "b0"], "h", pads=[1, 1, 1, 1]),
        node("Mul", ["h", "inner"], "e0"),
        node("Erf", ["e0"], "e1"),
        node("Add", ["e1", "one"], "e2"),
        node("Mul", ["h", "e2"], "e3"),
        node("Mul", ["e3", "outer"], "y"),
    ]
    stem = conv_stem()[1]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], {**consts, **stem})
    report = assert_matches_onnxruntime(model, DNNL)
    assert "dnnl.gelu" not in {d.composite for d in report.plan.decisions.values()}


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


def test_attention_without_weights_stays_with_onnxruntime() -> None:
    """Attention's scores and weighted sum multiply two activations: a partition with no other
    MatMul goes back to onnxruntime (a dynamically quantized MiniLM leaves exactly this between
    its MatMulIntegers); one MatMul by a constant weight keeps it on dnnl."""
    shapes = {"q": [1, 2, 8, 4], "k": [1, 2, 4, 8], "v": [1, 2, 8, 4]}
    attention = [
        node("MatMul", ["q", "k"], "s"),
        node("Mul", ["s", "scale"], "t"),
        node("Softmax", ["t"], "p", axis=-1),
        node("MatMul", ["p", "v"], "a"),
    ]
    consts = {"scale": np.float32(0.5), "w": np.ones((4, 3), np.float32) / 4}
    alone = make_model(attention, shapes, ["a"], consts)
    decisions = assert_matches_onnxruntime(alone, DNNL).plan.decisions
    assert {d.backend for d in decisions.values()} == {"onnxruntime"}
    assert any(r.startswith("pruned: no layer") for _, r in decisions["s"].refusals)
    dense = make_model([*attention, node("MatMul", ["a", "w"], "y")], shapes, ["y"], consts)
    decisions = assert_matches_onnxruntime(dense, DNNL).plan.decisions
    assert {d.backend for d in decisions.values()} == {"dnnl"}


def bert_attention(batch: int, seq: int = 8, heads: int = 2, size: int = 4) -> onnx.ModelProto:
    """BERT's self-attention as exporters write it: per-head views of the Q, K and V layers
    (Reshape, Transpose), scores scaled and masked by (1 - m) * -10000 (m: 1 keeps a token),
    softmax, the weighted sum transposed back and the output layer."""
    e = heads * size
    i64 = np.int64
    consts = {f"w{n}": rand(e, e) for n in "qkvo"} | {f"b{n}": rand(e) for n in "qkv"}
    consts |= {
        "heads": np.array([batch, seq, heads, size], i64),
        "back": np.array([batch, seq, e], i64),
    }
    consts |= {"bcast": np.array([batch, 1, 1, seq], i64), "root": np.float32(np.sqrt(size))}
    consts |= {"one": np.float32(1.0), "big": np.float32(-10000.0)}
    nodes = []
    for n, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [
            node("MatMul", ["x", f"w{n}"], f"{n}0"),
            node("Add", [f"{n}0", f"b{n}"], f"{n}1"),
            node("Reshape", [f"{n}1", "heads"], f"{n}2"),
            node("Transpose", [f"{n}2"], f"{n}t", perm=perm),
        ]
    nodes += [
        node("MatMul", ["qt", "kt"], "s0"),
        node("Div", ["s0", "root"], "s1"),
        node("Sub", ["one", "m"], "m1"),
        node("Mul", ["m1", "big"], "m2"),
        node("Reshape", ["m2", "bcast"], "m3"),
        node("Add", ["s1", "m3"], "s2"),
        node("Softmax", ["s2"], "p", axis=-1),
        node("MatMul", ["p", "vt"], "c"),
        node("Transpose", ["c"], "ct", perm=[0, 2, 1, 3]),
        node("Reshape", ["ct", "back"], "c2"),
        node("MatMul", ["c2", "wo"], "y"),
    ]
    return make_model(nodes, {"x": [batch, seq, e], "m": [batch, seq]}, ["y"], consts)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
@pytest.mark.parametrize("batch", [1, 2])
def test_attention_reads_and_writes_its_heads_through_views(
    batch: int, mode: dict, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """MatMul-scale-mask-Softmax-MatMul is one dnnl.attention composite. Its products read the
    heads of Q, K and V, and write the context back, through strided views of the dense layers'
    rows: no transpose is copied. With one sequence the mask (1x1x1xS) is a post-op of the
    scores' product. Tokens masked out get no weight, as in onnxruntime; the compiled model
    saves and loads back."""
    model = bert_attention(batch)
    m = np.ones((batch, 8), np.float32)
    m[:, 5:] = 0
    config = {**DNNL, **mode}
    report = assert_matches_onnxruntime(model, config, {"x": rand(batch, 8, 8), "m": m})
    decisions = report.plan.decisions
    assert {decisions[n].composite for n in ("s0", "s1", "s2", "p", "c")} == {"dnnl.attention"}
    assert {d.backend for d in decisions.values()} == {"dnnl"}
    compiled = byoc.compile(model, config)
    kernels = [n for n in _dnnl_step(compiled).artifact.graph["nodes"] if n["op"] == "kernel"]
    assert "transpose" not in [k["kind"] for k in kernels]
    products = [k for k in kernels if k["kind"] == "matmul" and k["attrs"]]
    assert [k["attrs"] for k in products] == [
        {"perm_a": [0, 2, 1, 3], "perm_b": [0, 2, 3, 1]},
        {"perm_b": [0, 2, 1, 3], "perm_out": [0, 2, 1, 3]},
    ]
    mask_fused = any(p["kind"] == "binary" for p in products[0]["post_ops"])
    assert mask_fused == (batch == 1)
    feeds = {"x": rand(batch, 8, 8), "m": m}
    again = byoc.load(compiled.save(tmp_path / "attention.byoc"))
    np.testing.assert_array_equal(again.run(feeds)["y"], compiled.run(feeds)["y"])


@pytest.mark.parametrize(
    ("keys", "opset", "reason"),
    [
        ("const", 17, "a product by a constant is a dense layer, not attention"),
        ("input", 11, "the softmax is not over the scores' last axis"),  # opset 11: axis=1
    ],
)
def test_what_is_not_attention_is_no_attention_composite(keys, opset, reason) -> None:  # type: ignore[no-untyped-def]
    """Learned queries (a constant operand), or a softmax over more than the scores' last axis
    (opset 11's default), make no attention composite: the check says why."""
    attrs = {"axis": -1} if opset >= 13 else {}
    nodes = [
        node("MatMul", ["x", "keys"], "s"),
        node("Softmax", ["s"], "p", **attrs),
        node("MatMul", ["p", "x"], "y"),
    ]
    shapes = {"x": [1, 4, 4]} | ({"keys": [1, 4, 4]} if keys == "input" else {})
    consts = {"keys": rand(1, 4, 4)} if keys == "const" else {}
    plan = byoc.partition(make_model(nodes, shapes, ["y"], consts, opset=opset), DNNL)
    assert any(f"dnnl.attention: {reason}" in r for _, r in plan.decisions["y"].refusals)
    assert plan.decisions["y"].composite != "dnnl.attention"


def embedded_pooling(seq: int = 6, vocab: int = 11, e: int = 8) -> onnx.ModelProto:
    """A sentence encoder's ends as BERT exports write them: int64 token ids look up rows of a
    word embedding table (Gather), plus position embeddings, a dense layer; then mean pooling
    under the int64 mask, unsqueezed, expanded to the hidden size and cast to float32; the ids
    are also an output (an Identity)."""
    i64 = np.int64
    consts = {"words": rand(vocab, e), "pos": rand(1, seq, e), "w": rand(e, e), "b": rand(e)}
    consts |= {"last": np.array([-1], i64), "full": np.array([1, seq, e], i64)}
    consts |= {"axis1": np.array([1], i64), "tiny": np.float32(1e-9)}
    nodes = [
        node("Gather", ["words", "ids"], "emb"),
        node("Add", ["emb", "pos"], "e1"),
        node("MatMul", ["e1", "w"], "h0"),
        node("Add", ["h0", "b"], "h"),
        node("Unsqueeze", ["mask", "last"], "m1"),
        node("Expand", ["m1", "full"], "m2"),
        node("Cast", ["m2"], "m3", to=onnx.TensorProto.FLOAT),
        node("Mul", ["h", "m3"], "hm"),
        node("ReduceSum", ["hm", "axis1"], "total", keepdims=0),
        node("ReduceSum", ["m3", "axis1"], "count", keepdims=0),
        node("Clip", ["count", "tiny"], "count1"),
        node("Div", ["total", "count1"], "y"),
        node("Identity", ["ids"], "ids_out"),
    ]
    inputs = {"ids": (i64, [1, seq]), "mask": (i64, [1, seq])}
    return make_model(nodes, inputs, ["y", "ids_out"], consts, opset=18)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_integer_ids_and_mask_are_read_in_the_partition(mode: dict, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Gather of embedding rows at int64 ids, the mask's Unsqueeze, Expand and Cast, and the
    Identity output of the ids run in the dnnl partition (host steps before its native net):
    no onnxruntime segment is left, the outputs match onnxruntime (the int64 output exactly,
    negative ids included), and the compiled model saves and loads back. An id outside the
    table is an InputError naming the Gather, as onnxruntime refuses it."""
    model = embedded_pooling()
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    ids = np.array([[3, 0, 10, -1, 7, 7]], np.int64)
    mask = np.array([[1, 1, 1, 1, 0, 0]], np.int64)
    report = assert_matches_onnxruntime(model, config, {"ids": ids, "mask": mask})
    assert {d.backend for d in report.plan.decisions.values()} == {"dnnl"}
    assert not report.plan.segments
    compiled = byoc.compile(model, config)
    graph = _dnnl_step(compiled).artifact.graph
    assert graph["format"] == "byoc-dnnl-json/2"
    hosted = [n["kind"] for n in graph["nodes"] if n["op"] == "host"]
    assert sorted(hosted) == ["cast", "expand", "gather", "reshape", "reshape"]
    out = compiled.run({"ids": ids, "mask": mask})
    assert out["ids_out"].dtype == np.int64 and not np.shares_memory(out["ids_out"], ids)
    np.testing.assert_array_equal(out["ids_out"], ids)
    again = byoc.load(compiled.save(tmp_path / "pooling.byoc"))
    np.testing.assert_array_equal(again.run({"ids": ids, "mask": mask})["y"], out["y"])
    with pytest.raises(byoc.InputError, match=r"an index is outside \[-11, 10\]"):
        compiled.run({"ids": ids + 5, "mask": mask})


@pytest.mark.usefixtures("keep_tiny")
@pytest.mark.parametrize("table", ["uint8", "int8"])
def test_quantized_embeddings_are_read_in_the_partition(table: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``quantize_dynamic`` quantizes a transformer's Gathers: rows of a u8 (or i8) table, then
    DequantizeLinear. The Gather and its DequantizeLinear are host steps (the table stays u8 in
    the artifact and in memory), a DequantizeLinear of constant rows is a float32 constant, and
    the Add reading them joins the partition; the outputs match onnxruntime's, and the model
    saves and loads back. A DequantizeLinear of a layer's weights is a float32 constant too,
    and the MatMul reading it joins the partition."""
    rng = np.random.default_rng(1)
    q = np.dtype(table)
    lo, hi = np.iinfo(q).min, np.iinfo(q).max
    consts = {
        "words": rng.integers(lo, hi + 1, (11, 8)).astype(q),
        "pos": rng.integers(lo, hi + 1, (1, 6, 8)).astype(q),
        "s": np.float32(0.02),
        "z": np.array(3, q),
        "w": rand(8, 8),
        "wq": rng.integers(-100, 100, (8, 8)).astype(np.int8),
    }
    nodes = [
        node("Gather", ["words", "ids"], "gq"),
        node("DequantizeLinear", ["gq", "s", "z"], "emb"),
        node("DequantizeLinear", ["pos", "s", "z"], "p"),
        node("Add", ["emb", "p"], "e1"),
        node("MatMul", ["e1", "w"], "y"),
    ]
    weights = [
        node("DequantizeLinear", ["wq", "s"], "wd"),
        node("MatMul", ["y", "wd"], "y2"),
    ]
    inputs = {"ids": (np.int64, [1, 6])}
    qdq = make_model(nodes + weights, inputs, ["y2"], consts, opset=18)
    decisions = byoc.partition(qdq, DNNL).decisions
    owners = {n: decisions[n].backend for n in ("gq", "emb", "p", "e1", "y", "wd", "y2")}
    assert set(owners.values()) == {"dnnl"}
    assert_matches_onnxruntime(qdq, DNNL, {"ids": np.array([[3, 0, 10, 1, 7, 7]], np.int64)})
    model = make_model(nodes, inputs, ["y"], consts, opset=18)
    config = {**DNNL, "compile": {"placement": "static"}}
    ids = np.array([[3, 0, 10, -1, 7, 7]], np.int64)
    report = assert_matches_onnxruntime(model, config, {"ids": ids})
    assert {d.backend for d in report.plan.decisions.values()} == {"dnnl"}
    compiled = byoc.compile(model, config)
    step = _dnnl_step(compiled)
    hosted = [n["kind"] for n in step.artifact.graph["nodes"] if n["op"] == "host"]
    assert hosted == ["gather", "dequantize"]
    assert sorted(w.dtype.name for w in step.artifact.weights.values()) == sorted(
        ["float32"] * 3 + [table, table]  # the folded positions, w, the scale; table, zero
    )
    again = byoc.load(compiled.save(tmp_path / "embeddings.byoc"))
    np.testing.assert_array_equal(again.run({"ids": ids})["y"], compiled.run({"ids": ids})["y"])
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    at = 20 + struct.unpack("<Q", data[12:20])[0]  # the weight index follows the graph
    n = struct.unpack("<Q", data[at : at + 8])[0]
    index = json.loads(data[at + 8 : at + 8 + n])
    name = next(k for k, v in index.items() if len(v) == 3)
    index[name][2] = "float64"  # an integer table's dtype damaged
    text = json.dumps(index).encode()
    bad = data[:at] + struct.pack("<Q", len(text)) + text + data[at + 8 + n :]
    with pytest.raises(byoc.ArtifactError, match=f"weight .{name}. has an unknown dtype"):
        plugin.byoc_deserialize(backend="dnnl", data=bad, trust_native=False)


def test_integer_ops_dnnl_does_not_run_are_refused_with_reason() -> None:
    """A Gather from a computed table, and a Cast to another type than float32, stay with
    onnxruntime, and ``byoc explain`` says why."""
    nodes, consts = conv_stem()
    nodes += [
        node("Gather", ["h", "idx"], "g", axis=1),
        node("Cast", ["idx"], "d", to=onnx.TensorProto.DOUBLE),
    ]
    inputs = {"x": [1, 3, 10, 12], "idx": (np.int64, [2])}
    plan = byoc.partition(make_model(nodes, inputs, ["g", "d"], consts), DNNL)
    reasons = {n: "; ".join(r for _, r in plan.decisions[n].refusals) for n in ("g", "d")}
    assert "Gather reads rows of a constant float32, u8 or i8 table only" in reasons["g"]
    assert "only a Cast to float32 is supported" in reasons["d"]


@pytest.mark.parametrize(
    ("kind", "key", "value", "message"),
    [
        ("gather", "axis", 2, "gather axis 2 is not an axis of its table"),
        ("cast", "dtype", "int64", "a cast makes float32 of an integer tensor"),
        ("expand", "shape", [1, 5, 8], "cannot expand"),
        ("kernel", "inputs", "ids", "a kernel reads an integer tensor"),
    ],
)
def test_host_steps_with_bad_shapes_or_types_are_refused_when_loaded(
    kind: str, key: str, value: object, message: str
) -> None:
    """A damaged graph whose host steps read or make the wrong shapes or types, or whose kernel
    reads an integer tensor, raises ArtifactError when loaded, before any data is read."""
    step = _dnnl_step(
        byoc.compile(embedded_pooling(), {**DNNL, "compile": {"placement": "static"}})
    )
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    nodes = bad["nodes"]
    if kind == "kernel":
        target = next(n for n in nodes if n["op"] == "kernel")
        target["inputs"][0] = next(i for i, n in enumerate(nodes) if n.get("name") == "ids")
    else:
        target = next(n for n in nodes if n.get("kind") == kind)
        if key == "axis":
            target["attrs"]["axis"] = value
        else:
            target[key] = value
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=_with_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


def ctc_head() -> onnx.ModelProto:
    """A CTC recogniser's end: class scores (ReLU, so some steps tie at 0), their ArgMax per
    step transposed to (batch, steps), and an ArgMin of the last index (ties: the last one)."""
    nodes, consts = conv_stem()
    consts["w1"] = rand(8, 8, 3, 3)
    nodes += [
        node("Conv", ["h", "w1"], "c", pads=[1, 1, 1, 1]),
        node("Relu", ["c"], "scores"),
        node("ArgMax", ["scores"], "best", axis=1),
        node("Transpose", ["best"], "path", perm=[0, 1, 3, 2]),
        node("ArgMin", ["scores"], "least", axis=-1, keepdims=0, select_last_index=1),
    ]
    return make_model(nodes, {"x": [1, 3, 10, 12]}, ["path", "least", "scores"], consts)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_argmax_of_a_kernel_result_runs_after_the_kernels(mode: dict, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ArgMax and ArgMin of the partition's own results, and a Transpose of their int64
    indices, are host steps after the native call: the whole model is one partition, the
    indices equal onnxruntime's (first or last of tied values), and it saves and loads back."""
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    x = rand(1, 3, 10, 12)
    report = assert_matches_onnxruntime(ctc_head(), config, {"x": x})
    assert {d.backend for d in report.plan.decisions.values()} == {"dnnl"}
    compiled = byoc.compile(ctc_head(), config)
    hosted = [n["kind"] for n in _dnnl_step(compiled).artifact.graph["nodes"] if n["op"] == "host"]
    assert hosted == ["argmax", "permute", "argmin"]
    ours = compiled.run({"x": x})
    assert ours["path"].dtype == np.int64 and ours["path"].shape == (1, 1, 12, 10)
    assert ours["least"].shape == (1, 8, 10)
    ties = (ours["scores"] == 0).sum()
    assert ties > 0  # the ReLU's zeros tie: onnxruntime's choice among them is matched above
    again = byoc.load(compiled.save(tmp_path / "ctc.byoc")).run({"x": x})
    for name, value in ours.items():
        np.testing.assert_array_equal(again[name], value)


def test_argmax_without_a_kernel_before_it_stays_with_onnxruntime(keep_tiny: None) -> None:
    """An ArgMax of the model's input, or one whose indices a kernel of its partition reads
    (as float32, through a Cast), is left to onnxruntime with a reason; outputs still match."""
    nodes, consts = conv_stem()
    nodes += [
        node("ArgMax", ["x"], "ax", axis=1),
        node("ArgMax", ["h"], "ah", axis=1),
        node("Cast", ["ah"], "f", to=onnx.TensorProto.FLOAT),
        node("Mul", ["h", "f"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["ax", "y"], consts)
    report = assert_matches_onnxruntime(model, {**DNNL, "compile": {"placement": "static"}})
    decisions = report.plan.decisions
    reasons = {n: "; ".join(r for _, r in decisions[n].refusals) for n in ("ax", "ah")}
    assert "no kernel of its partition computes its input" in reasons["ax"]
    assert "a kernel of its partition reads what it computes" in reasons["ah"]
    assert decisions["ax"].backend == decisions["ah"].backend == "onnxruntime"
    assert decisions["h"].backend == "dnnl"


@pytest.mark.parametrize(
    ("kind", "change", "message"),
    [
        ("argmax", {"axis": 4}, "argmax needs an axis of its input"),
        ("argmin", {"last": 2}, "argmin needs an axis of its input, keepdims and last"),
        ("argmax", {"keepdims": 0}, "an argmax makes int64"),
        ("permute", {"perm": [0, 1, 3, 3]}, "is not a permutation"),
    ],
)
def test_damaged_host_steps_after_the_kernels_are_refused_when_loaded(
    kind: str, change: dict, message: str
) -> None:
    step = _dnnl_step(byoc.compile(ctc_head(), {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    target = next(n for n in bad["nodes"] if n.get("kind") == kind)
    target["attrs"].update(change)
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=_with_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


def quantized_mlp(  # type: ignore[no-untyped-def]
    tmp_path, per_channel: bool = False, weights: str = "QInt8", reduce_range: bool = False
) -> onnx.ModelProto:
    """A transformer's feed-forward block (dense, bias, GELU spelled with Erf, dense, bias,
    residual) quantized by ``onnxruntime.quantization.quantize_dynamic``: each dense layer is
    DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the scales -> Add of the bias."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    c = {"w1": rand(32, 48) / 4, "b1": rand(48), "w2": rand(48, 32) / 4, "b2": rand(32)}
    c |= {"sq": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    nodes = [
        node("MatMul", ["x", "w1"], "m1"),
        node("Add", ["m1", "b1"], "a1"),
        node("Div", ["a1", "sq"], "d"),
        node("Erf", ["d"], "e"),
        node("Add", ["e", "one"], "e1"),
        node("Mul", ["a1", "e1"], "g0"),
        node("Mul", ["g0", "half"], "g"),
        node("MatMul", ["g", "w2"], "m2"),
        node("Add", ["b2", "m2"], "a2"),
        node("Add", ["a2", "x"], "y"),
    ]
    onnx.save(make_model(nodes, {"x": [1, 8, 32]}, ["y"], c), tmp_path / "f.onnx")
    quantize_dynamic(
        tmp_path / "f.onnx",
        tmp_path / "q.onnx",
        per_channel=per_channel,
        reduce_range=reduce_range,
        weight_type=getattr(QuantType, weights),
    )
    return onnx.load(tmp_path / "q.onnx")


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
    step = _dnnl_step(compiled)
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    assert [k["kind"] for k in kernels] == ["qmatmul", "qmatmul"]
    assert [[p["kind"] for p in k["post_ops"]] for k in kernels] == [["eltwise"], ["binary"]]
    impls = [i for _, i in step.runtime.implementations()]
    assert sum(i.startswith("convolution") for i in impls) == 2, impls  # int8 1x1 convolutions
    assert not [i for i in impls if "ref" in i or "gemm" in i]
    again = byoc.load(compiled.save(tmp_path / "q.byoc"))
    np.testing.assert_array_equal(again.run({"x": x})["y"], compiled.run({"x": x})["y"])


def int8_vnni() -> bool:
    """Whether oneDNN's int8 kernels use VNNI here (read from the kernel it picks for a dense
    layer of int8 weights, which it claims on any CPU). Without VNNI the int8 layers whose
    16-bit pair sums could saturate differently from onnxruntime's are refused."""
    global _VNNI
    if _VNNI is None:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            step = _dnnl_step(byoc.compile(quantized_mlp(Path(tmp)), DNNL))
        impls = [i for _, i in step.runtime.implementations() if i.startswith("convolution")]
        _VNNI = all("vnni" in i or "amx" in i for i in impls)
    return _VNNI


_VNNI: bool | None = None


def assert_refused_without_vnni(model: onnx.ModelProto, inputs: dict) -> None:
    """On a CPU without VNNI: the int8 layers are refused with the reason, and the model (on
    onnxruntime) matches onnxruntime."""
    report = assert_matches_onnxruntime(model, DNNL, inputs)
    reasons = [r for d in report.plan.decisions.values() for _, r in d.refusals]
    assert any("without VNNI" in r for r in reasons), reasons


def avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx2 " in f.read().replace("\n", " ")
    except OSError:
        return False


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
    impls = [i for _, i in _dnnl_step(compiled).runtime.implementations()]
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
    step = _dnnl_step(byoc.compile(model, DNNL))
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
    step = _dnnl_step(compiled)
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
    step = _dnnl_step(compiled)
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
    step = _dnnl_step(byoc.compile(quantized_mlp(tmp_path), DNNL))
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


@pytest.mark.parametrize("rows", [[2, 6], [12], [1, 2, 3]])
def test_dense_layers_run_on_brgemm_kernels(rows: list[int]) -> None:
    """Dense layers (constant weights) with their bias, GELU, a residual addition and a
    per-channel scale fused, at ranks 2-4 and through Gemm's transposed weights: results match
    onnxruntime, and where oneDNN's matmul for this CPU is its generic gemm, the layers run as
    1x1 convolutions on brgemm kernels instead."""
    d, f = 64, 96
    gelu = [
        node("Div", ["h1", "sqrt2"], "e0"),
        node("Erf", ["e0"], "e1"),
        node("Add", ["e1", "one"], "e2"),
        node("Mul", ["h1", "e2"], "e3"),
        node("Mul", ["e3", "half"], "g"),
    ]
    consts = {
        "w1": rand(d, f),
        "b1": rand(f),
        "w2": rand(f, d),
        "b2": rand(d),
        "s": rand(d),
        "sqrt2": np.float32(np.sqrt(2.0)),
        "one": np.float32(1.0),
        "half": np.float32(0.5),
    }
    nodes = [
        node("MatMul", ["x", "w1"], "h0"),
        node("Add", ["h0", "b1"], "h1"),
        *gelu,
        node("MatMul", ["g", "w2"], "o0"),
        node("Add", ["o0", "b2"], "o1"),
        node("Add", ["o1", "x"], "o2"),
        node("Mul", ["o2", "s"], "y"),
    ]
    model = make_model(nodes, {"x": [*rows, d]}, ["y"], consts)
    claimed(assert_matches_onnxruntime(model, DNNL), "MatMul")
    gemm = make_model(
        [node("Gemm", ["x", "w", "c"], "y", transB=1), node("Relu", ["y"], "z")],
        {"x": [8, d]},
        ["z"],
        {"w": rand(f, d), "c": rand(f)},
    )
    claimed(assert_matches_onnxruntime(gemm, DNNL), "Gemm")
    if not avx2():
        pytest.skip("brgemm kernels need AVX2; results were checked")
    for m in (model, gemm):
        compiled = byoc.compile(m, {**DNNL, "compile": {"placement": "static"}})
        dense = [i for i in dnnl_impls(compiled) if i.startswith(("matmul", "convolution"))]
        assert dense and all("brg" in i for i in dense), dense


def softmax_between_convs(axis: int) -> object:
    nodes, consts = conv_stem()
    consts["w1"] = rand(8, 8, 1, 1)
    nodes += [node("Softmax", ["h"], "p", axis=axis), node("Conv", ["p", "w1"], "y")]
    return make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)


def dnnl_impls(compiled: byoc.CompiledModel) -> list[str]:
    return [
        i
        for s in compiled.steps
        if s.unit.backend == "dnnl"
        for _, i in s.runtime.implementations()
    ]


@pytest.mark.parametrize("axis", [1, 2, 3, -1])
def test_softmax_on_any_axis_gets_a_fast_kernel(axis: int) -> None:
    """oneDNN's fast softmax wants the axis innermost; other axes are moved there by a
    reorder instead of running oneDNN's reference kernel."""
    model = softmax_between_convs(axis)
    claimed(assert_matches_onnxruntime(model, DNNL), "Softmax")
    compiled = byoc.compile(model, {**DNNL, "compile": {"placement": "static"}})
    softmax = [i for i in dnnl_impls(compiled) if i.startswith("softmax ")]
    assert softmax and not any(i.split()[1].startswith("ref") for i in softmax), softmax


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


def test_a_transpose_that_moves_only_a_dim_of_1_copies_nothing() -> None:
    """A spectrogram (1, H, W, 1) transposed to one channel (1, 1, H, W) before a convolution is
    the same bytes: a view, with no reorder step before the convolution."""
    model = make_model(
        [
            node("Transpose", ["x"], "t", perm=[0, 3, 1, 2]),
            node("Conv", ["t", "w"], "y", pads=[1, 1, 1, 1]),
        ],
        {"x": [1, 10, 12, 1]},
        ["y"],
        {"w": rand(8, 1, 3, 3)},
    )
    assert_matches_onnxruntime(model, DNNL)
    impls = [i for _, i in _dnnl_step(byoc.compile(model, DNNL)).runtime.implementations()]
    assert impls[0].startswith("convolution"), impls


def test_a_narrow_convolution_reads_its_source_in_the_layout_it_has() -> None:
    """A speech-quality net's stem: a one-channel convolution, a max pool and a 32-channel
    convolution run as three kernels, with no reorder of the activation between them."""
    model = make_model(
        [
            node("Conv", ["x", "w1"], "c1", pads=[1, 1, 1, 1]),
            node("Relu", ["c1"], "r1"),
            node("MaxPool", ["r1"], "p", kernel_shape=[2, 2], strides=[2, 2]),
            node("Conv", ["p", "w2"], "c2", pads=[1, 1, 1, 1]),
            node("Relu", ["c2"], "y"),
        ],
        {"x": [1, 1, 40, 24]},
        ["y"],
        {"w1": rand(32, 1, 3, 3), "w2": rand(32, 32, 3, 3)},
    )
    assert_matches_onnxruntime(model, DNNL)
    impls = [i for _, i in _dnnl_step(byoc.compile(model, DNNL)).runtime.implementations()]
    assert [i.split()[0] for i in impls[:3]] == ["convolution", "pooling", "convolution"], impls


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [0, 1, 3, 2], [3, 2, 1, 0], None])
def test_transpose(perm: list[int] | None) -> None:
    nodes, consts = conv_stem()
    attrs = {} if perm is None else {"perm": perm}
    nodes += [node("Transpose", ["h"], "t", **attrs), node("Relu", ["t"], "y")]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    claimed(assert_matches_onnxruntime(model, DNNL), "Transpose")


@pytest.mark.parametrize(
    ("bias", "name"),
    [
        ("add", "dnnl.conv2d_bias_relu"),
        ("conv", "dnnl.conv2d_bias_relu"),
        (None, "dnnl.conv2d_relu"),
    ],
)
def test_conv_relu_is_one_composite_kernel_named_as_tvm_does(bias, name) -> None:
    """The blog's names: a bias (an Add or Conv's third input) makes it conv2d_bias_relu."""
    conv_in = ["x", "w", "b"] if bias == "conv" else ["x", "w"]
    nodes = [node("Conv", conv_in, "c", pads=[1, 1, 1, 1])]
    if bias == "add":
        nodes.append(node("Add", ["c", "b4"], "cb"))
    nodes.append(node("Relu", [nodes[-1].output[0]], "y"))
    consts = {"w": rand(8, 3, 3, 3), "b": rand(8), "b4": rand(1, 8, 1, 1)}
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    report = assert_matches_onnxruntime(model, DNNL)
    comps = {name: d.composite for name, d in report.plan.decisions.items()}
    assert set(comps.values()) == {name}, comps
    assert name in report.plan.table()
    (unit,) = report.plan.partitions
    artifact = plugin.byoc_codegen(backend="dnnl", partition=unit, config={})
    kernels = [n for n in artifact.graph["nodes"] if n["op"] == "kernel"]
    assert len(kernels) == 1 and kernels[0]["name"] == name
    assert kernels[0]["post_ops"][0]["alg"] == "relu"


def test_fused_patterns_match_onnxruntime() -> None:
    """BN folding, spelled-out hardswish, residual sum + relu, swish: one fused graph."""
    c = 8
    consts = {
        "w1": rand(c, 3, 3, 3),
        "s": rand(c),
        "bb": rand(c),
        "m": rand(c),
        "v": np.abs(rand(c)) + 0.5,
        "three": np.float32(3),
        "zero": np.float32(0),
        "six": np.float32(6),
        "w2": rand(c, c, 1, 1),
        "b2": rand(c),
        "w3": rand(c, c, 3, 3),
        "k": rand(1, c, 1, 1),
    }
    nodes = [
        node("Conv", ["x", "w1"], "c1", pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c1", "s", "bb", "m", "v"], "bn"),
        node("Add", ["bn", "three"], "a3"),
        node("Clip", ["a3", "zero", "six"], "cl"),
        node("Mul", ["bn", "cl"], "mu"),
        node("Div", ["mu", "six"], "hs"),
        node("Conv", ["hs", "w2", "b2"], "c2"),
        node("Add", ["c2", "hs"], "sum"),
        node("Relu", ["sum"], "r"),
        node("Conv", ["r", "w3"], "c3", pads=[1, 1, 1, 1]),
        node("Sigmoid", ["c3"], "sg"),
        node("Mul", ["c3", "sg"], "sw"),
        node("Mul", ["sw", "k"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    report = assert_matches_onnxruntime(model, DNNL)
    comps = {d.composite for d in report.plan.decisions.values()}
    assert {
        "dnnl.conv2d_bn_hardswish",
        "dnnl.conv2d_bias_sum_relu",
        "dnnl.conv2d_swish",  # c3 has no bias
    } <= comps, comps
    (unit,) = report.plan.partitions
    kernels = [
        n
        for n in plugin.byoc_codegen(backend="dnnl", partition=unit, config={}).graph["nodes"]
        if n["op"] == "kernel"
    ]
    assert [k["kind"] for k in kernels] == ["conv", "conv", "conv"]


def test_bf16_option_is_close_and_validated() -> None:
    nodes, consts = conv_stem(16)
    model = make_model([*nodes, node("Relu", ["h"], "y")], {"x": [1, 3, 10, 12]}, ["y"], consts)
    cfg = {"backends": ["dnnl"], "backend": {"dnnl": {"fpmath": "bf16"}}}
    assert_matches_onnxruntime(model, cfg, rtol=2e-2, atol=5e-2)
    with pytest.raises(byoc.ConfigError, match="fpmath"):
        byoc.compile(model, {"backends": ["dnnl"], "backend": {"dnnl": {"fpmath": "fp8"}}})


# -- artifacts and runtime ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled() -> byoc.CompiledModel:
    model = make_model(
        [node("Conv", ["x", "w", "b"], "c", pads=[1, 1, 1, 1]), node("Relu", ["c"], "y")],
        {"x": [1, 3, 10, 12]},
        ["y"],
        {"w": rand(8, 3, 3, 3), "b": rand(8)},
    )
    return byoc.compile(model, DNNL)


def _dnnl_step(compiled: byoc.CompiledModel):  # type: ignore[no-untyped-def]
    return next(s for s in compiled.steps if s.unit.backend == "dnnl")


def test_serialize_deserialize_run(compiled: byoc.CompiledModel) -> None:
    step = _dnnl_step(compiled)
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
    assert _dnnl_step(again).runtime.threads == 1
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
        runtime = _dnnl_step(model_threads).runtime
        assert runtime.threads == threads
        assert runtime.kernel_threads() and set(runtime.kernel_threads()) == {threads}
        got = model_threads.run(x)["y"]
        want = got if want is None else want
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _with_graph(data: bytes, graph: dict) -> bytes:
    """A serialized dnnl artifact with its JSON graph replaced."""
    glen = struct.unpack("<Q", data[12:20])[0]
    text = json.dumps(graph).encode()
    return data[:12] + struct.pack("<Q", len(text)) + text + data[20 + glen :]


def _damaged(data: bytes) -> list[bytes]:
    glen = struct.unpack("<Q", data[12:20])[0]
    graph = json.loads(data[20 : 20 + glen])

    def with_graph(g: dict) -> bytes:
        return _with_graph(data, g)

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
    data = plugin.byoc_serialize(backend="dnnl", artifact=_dnnl_step(compiled).artifact)
    for bad in _damaged(data):
        with pytest.raises(byoc.ArtifactError):
            artifact = plugin.byoc_deserialize(backend="dnnl", data=bad, trust_native=False)
            plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


def test_views_with_bad_windows_or_groups_are_refused_when_loaded() -> None:
    """A damaged JSON graph whose slice window leaves its source, whose steps are zero, or
    whose shuffle groups do not divide the channels raises ArtifactError naming the kernel
    (zero steps in Python, the others in the native checks, before any data is read). In C
    source mode the C++ must be what the graph generates, which is checked first."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"split": np.array([1, 2, 4, 10, 12], i64), "back": np.array([1, 8, 10, 12], i64)}
    consts |= {k: np.array(v, i64) for k, v in [("s", [1]), ("e", [9]), ("a", [2]), ("st", [2])]}
    nodes += [
        node("Reshape", ["h", "split"], "g"),
        node("Transpose", ["g"], "t", perm=[0, 2, 1, 3, 4]),
        node("Reshape", ["t", "back"], "u"),
        node("Slice", ["u", "s", "e", "a", "st"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)
    step = _dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    graph = step.artifact.graph
    kinds = [n.get("kind") for n in graph["nodes"]]
    damages = [
        ("shuffle", "groups", 3, "groups do not divide"),  # 8 channels
        ("slice", "offsets", [0, 0, 6, 0], "window is outside"),  # 6 + 4 * 2 > 10
        ("slice", "steps", [1, 1, 0, 1], "steps has a value out of range"),
    ]
    for kind, key, value, message in damages:
        bad = json.loads(json.dumps(graph))
        bad["nodes"][kinds.index(kind)]["attrs"][key] = value
        with pytest.raises(byoc.ArtifactError, match=message):
            artifact = plugin.byoc_deserialize(
                backend="dnnl", data=_with_graph(data, bad), trust_native=False
            )
            plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("alg", "median", "unknown reduce algorithm 'median'"),
        ("shape", [1, 1, 10, 1], "reduce: the reduced axes must be adjacent"),
        ("shape", [1, 2, 10, 12], "reduce: an output dim is neither 1 nor kept"),
    ],
)
def test_reduce_kernels_with_bad_shapes_are_refused_when_loaded(key, value, message) -> None:  # type: ignore[no-untyped-def]
    """A damaged graph whose reduce kernel names an unknown algorithm, or whose output shape
    reduces axes apart or shrinks one to neither 1 nor its size, raises ArtifactError before any
    data is read."""
    nodes, consts = conv_stem()
    consts["c"] = np.array([1], np.int64)
    nodes += [node("ReduceSum", ["h", "c"], "y")]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts, opset=18)
    step = _dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    reduce = next(n for n in bad["nodes"] if n.get("kind") == "reduce")
    if key == "alg":
        reduce["attrs"]["alg"] = value
    else:
        reduce["shape"] = value
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=_with_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("perm_a", [0, 0, 1, 3], "not a permutation"),
        ("perm_out", [0, 2, 1], "perm_out must have 4 entries"),
        ("perm_b", [0, 2, 1, 3], "matmul.*oneDNN refused it"),
    ],
)
def test_products_read_through_bad_views_are_refused_when_loaded(key, value, message) -> None:  # type: ignore[no-untyped-def]
    """A damaged graph whose product would read or write through a view that is no
    permutation, or that does not fit the product's shapes, raises ArtifactError."""
    model = bert_attention(1)
    step = _dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    scores = next(n for n in bad["nodes"] if n.get("attrs", {}).get("perm_a"))
    scores["attrs"][key] = value
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=_with_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


def test_bad_inputs_are_refused_before_native_code(compiled: byoc.CompiledModel) -> None:
    runtime = _dnnl_step(compiled).runtime
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


def assert_thread_safe(compiled: byoc.CompiledModel, xs: list[np.ndarray]) -> None:
    """Runs of input "x" from one thread per array, 20 each at once, give output "y" as runs
    one at a time do."""
    want = [compiled.run({"x": x})["y"] for x in xs]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                np.testing.assert_array_equal(compiled.run({"x": xs[i]})["y"], want[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_run_is_thread_safe(compiled: byoc.CompiledModel) -> None:
    assert_thread_safe(compiled, [rand(1, 3, 10, 12) for _ in range(4)])


def test_artifact_source_is_tvm_style_json(compiled: byoc.CompiledModel) -> None:
    art: Artifact = _dnnl_step(compiled).artifact
    graph = art.graph
    assert {"nodes", "arg_nodes", "heads"} <= set(graph)
    assert [graph["nodes"][i]["op"] for i in graph["arg_nodes"]] == ["input"]


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


def banded_net(channels: int, k: int, pool: str, also_read: bool = False) -> onnx.ModelProto:
    """x [1, channels, 300, 240] -> Conv to 32 channels (k x k, same padding) -> Relu -> a 2x2
    pool -> Conv to 8 channels: the first convolution's output, 9 MB, is read only by the pool
    (and by a Mul too with ``also_read``)."""
    nodes = [
        node("Conv", ["x", "w1", "b1"], "c1", pads=[k // 2] * 4),
        node("Relu", ["c1"], "r1"),
        node(pool, ["r1"], "p1", kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p1", "w2"], "y", pads=[1, 1, 1, 1]),
    ]
    outputs = ["y"]
    if also_read:
        nodes.append(node("Mul", ["r1", "r1"], "sq"))
        outputs.append("sq")
    consts = {"w1": rand(32, channels, k, k) / k, "b1": rand(32), "w2": rand(8, 32, 3, 3) * 0.1}
    return make_model(nodes, {"x": [1, channels, 300, 240]}, outputs, consts)


@pytest.mark.parametrize(
    ("channels", "k", "pool", "threads"),
    [(1, 3, "MaxPool", 0), (1, 5, "AveragePool", 0), (3, 3, "MaxPool", 0), (16, 3, "MaxPool", 1)],
)
def test_a_large_convolution_read_only_by_its_pooling_runs_with_it_in_bands(
    channels: int, k: int, pool: str, threads: int
) -> None:
    """A convolution whose 9 MB output only a pooling reads runs band of rows by band of rows,
    each pooled from a small buffer (bands of 16 rows, the last of 12, the top and bottom ones
    padded), and matches onnxruntime. A 3-channel NCHW source, whose bands are windows rather
    than dense tensors, matches too, banded or not: the shim bands it only where oneDNN runs
    the bands on the whole convolution's kernel (on AVX-512 it does not)."""
    config = {**DNNL, "backend": {"dnnl": {"threads": threads}}}
    model = banded_net(channels, k, pool)
    assert_matches_onnxruntime(model, config)
    compiled = byoc.compile(model, {**config, "compile": {"placement": "static"}})
    impls = [i for _, i in _dnnl_step(compiled).runtime.implementations()]
    banded = [i for i in impls if i.endswith("in bands, with its pooling")]
    if channels != 3:
        assert len(banded) == 1 and not any(i.startswith("pooling") for i in impls), impls


def test_a_convolution_whose_output_another_kernel_reads_runs_whole() -> None:
    compiled = byoc.compile(
        banded_net(1, 3, "MaxPool", also_read=True), {**DNNL, "compile": {"placement": "static"}}
    )
    impls = [i for _, i in _dnnl_step(compiled).runtime.implementations()]
    assert not any("in bands" in i for i in impls) and "pooling" in str(impls), impls


def recurrent(
    op: str,
    *,
    steps: int = 7,
    batch: int = 1,
    hidden: int = 6,
    bias: bool = True,
    states: tuple[str, ...] = (),
    outputs: tuple[str, ...] = ("y",),
    extra: dict | None = None,
    **attrs: object,
) -> onnx.ModelProto:
    """One LSTM or GRU (bidirectional unless ``attrs`` say otherwise) over x [steps, batch, 5]:
    ``states`` names the initial ones it reads ("h0", "c0"), ``outputs`` the ones the model
    returns ("y", "y_h", "y_c"); ``extra`` adds inputs by position (4: sequence_lens, 7: P)."""
    dirs = 2 if attrs.setdefault("direction", "bidirectional") == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    consts = {
        "w": rand(dirs, gates * hidden, 5) * 0.5,
        "r": rand(dirs, gates * hidden, hidden) * 0.5,
    }
    ins = ["x", "w", "r", ""]
    if bias:
        consts["b"] = rand(dirs, 2 * gates * hidden) * 0.5
        ins[3] = "b"
    ins += ["", "h0" if "h0" in states else "", "c0" if "c0" in states else ""]
    for i, value in (extra or {}).items():
        ins += [""] * (i + 1 - len(ins))
        ins[i] = f"extra{i}"
        consts[f"extra{i}"] = value
    while not ins[-1]:
        ins.pop()
    names = ["y", "y_h", "y_c"][: 3 if op == "LSTM" else 2]
    outs = [n if n in outputs else "" for n in names]
    while not outs[-1]:
        outs.pop()
    inputs = {"x": [steps, batch, 5], **{s: [dirs, batch, hidden] for s in states}}
    attrs.setdefault("hidden_size", hidden)
    rnn = node(op, ins, outs, name="rnn", **attrs)
    return make_model([rnn], inputs, list(outputs), consts, opset=14)


@pytest.mark.parametrize(
    ("op", "kwargs"),
    [
        ("LSTM", {}),
        ("LSTM", {"batch": 3, "states": ("h0", "c0"), "outputs": ("y", "y_h")}),
        ("LSTM", {"batch": 2, "states": ("h0",), "bias": False}),
        ("LSTM", {"states": ("c0",), "outputs": ("y_h",), "extra": {4: np.full(1, 7, np.int32)}}),
        ("GRU", {"linear_before_reset": 1, "outputs": ("y", "y_h")}),
        ("GRU", {"batch": 2, "states": ("h0",), "hidden": 16}),
        ("LSTM", {"extra": {7: np.zeros((2, 18), np.float32)}, "threads": 1}),
        ("GRU", {"linear_before_reset": 1, "threads": 1}),
    ],
)
def test_bidirectional_lstm_and_gru_match_onnxruntime(op: str, kwargs: dict) -> None:
    """A bidirectional LSTM or GRU (either GRU formula; with or without bias and initial
    states; Y_h read) is one rnn kernel, matching onnxruntime. Its two directions run at once,
    one thread each, unless the backend may use only one thread."""
    threads = kwargs.pop("threads", 0)
    config = {**DNNL, "backend": {"dnnl": {"threads": threads}}}
    report = assert_matches_onnxruntime(recurrent(op, **kwargs), config)
    claimed(report, op)
    compiled = byoc.compile(recurrent(op, **kwargs), {**config, "compile": {"placement": "static"}})
    assert dnnl_kinds(compiled)[0] == "rnn"
    runtime = _dnnl_step(compiled).runtime
    rnn = [i for i, (_, impl) in enumerate(runtime.implementations()) if impl.startswith("rnn")]
    assert len(rnn) == 2
    if threads != 1 and os.cpu_count() != 1:
        assert [runtime.kernel_threads()[i] for i in rnn] == [1, 1]


@pytest.mark.parametrize(
    ("op", "kwargs", "reason"),
    [
        ("LSTM", {"direction": "forward"}, "one-direction RNN"),
        ("GRU", {"direction": "reverse"}, "one-direction RNN"),
        ("LSTM", {"clip": 3.0}, "clip and input_forget"),
        ("LSTM", {"input_forget": 1}, "clip and input_forget"),
        ("GRU", {"activations": ["Relu", "Tanh"] * 2}, "only the defaults"),
        ("LSTM", {"layout": 1, "states": ()}, "layout=1"),
        ("LSTM", {"outputs": ("y", "y_c")}, "Y_c (the last cell state) is read"),
        ("GRU", {"extra": {4: np.full(1, 5, np.int32)}}, "sequence_lens"),
        ("LSTM", {"extra": {7: np.ones((2, 18), np.float32)}}, "peepholes"),
        ("GRU", {"hidden_size": 5}, "W, R or B do not fit X [7, 1, 5] and hidden_size 5"),
    ],
)
def test_rnn_the_backend_cannot_run_as_onnx_says_is_refused_with_reason(
    op: str, kwargs: dict, reason: str
) -> None:
    """One direction (onnxruntime is faster), clip, input_forget, other activations, batch
    first, a read Y_c, shorter sequences, peepholes and weights that do not fit hidden_size stay
    with onnxruntime, which runs them as byoc does (compared, but for the two models
    onnxruntime itself refuses)."""
    model = recurrent(op, **kwargs)
    plan = byoc.partition(model, DNNL)
    assert reason in str(plan.decisions["rnn"].refusals), plan.decisions["rnn"].refusals
    if "layout" not in kwargs and "hidden_size" not in kwargs:
        assert_matches_onnxruntime(model, DNNL)


def test_an_lstm_whose_weights_paddle_builds_from_initializers_is_claimed() -> None:
    """Paddle exports an LSTM's weights as a Concat of each direction's Unsqueezed initializer
    and its zero initial states as a Tile: both fold into constants, so the LSTM is claimed."""
    nodes, consts = [], {"axis0": np.array([0], np.int64), "reps": np.array([2, 1, 1], np.int64)}
    for name, shape in (("w", (16, 5)), ("r", (16, 4)), ("b", (32,))):
        for d in ("fw", "bw"):
            consts[f"{name}_{d}"] = rand(*shape) * 0.5
            nodes.append(node("Unsqueeze", [f"{name}_{d}", "axis0"], f"{name}_{d}1"))
        nodes.append(node("Concat", [f"{name}_fw1", f"{name}_bw1"], name, axis=0))
    consts["zero"] = np.zeros((1, 1, 4), np.float32)
    nodes.append(node("Tile", ["zero", "reps"], "state"))
    nodes.append(
        node(
            "LSTM",
            ["x", "w", "r", "b", "", "state", "state"],
            "y",
            hidden_size=4,
            direction="bidirectional",
        )
    )
    model = make_model(nodes, {"x": [6, 1, 5]}, ["y"], consts, opset=14)
    report = assert_matches_onnxruntime(model, DNNL)
    claimed(report, "LSTM")
    assert [p.backend for p in report.plan.partitions] == ["dnnl"]


def test_a_bidirectional_lstm_runs_from_many_threads_at_once() -> None:
    """Runs from four threads at once, each with its two directions on two more threads, give
    the results of runs one at a time (each run's pair has its own buffers and scratchpad)."""
    compiled = byoc.compile(
        recurrent("LSTM", steps=40, batch=2, hidden=24),
        {**DNNL, "compile": {"placement": "static"}},
    )
    assert_thread_safe(compiled, [rand(40, 2, 5) for _ in range(4)])


def test_rnn_stays_with_onnxruntime_in_c_source_mode() -> None:
    plan = byoc.partition(recurrent("GRU"), {**DNNL, "backend": {"dnnl": {"codegen": "c"}}})
    assert plan.decisions["rnn"].backend != "dnnl"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cell", "peephole_lstm", "unknown rnn cell 'peephole_lstm'"),
        ("direction", "both", "unknown rnn direction 'both'"),
        ("shape", [7, 1, 1, 6], "the output must be .T, directions, N, H."),
        ("inputs", "weights swapped", "bad weight or bias shapes"),
    ],
)
def test_rnn_kernels_with_bad_attributes_are_refused_when_loaded(key, value, message) -> None:  # type: ignore[no-untyped-def]
    """A damaged graph whose rnn kernel names an unknown cell or direction, or whose output or
    weights do not fit its input, raises ArtifactError before any data is read."""
    compiled = byoc.compile(recurrent("LSTM"), {**DNNL, "compile": {"placement": "static"}})
    step = _dnnl_step(compiled)
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    rnn = next(n for n in bad["nodes"] if n.get("kind") == "rnn")
    if key == "inputs":
        rnn["inputs"][1], rnn["inputs"][2] = rnn["inputs"][2], rnn["inputs"][1]
    elif key == "shape":
        rnn["shape"] = value
    else:
        rnn["attrs"][key] = value
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=_with_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


@pytest.mark.realmodel
def test_real_model_p1_matches(real_model) -> None:  # type: ignore[no-untyped-def]
    report = assert_matches_onnxruntime(
        real_model("P1"), {"backends": ["dnnl"], "shapes": {"x": [1, 3, 48, 192]}}
    )
    assert len(report.plan.fallback_nodes) < len(report.plan.decisions) // 10


def run_as_written(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    """onnxruntime's run of ``model`` with its graph optimizations off: a QDQ graph's float
    work as written, without its fusions into int8 kernels."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    return session.run(None, inputs)


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
    step = _dnnl_step(compiled)
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
    step = _dnnl_step(byoc.compile(model, DNNL))
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


# Elementwise work between int8 layers in a QDQ graph, on the dequantized values of the first
# layer's output ("d1"), making "e": (nodes, extra constants).
QDQ_CHAINS = {
    "silu": (
        [
            node("Sigmoid", ["d1"], "sig"),
            node("QuantizeLinear", ["sig", "s_sig", "z_sig"], "q_sig"),
            node("DequantizeLinear", ["q_sig", "s_sig", "z_sig"], "d_sig"),
            node("Mul", ["d1", "d_sig"], "e"),
        ],
        {"s_sig": np.float32(1 / 255)},
    ),
    "gelu": (
        [
            node("Div", ["d1", "root2"], "g1"),
            node("Erf", ["g1"], "g2"),
            node("Add", ["g2", "one"], "g3"),
            node("Mul", ["d1", "g3"], "g4"),
            node("Mul", ["g4", "half"], "e"),
        ],
        {"root2": np.float32(2**0.5), "one": np.float32(1), "half": np.float32(0.5)},
    ),
    "leaky-affine": (
        [
            node("LeakyRelu", ["d1"], "l1", alpha=0.1),
            node("Mul", ["l1", "k"], "l2"),
            node("Sub", ["l2", "k"], "e"),
        ],
        {"k": np.float32(1.5)},
    ),
    "tanh": ([node("Tanh", ["d1"], "e")], {}),
    "elu": ([node("Elu", ["d1"], "e", alpha=0.7)], {}),
    "hardswish": ([node("HardSwish", ["d1"], "e")], {}),
    "hardsigmoid": ([node("HardSigmoid", ["d1"], "e", alpha=0.3, beta=0.4)], {}),
    "clip-abs-sqrt": (
        [
            node("Clip", ["d1", "lo", "hi"], "c"),
            node("Abs", ["c"], "a"),
            node("Sqrt", ["a"], "e"),
        ],
        {"lo": np.float32(-1), "hi": np.float32(2)},
    ),
    "pow": ([node("Pow", ["d1", "three"], "e")], {"three": np.float32(3)}),
}


def quantized_chain(chain: str, dtype: str) -> tuple[onnx.ModelProto, float]:
    """x -> QDQ -> Conv of int8 weights -> QDQ -> ``QDQ_CHAINS[chain]`` -> QDQ -> Conv -> QDQ
    -> y, and a GlobalAveragePool of the second QDQ -> p; activations ``dtype`` (u8 or s8);
    and y's scale."""
    rng = np.random.default_rng(11)
    z = {"uint8": np.uint8(128), "int8": np.int8(0)}[dtype]
    zero_sig = {"uint8": np.uint8(0), "int8": np.int8(-128)}[dtype]
    nodes, extra = QDQ_CHAINS[chain]
    c = {
        "sx": np.float32(8 / 255),
        "s1": np.float32(6 / 255),
        "s2": np.float32(4 / 255),
        "sy": np.float32(8 / 255),
        "z": z,
        "z_sig": zero_sig,
        "w1": rng.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8),
        "w2": rng.integers(-127, 128, (8, 8, 1, 1)).astype(np.int8),
        "sw": np.float32(0.1 / 127),
        **extra,
    }
    model = make_model(
        [
            node("QuantizeLinear", ["x", "sx", "z"], "qx"),
            node("DequantizeLinear", ["qx", "sx", "z"], "dx"),
            node("DequantizeLinear", ["w1", "sw"], "dw1"),
            node("Conv", ["dx", "dw1"], "c1", pads=[1, 1, 1, 1]),
            node("QuantizeLinear", ["c1", "s1", "z"], "q1"),
            node("DequantizeLinear", ["q1", "s1", "z"], "d1"),
            *nodes,
            node("QuantizeLinear", ["e", "s2", "z"], "q2"),
            node("DequantizeLinear", ["q2", "s2", "z"], "d2"),
            node("DequantizeLinear", ["w2", "sw"], "dw2"),
            node("Conv", ["d2", "dw2"], "c2"),
            node("QuantizeLinear", ["c2", "sy", "z"], "qy"),
            node("DequantizeLinear", ["qy", "sy", "z"], "y"),
            node("GlobalAveragePool", ["d2"], "p"),
        ],
        {"x": [1, 8, 10, 12]},
        ["y", "p"],
        c,
    )
    return model, float(c["sy"])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("chain", list(QDQ_CHAINS))
def test_quantized_elementwise_chains_run_as_lookup_tables(
    chain: str, dtype: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The elementwise work between two int8 convolutions of a QDQ graph (a SiLU with its own
    QuantizeLinear, a GELU, activations, affine ops) depends on one u8 or s8 value: it runs as
    a 256-entry lookup table from the first convolution's integers to the second's, computed
    at compile time, and as one to float32 for the pooling that reads it dequantized. The
    outputs equal onnxruntime's run of the graph as written to one quantum; saved, the model
    loads back."""
    model, scale = quantized_chain(chain, dtype)
    x = rand(1, 8, 10, 12)
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (see saturating_kernels)")
    (as_written, pooled) = run_as_written(model, {"x": x})
    config = {**DNNL, "compile": {"placement": "static"}}
    compiled = byoc.compile(model, config)
    assert [s.unit.backend for s in compiled.steps] == ["dnnl"]
    out = compiled.run({"x": x})
    np.testing.assert_allclose(out["y"], as_written, rtol=0, atol=scale * 1.01)
    np.testing.assert_allclose(out["p"], pooled, rtol=0, atol=1e-6)
    kernels = [n for n in _dnnl_step(compiled).artifact.graph["nodes"] if n["op"] == "kernel"]
    kinds = [k["kind"] for k in kernels]
    assert sorted(kinds) == ["binary", "lut", "lut", "pool", "qconv", "qconv"], kinds
    tables = {k["attrs"]["dst"]: k for k in kernels if k["kind"] == "lut"}
    assert set(tables) == {dtype, "float32"}
    chain_nodes = {n.name for n in QDQ_CHAINS[chain][0]}
    assert chain_nodes <= set(tables[dtype]["members"]), tables[dtype]["members"]
    first_conv = next(k for k in kernels if k["kind"] == "qconv")
    assert first_conv["attrs"]["dst"] == dtype  # it writes the integers the tables read
    again = byoc.load(compiled.save(tmp_path / "q.byoc"))
    np.testing.assert_array_equal(again.run({"x": x})["y"], out["y"])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("entry", "a table entry is not in the type's range"),
        ("table", "the table must be a constant of 256 float32 values"),
        ("source", "the source must be u8 or s8"),
    ],
)
def test_damaged_lookup_tables_are_refused_when_loaded(damage: str, message: str) -> None:
    """A lookup table to u8 holding a fraction, a table that is not 256 values, or a table
    read from float32 values raises ArtifactError when the artifact is loaded."""
    model, _ = quantized_chain("silu", "uint8")
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (see saturating_kernels)")
    step = _dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    graph, weights = step.artifact.graph, dict(step.artifact.weights)
    nodes = graph["nodes"]
    lut = next(n for n in nodes if n.get("kind") == "lut" and n["attrs"]["dst"] == "uint8")
    if damage == "entry":
        name = nodes[lut["inputs"][1]]["name"]
        weights[name] = weights[name].copy()
        weights[name][3] += 0.5
    elif damage == "table":
        lut["inputs"][1] = next(i for i, n in enumerate(nodes) if n["op"] == "const")
    else:
        lut["inputs"][0] = graph["arg_nodes"][0]
    with pytest.raises(byoc.ArtifactError, match=message):
        plugin.byoc_create_runtime("dnnl", Artifact(json.dumps(graph), weights), {})


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantized_splits_and_concats_move_integers(dtype: str) -> None:
    """A QuantizeLinear after each half of a Split, and after a Concat of tensors of three
    other scales (YOLOv8's C2f block), moves in front of them: the slices and the concat move
    u8 or s8 integers, each concat input requantized to the concat's scale by a lookup table,
    and no kernel computes in float32 between the int8 convolutions. The output equals
    onnxruntime's run of the graph as written to one quantum."""
    rng = np.random.default_rng(12)
    z = {"uint8": np.uint8(128), "int8": np.int8(0)}[dtype]
    c = {
        "sx": np.float32(8 / 255),
        "s1": np.float32(6 / 255),
        "s2": np.float32(5 / 255),
        "s3": np.float32(7 / 255),
        "sc": np.float32(9 / 255),
        "sy": np.float32(8 / 255),
        "z": z,
        "w1": rng.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8),
        "w2": rng.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8),
        "w3": rng.integers(-127, 128, (8, 12, 1, 1)).astype(np.int8),
        "sw": np.float32(0.1 / 127),
        "halves": np.array([4, 4], np.int64),
    }

    def qdq(x: str, scale: str, y: str) -> list[onnx.NodeProto]:
        return [
            node("QuantizeLinear", [x, scale, "z"], f"{y}:q"),
            node("DequantizeLinear", [f"{y}:q", scale, "z"], y),
        ]

    model = make_model(
        [
            *qdq("x", "sx", "dx"),
            node("DequantizeLinear", ["w1", "sw"], "dw1"),
            node("Conv", ["dx", "dw1"], "c1", pads=[1, 1, 1, 1]),
            *qdq("c1", "s1", "d1"),
            node("Split", ["d1", "halves"], ["h0", "h1"], axis=1),
            *qdq("h0", "s1", "a"),
            *qdq("h1", "s1", "b"),
            node("DequantizeLinear", ["w2", "sw"], "dw2"),
            node("Conv", ["b", "dw2"], "c2", pads=[1, 1, 1, 1]),
            *qdq("c2", "s2", "d2"),
            node("Add", ["b", "d2"], "r"),
            *qdq("r", "s3", "d3"),
            node("Concat", ["a", "b", "d3"], "cat", axis=1),
            *qdq("cat", "sc", "dcat"),
            node("DequantizeLinear", ["w3", "sw"], "dw3"),
            node("Conv", ["dcat", "dw3"], "c3"),
            *qdq("c3", "sy", "y"),
        ],
        {"x": [1, 8, 10, 12]},
        ["y"],
        c,
    )
    x = rand(1, 8, 10, 12)
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (see saturating_kernels)")
    (as_written,) = run_as_written(model, {"x": x})
    compiled = byoc.compile(model, {**DNNL, "compile": {"placement": "static"}})
    assert [s.unit.backend for s in compiled.steps] == ["dnnl"]
    y = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(y, as_written, rtol=0, atol=float(c["sy"]) * 1.01)
    nodes = _dnnl_step(compiled).artifact.graph["nodes"]
    kernels = [n for n in nodes if n["op"] == "kernel"]

    def integers(k: dict) -> bool:  # what a kernel reads are u8 or s8 tensors
        return all(nodes[i]["attrs"].get("dst") == dtype for i in k["inputs"])

    moves = [k for k in kernels if k["kind"] in ("slice", "concat")]
    assert sorted(k["kind"] for k in moves) == ["concat", "slice", "slice"], kernels
    assert all(integers(k) for k in moves), moves
    luts = [k for k in kernels if k["kind"] == "lut"]
    assert len(luts) == 3 and all(k["attrs"]["dst"] == dtype for k in luts), luts  # a, b, d3
    others = [k["members"] for k in kernels if k["kind"] not in ("qconv", "lut", "slice", "concat")]
    assert others == [["dx:q"], ["b", "r", "d3:q"]], others


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_lookup_tables_give_the_same_integers_with_every_loop(dtype: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The u8 and s8 table loops (AVX-512 VBMI, AVX2, scalar; BYOC_DNNL_LUT_ISA caps the one
    this CPU runs) give the same outputs: a saved QDQ model loaded and run in processes held to
    AVX2 and to the scalar loop equals this process's run."""
    model, _ = quantized_chain("silu", dtype)
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (see saturating_kernels)")
    x = rand(1, 8, 10, 12)
    compiled = byoc.compile(model, {**DNNL, "compile": {"placement": "static"}})
    path = compiled.save(tmp_path / "q.byoc")
    np.save(tmp_path / "x.npy", x)
    code = (
        "import sys, byoc, numpy as np\n"
        "y = byoc.load(sys.argv[1]).run({'x': np.load(sys.argv[2])})['y']\n"
        "np.save(sys.argv[3], y)\n"
    )
    want = compiled.run({"x": x})["y"]
    for isa in ("avx2", "scalar"):
        out = tmp_path / f"{isa}.npy"
        done = subprocess.run(
            [sys.executable, "-c", code, str(path), str(tmp_path / "x.npy"), str(out)],
            env=dict(os.environ, BYOC_DNNL_LUT_ISA=isa),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        np.testing.assert_array_equal(np.load(out), want)


@pytest.mark.parametrize("codegen", ["json", "c"])
def test_a_binary_post_op_after_a_tanh_binds_its_operand(codegen: str) -> None:
    """tanh is three oneDNN post-ops (layouts.hpp's append_eltwise): a binary post-op after it
    is bound at its index in oneDNN's list. FastGELU on a 1-D convolution, which fuses into a
    binary Mul carrying a tanh and then a Mul by a computed operand, once failed to execute
    ("could not execute a primitive")."""
    consts = {"w": rand(16, 8, 3), "b": rand(16), "half": np.float32(0.5), "one": np.float32(1)}
    consts |= {"c": np.float32(0.7978845608), "k": np.float32(0.044715)}
    nodes = [
        node("Conv", ["x", "w", "b"], "y", pads=[1, 1]),
        node("Mul", ["y", "c"], "a"),
        node("Mul", ["y", "k"], "ky"),
        node("Mul", ["ky", "y"], "kyy"),
        node("Add", ["kyy", "one"], "d"),
        node("Mul", ["a", "d"], "e"),
        node("Tanh", ["e"], "t"),
        node("Add", ["t", "one"], "u"),
        node("Mul", ["y", "half"], "hy"),
        node("Mul", ["hy", "u"], "out"),
    ]
    model = make_model(nodes, {"x": [1, 8, 64]}, ["out"], consts)
    config = {**DNNL, "backend": {"dnnl": {"codegen": codegen}}}
    claimed(assert_matches_onnxruntime(model, config), "Tanh")
