"""Convolution kinds: ``conv`` and ``deconv`` (Conv, ConvTranspose), with their composites
(bias, batch normalization, activation, residual sum; TVM's ``dnnl.conv2d_*``). An int8
convolution is the ``qconv`` kind (byoc_dnnl.kinds.int8)."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView
from byoc.patterns import Match, const, op, wildcard

from byoc_dnnl.annotate import constant, rank_of
from byoc_dnnl.kinds.base import Call, Composite, Family, Kind, Op, Writer, dims, window
from byoc_dnnl.kinds.eltwise import ACTIVATIONS, HARDSWISH, SWISH, hardswish_of, swish_of
from byoc_dnnl.kinds.int8 import static_qconv
from byoc_dnnl.lowering import Lowering

# A ConvTranspose whose kernel is its stride, of at most this many output channels, runs as a
# 1x1 convolution and a depth-to-space (_shuffled_deconv).
SHUFFLED_DECONV = 4


def _conv(node: NodeView) -> str | None:
    a = node.attrs
    w = constant(node, 1)
    if w is None:
        return "the weights are not a constant"
    if len(node.inputs) > 2 and node.inputs[2] and constant(node, 2) is None:
        return "the bias is not a constant"
    if not 3 <= rank_of(node) <= 5:
        return f"{rank_of(node) - 2}-D convolutions are not supported (1-D to 3-D are)"
    pad = a.get("auto_pad", "NOTSET")
    if pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad={pad!r} is not supported"
    x = node.input_type(0)
    assert x is not None and x.shape is not None
    group = int(a.get("group", 1))
    transposed = node.op_type == "ConvTranspose"
    in_channels = w.shape[0] if transposed else w.shape[1] * group
    if group < 1 or x.shape[1] != in_channels or (transposed and w.shape[0] % group):
        return f"group={group} does not match {x.shape[1]} input channels"
    if transposed:
        if pad != "NOTSET":
            return f"ConvTranspose with auto_pad={pad!r} is not supported"
        if any(d != 1 for d in a.get("dilations", [])):
            return "dilated ConvTranspose is not supported"
        y = node.output_type(0)
        assert y is not None and y.shape is not None
        nd = len(x.shape) - 2
        strides = a.get("strides", [1] * nd)
        k = w.shape[2:]
        begin = _deconv_begin(a, x.shape[2:], y.shape[2:], k, strides)
        for i in range(nd):
            end = (x.shape[2 + i] - 1) * strides[i] + k[i] - y.shape[2 + i] - begin[i]
            if end < 0:
                return "ConvTranspose output_padding beyond the end padding is not supported"
    if any(s < 1 for s in a.get("strides", [])) or any(d < 1 for d in a.get("dilations", [])):
        return "strides and dilations must be >= 1"
    return None


def _lower_conv(low: Lowering, node: NodeView) -> None:
    if static_qconv(low, node):
        return
    w, xs, ys, k, strides = _window(low, node)
    dil = list(node.attrs.get("dilations", [1] * len(k)))
    pads = low.pads(node.attrs, xs[2:], ys[2:], k, strides, dil)
    _convolution(low, "conv", node, low.grouped(w, node), strides, dil, pads)


def _deconv_begin(a: dict[str, Any], xs: Any, ys: Any, k: Any, strides: list[int]) -> list[int]:
    """A ConvTranspose's begin pads over spatial input ``xs`` and output ``ys``: ``pads``, or,
    when ``output_shape`` is given (ONNX then ignores ``pads``), the larger half of the total
    padding, as ONNX and onnxruntime derive it (with no auto_pad)."""
    nd = len(k)
    if "output_shape" not in a:
        return list(a.get("pads", [0] * 2 * nd))[:nd]
    extra = a.get("output_padding", [0] * nd)
    total = [(xs[i] - 1) * strides[i] + extra[i] + k[i] - ys[i] for i in range(nd)]
    return [t - t // 2 for t in total]


def _lower_conv_transpose(low: Lowering, node: NodeView) -> None:
    w, xs, ys, k, strides = _window(low, node)
    nd = len(k)
    pl = _deconv_begin(node.attrs, xs[2:], ys[2:], k, strides)
    pr = [(xs[2 + i] - 1) * strides[i] + k[i] - ys[2 + i] - pl[i] for i in range(nd)]
    group = int(node.attrs.get("group", 1))
    few = nd == 2 and group == 1 and w.shape[1] <= SHUFFLED_DECONV
    if few and k == strides and not any(pl + pr):
        _shuffled_deconv(low, node, w, xs, ys)
        return
    ic, ocg = w.shape[0], w.shape[1]
    w = w.reshape(group, ic // group, ocg, *k).swapaxes(1, 2)  # -> g, OC/g, IC/g, k...
    if group == 1:
        w = w[0]
    _convolution(low, "deconv", node, w, strides, [1] * nd, (pl, pr))


def _shuffled_deconv(
    low: Lowering, node: NodeView, w: np.ndarray, xs: tuple[int, ...], ys: tuple[int, ...]
) -> None:
    """A 2-D ConvTranspose of few output channels whose kernel equals its stride (windows
    that never overlap: a DBNet head's 2x2, stride 2) as a 1x1 convolution to OC*kh*kw
    channels, then a depth-to-space (view, transpose, view). oneDNN's deconvolution pads
    the few channels to a block of 16: PP-OCRv4's 24 -> 1 channel over 640x640 took 3.1 ms."""
    ic, oc, kh, kw = w.shape
    n, _, h, wd = xs
    y = node.outputs[0]
    weights = w.transpose(1, 2, 3, 0).reshape(oc * kh * kw, ic, 1, 1)  # (oc, i, j) rows
    bias = low.const(node.inputs[2] if len(node.inputs) > 2 else None)
    rows = low.fresh_name(f"{y}:rows")
    low.shapes[rows] = (n, oc * kh * kw, h, wd)
    low.emit(
        "conv",
        [
            node.inputs[0],
            low.new_const(node.inputs[1], weights),
            None if bias is None else low.new_const(f"{y}:bias", np.repeat(bias, kh * kw)),
        ],
        rows,
        node,
        strides=[1, 1],
        dilations=[0, 0],
        pads_begin=[0, 0],
        pads_end=[0, 0],
    )
    split, moved = low.fresh_name(f"{y}:split"), low.fresh_name(f"{y}:moved")
    low.shapes[split] = (n, oc, kh, kw, h, wd)
    low.shapes[moved] = (n, oc, h, kh, wd, kw)
    low.emit("view", [rows], split, node)
    low.emit("transpose", [split], moved, node, perm=[0, 1, 4, 2, 5, 3])
    low.emit("view", [moved], y, node)
    assert low.shape(y) == (n, oc, h * kh, wd * kw)


def _window(
    low: Lowering, node: NodeView
) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...], list[int], list[int]]:
    """A Conv's or ConvTranspose's constant weights, input and output shapes, kernel and
    strides."""
    w = low.const(node.inputs[1])
    assert w is not None  # the check asked for constant weights
    xs, ys = low.shape(node.inputs[0]), low.shape(node.outputs[0])
    k = list(w.shape[2:])
    return w, xs, ys, k, list(node.attrs.get("strides", [1] * len(k)))


