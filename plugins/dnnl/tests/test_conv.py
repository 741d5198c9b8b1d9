"""dnnl: convolution kinds (conv, deconv) and their composites: attributes, residual sums, padding
and dilation rewrites, bands."""

from __future__ import annotations

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin

from .helpers import DNNL, MODES, claimed, conv_stem, dnnl_impls, dnnl_kinds, dnnl_step, rand


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
        # ONNX ignores pads then: the larger half of the total padding goes first (1, 0 here)
        {"strides": [2, 2], "output_shape": [20, 24], "pads": [0, 0, 1, 1]},
        {"strides": [2, 2], "output_shape": [18, 23], "output_padding": [1, 0]},
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
    step = dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    kernels = [n["kind"] for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    assert ("deconv" not in kernels) == shuffled, kernels
    if shuffled:
        assert kernels.count("conv") == 2 and "transpose" in kernels, kernels


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
    graph = dnnl_step(compiled).artifact.graph
    post_ops = [[p["kind"] for p in n["post_ops"]] for n in graph["nodes"] if n["op"] == "kernel"]
    assert post_ops == [[], ["sum"], ["binary"]], post_ops


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
    step = dnnl_step(byoc.compile(model, config))
    kernels = [n for n in step.artifact.graph["nodes"] if n["op"] == "kernel"]
    sums = [k for k, n in enumerate(kernels) if "sum" in [p["kind"] for p in n["post_ops"]]]
    assert len(sums) == 2, [n["post_ops"] for n in kernels]
    steps = [[i.split()[0] for k, i in step.runtime.implementations() if k == s] for s in sums]
    copied = [["reorder", "convolution"], ["convolution"]]
    assert steps == (copied if read_later else [["convolution"], ["convolution"]]), steps


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
    graph = dnnl_step(byoc.compile(model, config)).artifact.graph
    kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
    assert [k["kind"] for k in kernels] == ["conv", "conv", "view"]
    assert [p["alg"] for p in kernels[0]["post_ops"]] == ["hardswish", "linear"]


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
    impls = [i for _, i in dnnl_step(byoc.compile(model, DNNL)).runtime.implementations()]
    assert [i.split()[0] for i in impls[:3]] == ["convolution", "pooling", "convolution"], impls


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
    impls = [i for _, i in dnnl_step(compiled).runtime.implementations()]
    banded = [i for i in impls if i.endswith("in bands, with its pooling")]
    if channels != 3:
        assert len(banded) == 1 and not any(i.startswith("pooling") for i in impls), impls


def test_a_convolution_whose_output_another_kernel_reads_runs_whole() -> None:
    compiled = byoc.compile(
        banded_net(1, 3, "MaxPool", also_read=True), {**DNNL, "compile": {"placement": "static"}}
    )
    impls = [i for _, i in dnnl_step(compiled).runtime.implementations()]
    assert not any("in bands" in i for i in impls) and "pooling" in str(impls), impls
