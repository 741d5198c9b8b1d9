"""Int8 kinds: ``qmatmul`` and ``qconv``, the dense layers and convolutions
``onnxruntime.quantization`` writes (``quantize_dynamic``'s composites, and a float32 MatMul,
Gemm or Conv of a QuantizeLinear's integers, ``quantize_static``'s QDQ format), with the
quantization ops they read: DynamicQuantizeLinear (no kernel of its own), QuantizeLinear and
DequantizeLinear. JSON mode only (the C kernel library has no int8 kernels), but for the
DequantizeLinear of constants."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from byoc import NodesRefused, NodeView
from byoc.patterns import Match, Pattern, const, op, wildcard
from byoc.plan import Composite as Found

from byoc_dnnl.annotate import dequantize_check, dequantized, qparams, quantize_check
from byoc_dnnl.kinds.base import Composite, Family, Kind, Op, dst, ints, number, window
from byoc_dnnl.lowering import Kernel, Lowering
from byoc_dnnl.ops import INT_RANGES


def _dynamic_quantize(node: NodeView) -> str | None:
    """DynamicQuantizeLinear makes no kernel of its own: the int8 layers reading it
    (``dnnl.qmatmul``, ``dnnl.qconv``) quantize its input, so it is claimed only when they
    alone read it."""
    t = node.input_type(0)
    if t is None or t.dtype != np.float32 or not t.is_static or not t.shape:
        return f"input '{node.inputs[0]}' must be float32 of a static shape (rank >= 1)"
    graph = node.graph
    layers = {"MatMulInteger", "ConvInteger"}
    for i, name in enumerate(node.outputs):
        readers = {graph.nodes[r].op_type for r in graph.consumers.get(name, [])}
        if name in graph.outputs or not readers <= (layers, {"Mul"}, layers)[i]:
            return "an output is read by something other than the int8 layers after it"
    return None


def _qmatmul_patterns() -> tuple[Pattern, Pattern]:
    """A dense layer as ``onnxruntime.quantization.quantize_dynamic`` writes it: MatMulInteger of
    a DynamicQuantizeLinear's u8 output by constant int8 weights, Cast to float, times the
    activation's scale times the weights' (one, or one per column); with a bias, and without."""
    xq, xzp, w = wildcard("xq"), wildcard("xzp"), const("w")
    product = op("MatMulInteger", xq, w, xzp, const("wzp")) | op("MatMulInteger", xq, w, xzp)
    scale = op("Mul", wildcard("xs"), const("ws"), commutative=True)
    y = op("Mul", op("Cast", product).named("int"), scale, commutative=True)
    return op("Add", y, const("bias"), commutative=True), y


def int8_weights(w: np.ndarray, zp: np.ndarray | None, axis: int) -> tuple[np.ndarray, int] | None:
    """Quantized weights ``w`` (int8 or uint8) with zero point ``zp`` (none, one, or one per
    output channel along ``axis``) as int8 values and one zero point, the same differences:
    ``w - zp`` and 0 when every difference is an int8 value (7-bit uint8 weights, as
    ``reduce_range`` writes them, with any zero points); else, with one zero point, the
    weights and it shifted to int8 (uint8 minus 128). None: zero points that differ between
    channels and differences that are not int8 values."""
    z = np.zeros(1, np.int16) if zp is None else zp.astype(np.int16).reshape(-1)
    shape = [1] * w.ndim
    shape[axis] = z.size
    diff = w.astype(np.int16) - z.reshape(shape)
    if diff.size and diff.min() >= -128 and diff.max() <= 127:
        return diff, 0
    if np.any(z != z[0]):
        return None
    shift = 128 if w.dtype == np.uint8 else 0
    return w.astype(np.int16) - shift, int(z[0]) - shift


def _qconv_patterns() -> tuple[Pattern, Pattern, Pattern]:
    """A convolution as ``quantize_dynamic`` writes it: ConvInteger of a DynamicQuantizeLinear's
    u8 output by constant int8 weights, Cast to float, times the activation's scale times the
    weights' (one, or one per output channel); with a bias, and without. Older onnxruntimes
    (ddddocr's models) quantized the bias too, at run time: ``int32(floor(bias / scale))``
    added to the product before the Cast."""
    xq, xzp, w = wildcard("xq"), wildcard("xzp"), const("w")
    product = op("ConvInteger", xq, w, xzp, const("wzp")) | op("ConvInteger", xq, w, xzp)
    scale = op("Mul", wildcard("xs"), const("ws"), commutative=True)
    y = op("Mul", op("Cast", product.named("conv")).named("int"), scale, commutative=True)
    qbias = op("Cast", op("Floor", op("Div", const("bias"), scale))).named("qbias")
    qbias = (op("Reshape", qbias, const()) | qbias).named("added")
    acc = op("Add", product.named("conv"), qbias, commutative=True)
    y_qbias = op("Mul", op("Cast", acc).named("int"), scale, commutative=True)
    return y_qbias, op("Add", y, const("bias"), commutative=True), y


def _quantized_input(match: Match) -> str | None:
    """The activation, its scale and zero point of an int8 layer are one DynamicQuantizeLinear's
    outputs, and the product is cast to float32 of a static shape."""
    graph, b = match.graph, match.bound
    index = graph.producer.get(b["xq"])
    quantize = graph.view(index) if index is not None else None
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear":
        return "its activation does not come from a DynamicQuantizeLinear"
    if list(quantize.outputs) != [b["xq"], b["xs"], b["xzp"]]:
        return "its activation, scale and zero point are not one DynamicQuantizeLinear's"
    reason = _dynamic_quantize(quantize)
    if reason:
        return f"{quantize.name}: {reason}"
    if int(match.producer("int").attrs.get("to", 0)) != onnx.TensorProto.FLOAT:
        return "the product is not cast to float32"
    out = match.root.output_type(0)
    if out is None or out.dtype != np.float32 or not out.is_static:
        return "the output is not float32 of a static shape"
    return None


def _qconv_check(match: Match) -> str | None:
    """As ``_qmatmul_check``; the weights (OC, IC/group, k...) are int8 or uint8 with one zero
    point (a convolution whose groups have one output channel each, or one group, with one
    weights' scale, when the zero point is not 0 once uint8 weights are shifted to int8); the
    bias is one float32 per output channel, or its run-time quantization (``_qconv_patterns``)."""
    reason = _quantized_input(match)
    if reason:
        return reason
    w, ws, conv = match.constant("w"), match.constant("ws"), match.producer("conv")
    assert w is not None and ws is not None
    if w.dtype not in (np.int8, np.uint8):
        return f"the weights are {w.dtype}; int8 or uint8 is supported"
    x = conv.input_type(0)
    assert x is not None and x.shape is not None
    a, oc = conv.attrs, w.shape[0]
    group = int(a.get("group", 1))
    wzp = match.constant("wzp") if "wzp" in match.bound else None
    if wzp is not None and (wzp.dtype != w.dtype or wzp.size not in (1, oc)):
        return f"the weights' zero point must be one or {oc} {w.dtype} values"
    weights = int8_weights(w, wzp, 0)
    if weights is None:
        return "the weights' zero points differ between channels, and w - zero point is not int8"
    shifted = weights[1]
    if shifted and group > 1 and oc != group:
        return "a weights' zero point on a grouped convolution with groups of several channels"
    if shifted and ws.size != 1:
        return "a weights' zero point with one scale per channel"
    if "qbias" in match.bound and int(match.producer("qbias").attrs.get("to", 0)) != 6:
        return "the quantized bias is not cast to int32"
    if not 3 <= len(x.shape) == w.ndim <= 5:
        return f"a convolution of rank {len(x.shape)} by weights {w.shape} is not supported"
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad={a['auto_pad']!r} is not supported"
    if group < 1 or oc % group or x.shape[1] != w.shape[1] * group:
        return f"group={group} does not match {x.shape[1]} input channels"
    if any(s < 1 for s in a.get("strides", [])) or any(d < 1 for d in a.get("dilations", [])):
        return "strides and dilations must be >= 1"
    if ws.dtype != np.float32 or ws.size not in (1, oc) or not np.all(np.isfinite(ws)):
        return f"the weights' scale must be {oc} or one finite float32 values"
    bias = match.constant("bias") if "bias" in match.bound else None
    rank = len(x.shape)
    if bias is not None:
        added = match.graph.type_of(match.bound["added"]) if "qbias" in match.bound else None
        shape = bias.shape if added is None else added.shape
        # as it broadcasts against the output
        shape = None if shape is None else (1,) * (rank - len(shape)) + tuple(shape)
        if bias.dtype != np.float32 or bias.size != oc or shape != (1, oc) + (1,) * (rank - 2):
            return f"the bias must be {oc} float32 values along the channel axis"
    return None


def _qmatmul_check(match: Match) -> str | None:
    """The activation, its scale and zero point are one DynamicQuantizeLinear's outputs; the
    weights are int8 or uint8 of shape (K, N) with one zero point (per layer, or the same for
    every column); scales and bias are float32 per layer or per column."""
    reason = _quantized_input(match)
    if reason:
        return reason
    b = match.bound
    w, ws = match.constant("w"), match.constant("ws")
    assert w is not None and ws is not None
    wzp = match.constant("wzp") if "wzp" in b else None
    if w.dtype not in (np.int8, np.uint8) or w.ndim != 2:
        return f"the weights are {w.dtype} of rank {w.ndim}; int8 or uint8 of rank 2 is supported"
    n = w.shape[1]
    if wzp is not None and (wzp.dtype != w.dtype or wzp.size not in (1, n)):
        return f"the weights' zero point must be one or {n} {w.dtype} values"
    if int8_weights(w, wzp, 1) is None:
        return "the weights' zero points differ between columns, and w - zero point is not int8"
    if ws.dtype != np.float32 or ws.size not in (1, n) or not np.all(np.isfinite(ws)):
        return f"the weights' scale must be {n} or one finite float32 values"
    x = match.graph.view(match.graph.producer[b["xq"]]).input_type(0)
    assert x is not None and x.shape is not None
    if len(x.shape) < 2 or x.shape[-1] != w.shape[0]:
        return f"the activation {x} is not (..., {w.shape[0]}), a product by weights {w.shape}"
    bias = match.constant("bias") if "bias" in b else None
    if bias is not None and (
        bias.dtype != np.float32 or bias.size != n or bias.ndim > len(x.shape)
    ):
        return f"the bias must be {n} float32 values along the last axis"
    return None


def _dequantize_float(node: NodeView) -> str | None:
    """``dequantize_check``, but not of a QuantizeLinear's integers (the C source mode has none)."""
    producer = node.graph.producer.get(node.inputs[0])
    if producer is not None and node.graph.nodes[producer].op_type == "QuantizeLinear":
        return 'a QuantizeLinear\'s integers run in the JSON runtime only (codegen = "json")'
    return dequantize_check(node)


def _lower_qmatmul(low: Lowering, comp: Found, members: list[NodeView]) -> None:
    """An int8 dense layer reading a DynamicQuantizeLinear of this partition (which made no
    kernel: this one quantizes its input); weights, scale, bias and the weights' zero point
    (when not 0) as float32 constants: the int8 weights and zero point of
    ``int8_weights`` (w - z, or uint8 ones shifted to int8)."""
    b, root = comp.bound, members[-1]
    x = low.quantized.get(b["xq"])
    if x is None:
        raise NodesRefused({m.name: "its DynamicQuantizeLinear runs elsewhere" for m in members})
    w = low.const(b["w"])
    ws = low.const(b["ws"])
    assert w is not None and ws is not None
    weights = int8_weights(w, low.const(b.get("wzp")), 1)
    assert weights is not None  # the check asked for int8 weights and one zero point
    bias = low.const(b.get("bias"))
    zero = weights[1]
    inputs = [
        x,
        low.new_const(b["w"], weights[0]),
        None if bias is None else low.new_const(b["bias"], bias.reshape(-1)),
        low.new_const(b["ws"], ws.reshape(-1)),
    ]
    if zero:
        inputs.append(low.new_const(b["wzp"], np.array([zero])))
    uint8 = int(w.dtype == np.uint8)
    k = low.emit("qmatmul", inputs, root.outputs[0], root, uint8=uint8)
    k.members = [m.name for m in members]


def _lower_qconv(low: Lowering, comp: Found, members: list[NodeView]) -> None:
    """An int8 convolution reading a DynamicQuantizeLinear of this partition, as
    ``_lower_qmatmul``: weights and zero point as ``int8_weights`` makes them, bias and scale
    as float32 constants, the convolution's geometry as a Conv's (``_int8_conv``).
    ``int_bias``: the bias is quantized at run time (``floor(bias / scale)``, added to the
    int32 product) as older onnxruntimes wrote it."""
    b, root = comp.bound, members[-1]
    x = low.quantized.get(b["xq"])
    if x is None:
        raise NodesRefused({m.name: "its DynamicQuantizeLinear runs elsewhere" for m in members})
    conv = next(m for m in members if m.op_type == "ConvInteger")
    w, ws = low.const(b["w"]), low.const(b["ws"])
    assert w is not None and ws is not None
    weights = int8_weights(w, low.const(b.get("wzp")), 0)
    assert weights is not None  # the check asked for int8 weights and one zero point
    w, zero = weights
    bias = low.const(b.get("bias"))
    inputs = [
        x,
        low.new_const(b["w"], low.grouped(w, conv)),
        None if bias is None else low.new_const(b["bias"], bias.reshape(-1)),
        low.new_const(b["ws"], ws.reshape(-1)),
        low.new_const(b.get("wzp", b["w"]), np.array([zero])) if zero else None,
    ]
    kernel = _int8_conv(low, conv, w, inputs, root, int_bias=int("qbias" in b))
    kernel.members = [m.name for m in members]


def _int8_conv(
    low: Lowering,
    conv: NodeView,
    w: np.ndarray,
    inputs: list[str | None],
    root: NodeView,
    **attrs: Any,
) -> Kernel:
    """A qconv kernel writing ``root``'s output, with Conv (or ConvInteger) ``conv``'s
    geometry and weights ``w``."""
    ys, k = low.shape(root.outputs[0]), list(w.shape[2:])
    strides = list(conv.attrs.get("strides", [1] * len(k)))
    dil = list(conv.attrs.get("dilations", [1] * len(k)))
    pads = low.pads(conv.attrs, low.shape(conv.inputs[0])[2:], ys[2:], k, strides, dil)
    return low.emit(
        "qconv",
        inputs,
        root.outputs[0],
        root,
        strides=strides,
        dilations=[d - 1 for d in dil],
        pads_begin=pads[0],
        pads_end=pads[1],
        **attrs,
    )


def static_qconv(low: Lowering, node: NodeView) -> bool:
    """A Conv of a DequantizeLinear of this partition's QuantizeLinear, by weights
    dequantized from int8 constants (one scale, or one per output channel; zero points 0),
    as an int8 convolution of the QuantizeLinear's integers (their scale and zero point:
    ``src_scale``, ``src_zero_point``), its bias dequantized to float32. False: a float32
    convolution of the dequantized values instead."""
    x, wname = _dequantized(low, node.inputs[0]), _dequantized(low, node.inputs[1])
    if x is None or wname is None or x[0] not in low.static:
        return False
    w, ws, wz = (low.const(n) for n in wname)
    if w is None or ws is None or w.dtype != np.int8 or (wz is not None and np.any(wz != 0)):
        return False
    wdq = low.graph.view(low.graph.producer[node.inputs[1]])
    if ws.size != 1 and (ws.size != w.shape[0] or int(wdq.attrs.get("axis", 1)) % w.ndim):
        return False
    s, zero, _ = low.static[x[0]]
    inputs = [
        x[0],
        low.new_const(wname[0], low.grouped(w, node)),
        low.bias(node),
        low.new_const(wname[1], ws.reshape(-1)),
    ]
    _int8_conv(low, node, w, inputs, node, int_bias=0, src_scale=s, src_zero_point=zero)
    return True


def _dequantized(low: Lowering, name: str) -> tuple[str, str, str | None] | None:
    """The integers, scale and zero point (None: absent) a DequantizeLinear reads to make
    value ``name``, or None when no DequantizeLinear makes it."""
    i = low.graph.producer.get(name)
    node = None if i is None else low.graph.view(i)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    zero = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    return node.inputs[0], node.inputs[1], zero


def static_qmatmul(low: Lowering, node: NodeView) -> bool:
    """A MatMul (or a Gemm: alpha and beta 1, a bias of one value per column) of a
    DequantizeLinear of this partition's QuantizeLinear, by (K, N) weights dequantized from
    int8 constants (one scale, or one per column; zero points 0): an int8 dense layer of the
    QuantizeLinear's integers, as ``static_qconv``. False: a float32 one instead."""
    x, wname = _dequantized(low, node.inputs[0]), _dequantized(low, node.inputs[1])
    if x is None or wname is None or x[0] not in low.static:
        return False
    w, ws, wz = (low.const(n) for n in wname)
    if w is None or ws is None or w.dtype != np.int8 or w.ndim != 2:
        return False
    if wz is not None and np.any(wz != 0):
        return False
    wdq = low.graph.view(low.graph.producer[node.inputs[1]])
    columns = int(wdq.attrs.get("axis", 1)) % 2  # the axis of per-column scales
    a, bias = node.attrs, None
    if node.op_type == "Gemm":
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            return False
        if a.get("transB", 0):
            w, columns = w.T, 1 - columns
        c = low.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if c is not None and c.size != w.shape[1]:
            return False
        bias = None if c is None else low.new_const(node.inputs[2], c.reshape(-1))
    if ws.size != 1 and (ws.size != w.shape[1] or columns != 1):
        return False
    s, zero, _ = low.static[x[0]]
    inputs = [x[0], low.new_const(wname[0], w), bias, low.new_const(wname[1], ws.reshape(-1))]
    low.emit("qmatmul", inputs, node.outputs[0], node, src_scale=s, src_zero_point=zero)
    return True


def _lower_dynamic_quantize(low: Lowering, node: NodeView) -> None:
    """No kernel: the int8 layers reading it (``_lower_qmatmul``, ``_lower_qconv``) quantize
    its input.
    Its outputs exist only inside them (the support check made sure of that in the whole
    model); refused when the partition lost one of those readers."""
    readers = {r for name in node.outputs for r in low.graph.consumers.get(name, [])}
    int8 = ("dnnl.qmatmul", "dnnl.qconv")
    inside = {n for c in low.partition.composites if c.name in int8 for n in c.nodes}
    if set(node.outputs) & set(low.partition.outputs) or any(
        low.graph.nodes[r].name not in inside for r in readers
    ):
        raise NodesRefused({node.name: "an int8 layer reading it runs elsewhere"})
    low.quantized[node.outputs[0]] = node.inputs[0]


def _lower_dequantize(low: Lowering, node: NodeView) -> None:
    """Of a constant (weights, a bias, a quantized embedding table's rows folded): a
    float32 constant, as onnxruntime computes it; of a QuantizeLinear's integers, a binary
    kernel, ``(q - zero point) * scale``; else a host step after the Gather of u8 or i8
    rows."""
    x, y = node.inputs[0], node.outputs[0]
    scale = low.const(node.inputs[1])
    assert scale is not None  # the check asked for constant scales and zero points
    if x in low.partition.inputs:  # integers made in another partition
        raise NodesRefused({node.name: "the integers it reads are made elsewhere"})
    if x in low.static:
        s, zero, _ = low.static[x]
        rank = len(low.shape(x))
        if zero == 0:
            low.emit("binary", [x, low.scalar(y, s, rank)], y, node, alg="mul")
            return
        k = low.emit("binary", [x, low.scalar(y, zero, rank)], y, node, alg="sub")
        k.post_ops = [{"kind": "eltwise", "alg": "linear", "alpha": s, "beta": 0.0}]
        return
    zp = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else f"{y}:zero"
    if low.const(zp) is None:  # absent: 0 of the input's type
        low.consts[zp] = np.zeros(scale.shape, low.dtype(x))
    q = low.const(x)
    if q is None:
        low.emit("dequantize", [x, node.inputs[1], zp], y, node)
        return
    zero = low.const(zp)
    assert zero is not None
    axis = int(node.attrs.get("axis", 1))
    low.consts[y] = np.ascontiguousarray(dequantized(q, scale, zero, axis))


def _lower_quantize(low: Lowering, node: NodeView) -> None:
    """A binary kernel: ``x / scale``, rounded half to even, plus the zero point, clipped
    to the type's range, written as u8 or s8 (``dst``); the fusion pass makes it the post-ops
    of the kernel before it. Its integers stay in the partition: only DequantizeLinears and
    int8 convolutions read them."""
    x, y = node.inputs[0], node.outputs[0]
    if y in low.partition.outputs:
        raise NodesRefused({node.name: "a DequantizeLinear reading it runs elsewhere"})
    params = qparams(node)
    assert params is not None  # the check asked for one constant scale and zero point
    low.static[y] = params
    s, zero, dtype = params
    lo, hi = INT_RANGES[dtype]
    k = low.emit("binary", [x, low.scalar(y, s, len(low.shape(x)))], y, node, alg="div")
    k.attrs["dst"] = dtype
    k.post_ops = [
        {"kind": "eltwise", "alg": "round", "alpha": 0.0, "beta": 0.0},
        {"kind": "eltwise", "alg": "linear", "alpha": 1.0, "beta": float(zero)},
        {"kind": "eltwise", "alg": "clip", "alpha": float(lo), "beta": float(hi)},
    ]


def _static_source(i: int, a: dict[str, Any], ip: list[int], fp: list[float]) -> None:
    """An int8 layer's static source and output type (a flag and the type's code; the source's
    scale and zero point), appended when it has either: artifacts before them have neither."""
    if "src_scale" in a or "dst" in a:
        ip += [int("src_scale" in a), dst(i, a)]
    if "src_scale" in a:
        fp += [number(a["src_scale"], "src_scale"), number(a["src_zero_point"], "src_zero_point")]


def _qmatmul_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    ip: list[int] = []
    fp: list[float] = []
    _static_source(i, node["attrs"], ip, fp)
    return ip, fp


def _qconv_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    a = node["attrs"]
    ip = window(a, len(node["shape"]) - 2) + ints([a.get("int_bias", 0)], "int_bias", 1)
    fp: list[float] = []
    _static_source(i, a, ip, fp)
    return ip, fp


FAMILY = Family(
    kinds=[
        Kind("qmatmul", 18, _qmatmul_params, post_ops=True),
        Kind("qconv", 20, _qconv_params, post_ops=True),
    ],
    ops={
        "DequantizeLinear": Op(
            dequantize_check, _lower_dequantize, typed=False, c_check=_dequantize_float
        ),
        "DynamicQuantizeLinear": Op(
            _dynamic_quantize, _lower_dynamic_quantize, typed=False, json_only=True
        ),
        "QuantizeLinear": Op(quantize_check, _lower_quantize, typed=False, json_only=True),
    },
    composites=[
        Composite(
            "dnnl.qmatmul",
            _qmatmul_patterns(),
            _qmatmul_check,
            _lower_qmatmul,
            members=False,
            json_only=True,
        ),
        Composite(
            "dnnl.qconv",
            _qconv_patterns(),
            _qconv_check,
            _lower_qconv,
            members=False,
            json_only=True,
        ),
    ],
)