def _convolution(
    low: Lowering,
    kind: str,
    node: NodeView,
    w: np.ndarray,
    strides: list[int],
    dilations: list[int],
    pads: tuple[list[int], list[int]],
) -> None:
    """A conv or deconv kernel: weights laid out as oneDNN wants them (groups first), the
    optional bias, ONNX's dilations (oneDNN counts them from 0)."""
    weights = low.new_const(node.inputs[1], w)
    low.emit(
        kind,
        [node.inputs[0], weights, low.bias(node)],
        node.outputs[0],
        node,
        strides=strides,
        dilations=[d - 1 for d in dilations],
        pads_begin=pads[0],
        pads_end=pads[1],
    )


def _residual_check(match: Match) -> str | None:
    """The residual operand of the sum is a computed tensor of the conv's output shape (then
    every member passes its own check, as in every composite marked ``members``)."""
    add = match.producer("sum")
    out = add.output_type(0)
    if match.constant("residual") is not None:
        return "the residual operand is a constant"
    for i in range(2):
        t = add.input_type(i)
        if t is None or out is None or t.shape != out.shape:
            return "the residual operand is broadcast"
    return None


def _params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return window(node["attrs"], len(node["shape"]) - 2), []


def _writer(deconv: bool) -> Writer:
    def write(c: Call) -> str:
        a, op = c.attrs, c.operands
        geometry = ", ".join(dims(a[k]) for k in ("strides", "dilations", "pads_begin", "pads_end"))
        flag = "true" if deconv else "false"
        return f"conv(c, {flag}, {op[0]}, {op[1]}, {op[2]}, {c.shape}, {geometry}, {c.posts})"

    return write


def _composites() -> list[Composite]:
    conv_nobias = op("Conv", wildcard(), const())
    conv = conv_nobias | op("Conv", wildcard(), const(), const())
    bn = op("BatchNormalization", conv, const(), const(), const(), const())
    conv_bias = op("Add", conv, const(), commutative=True)
    biased = conv_bias | op("Conv", wildcard(), const(), const())  # the bias is Add or Conv's B
    act = ACTIVATIONS
    residual = op("Add", conv | bn | conv_bias, wildcard("residual"), commutative=True).named("sum")
    deconv = op("ConvTranspose", wildcard(), const(), const())
    return [
        Composite("dnnl.conv2d_bias_sum_relu", [op("Relu", residual)], _residual_check),
        Composite("dnnl.conv2d_bias_sum", [residual], _residual_check),
        Composite("dnnl.conv2d_bn_hardswish", [hardswish_of(bn.named("x"))], lower=HARDSWISH),
        Composite("dnnl.conv2d_bias_hardswish", [hardswish_of(biased.named("x"))], lower=HARDSWISH),
        Composite("dnnl.conv2d_hardswish", [hardswish_of(conv_nobias.named("x"))], lower=HARDSWISH),
        Composite("dnnl.conv2d_bn_swish", [swish_of(bn.named("x"))], lower=SWISH),
        Composite("dnnl.conv2d_bias_swish", [swish_of(biased.named("x"))], lower=SWISH),
        Composite("dnnl.conv2d_swish", [swish_of(conv_nobias.named("x"))], lower=SWISH),
        Composite("dnnl.conv2d_bn_relu", [op(act, bn)]),
        Composite("dnnl.conv2d_bn", [bn]),
        Composite("dnnl.conv2d_bias_relu", [op(act, biased)]),
        Composite("dnnl.conv2d_relu", [op(act, conv_nobias)]),
        Composite("dnnl.conv2d_bias", [conv_bias]),
        Composite("dnnl.deconv2d_bias_relu", [op(act, deconv)]),
    ]


FAMILY = Family(
    kinds=[
        Kind("conv", 1, _params, write=_writer(deconv=False), post_ops=True),
        Kind("deconv", 2, _params, write=_writer(deconv=True), post_ops=True),
    ],
    ops={"Conv": Op(_conv, _lower_conv), "ConvTranspose": Op(_conv, _lower_conv_transpose)},
    composites=_composites(),
)
