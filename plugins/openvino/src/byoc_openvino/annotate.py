"""Which nodes OpenVINO's CPU plugin takes, asked of OpenVINO itself.

Once per graph (``Support``): the whole model goes through OpenVINO's ONNX frontend and
``Core.query_model(model, "CPU")``; each OpenVINO op is traced back to the ONNX node whose
output it makes (its output tensor names are the ONNX value names; the ops a node is
decomposed into inherit the node of the ops that read them). A node is supported when every op
made from it is. Nodes the frontend cannot convert are cut out of the model (their outputs
become inputs) and the rest is converted again, so one unconvertible node costs its neighbours
nothing; the frontend's message is the refusal's reason. A node that cannot be traced (its ops
were folded away, or the whole-model query failed or crashed a trial process, ``trial``) is
asked alone: a one-node model, cached by op type, attributes, input types and shapes and the
values of small constant inputs.

Some refusals come from what the CPU plugin computes otherwise than onnxruntime rather than
from its answer (``dtype_reason``): float64 in float32; int64 in int32 and int32 through
float32, so an integer value not known to stay below 2**24 stays on onnxruntime (the int32
results of MatMulInteger and ConvInteger of int8 weights are exact: int8 kernels); x / y (Div,
Mod) as x * (1 / y), so a divisor that may be a tiny subnormal; empty tensors; LRN,
QuantizeLinear (but one only DequantizeLinears read, ``_fake_quantize``), QLinearConv and
DynamicQuantizeLinear (``WRONG``); a TopK whose indices are
read, or that is unsorted, and a Hardmax over 8 values or more (their ties and order are not
ONNX's); antialiased Resize, cubic Resize excluding outside pixels, Resize keeping the aspect
ratio, RoiAlign's max mode, AveragePool counting pads and LpPool with ceil_mode, MaxPool and
AveragePool whose ceil_mode window ONNX drops, MaxPool's column-major indices, and LSTM with
peepholes or input_forget (``_variant_reason``); an input OpenVINO needs constant (a
Reshape's shape, Tile's repeats, a Reduce's axes...) computed at run time
(``_const_input_reason``); a zero Pad before a strided ConvTranspose and a padded strided 1x1
Conv, whose shapes OpenVINO's own rewrites get wrong; a PRelu along axis 1 after a dense
layer, which OpenVINO fuses wrongly and fails to compile; a binary op of a GroupNormalization's
output and another computed tensor, whose compile crashes; a reduction over a batch of signals'
last axis read per channel (``_reduced_signal``); a step function (Sign, Floor, Ceil, Round,
Shrink, a comparison) of a dequantized value, with that DequantizeLinear and the ops between,
as OpenVINO's folded dequantization moves values at the step (``_step_of_dequantized``);
arithmetic on int8 and uint8 that may overflow, which OpenVINO saturates and ONNX wraps
(``_saturated``). And a node to whose output OpenVINO's conversion gives another shape than
ONNX does (``_misshapen``: its frontend ignores ReduceLogSumExp's axes at opsets 13 to 17).
"""

from __future__ import annotations

import hashlib
import io
import re
import threading
import weakref
from collections.abc import Callable, Collection, Mapping
from functools import cache, partial
from typing import Any

import numpy as np
import onnx
from byoc import NodeView, TensorType
from byoc.graph import MOVES
from onnx import helper, numpy_helper

from byoc_openvino import trial
from byoc_openvino.artifact import DTYPES

DEVICE = "CPU"
NOT_SUPPORTED = f"not supported by OpenVINO {DEVICE}"
_MAX_ROUNDS = 8  # conversions of the whole model, each cutting out the nodes that failed
_SMALL_CONST = 1024  # constant inputs up to this many elements key the per-node cache by value
_EXACT = 1 << 24  # integers of at most this magnitude survive float32 exactly
INT_LIMIT = _EXACT  # Backend.int_limit: byoc runs larger integer inputs on onnxruntime
_WIDE_INTS = ("int32", "uint32", "int64", "uint64")
# Integer outputs that stay small whatever the input: indices and sizes of real tensors.
_INDEX_OPS = frozenset({"Shape", "Size", "ArgMax", "ArgMin", "NonZero", "TopK", "Unique"})
# Integer outputs that may grow large although every integer input is small.
_GROWING_OPS = frozenset(
    {
        "Mul", "Pow", "Sum", "CumSum", "ReduceSum", "ReduceProd", "ReduceSumSquare",
        "ReduceL1", "ReduceL2", "MatMul", "MatMulInteger", "ConvInteger", "Gemm", "Einsum",
        "BitShift", "Range", "ConstantOfShape", "RandomUniform", "RandomNormal",
    }
)  # fmt: skip
_INT8_PRODUCTS = ("MatMulInteger", "ConvInteger")  # B's zero point is input 3
# Ops whose integer result may leave its type: ONNX (onnxruntime) wraps it around, OpenVINO's
# CPU plugin saturates an 8-bit one.
_OVERFLOWING = _GROWING_OPS | {"Add", "Sub", "Neg", "Abs", "Div", "Mean", "ReduceMean"}
# Ops that index their data with input 1: onnxruntime fails on an index out of range, OpenVINO
# gives zeros (Gather-8) or writes elsewhere.
_INDEXING = frozenset({"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"})
# Never offered: their values are random (onnxruntime draws others), or they are not tensors.
_NEVER = frozenset(
    {
        "Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
        "RandomUniformLike", "ConcatFromSequence", "SequenceAt", "SequenceConstruct",
        "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SplitToSequence",
    }
)  # fmt: skip
_FAILED_NODE = re.compile(r"While validating ONNX node '<Node\(([^)]*)\): (.*?)>'")
_NO_RULE = re.compile(r"No conversion rule found for operations: (.*)")


@cache
def _openvino() -> Any:
    import openvino

    return openvino


@cache
def core() -> Any:
    """One ``openvino.Core`` per process (it is thread-safe)."""
    return _openvino().Core()


def frontend() -> Any:
    from openvino.frontend import FrontEndManager

    return FrontEndManager().load_by_framework("onnx")


def query(ov_model: Any) -> set[str]:
    """The friendly names of the ops the CPU plugin supports. Its snippets pass (which only
    fuses) is off: it is quadratic in a chain's length (a 1200-op chain: 10.7 s, 0.3 s
    without), and the answer is the same."""
    return set(core().query_model(ov_model, DEVICE, {"SNIPPETS_MODE": "DISABLE"}))


def convert(model: onnx.ModelProto) -> Any:
    """The ONNX model as an ``openvino.Model`` through OpenVINO's ONNX frontend (from bytes:
    nothing is read from disk)."""
    fe = frontend()
    return fe.convert(fe.load(io.BytesIO(model.SerializeToString())))


# -- dtype rules ------------------------------------------------------------------------------


class _Widths:
    """Which 32- and 64-bit integer values of a graph are known to be small (the CPU plugin
    computes int64 in int32, and int32 arithmetic and comparisons through float32: both are
    exact below 2**24): constants that are, the model's inputs (byoc checks them at run time,
    ``INT_LIMIT``), outputs of index ops, and outputs of ops that move, pick, compare or add
    such values. One pass over the nodes, in topological order.

    ``derived`` holds the values computed from a model input, of any dtype (a float cast back
    to an integer is one), index ops' outputs aside: as indices (``_INDEXING``) they may fall
    outside the data, which only a Gather reading a model input itself has checked at run time
    (``runtime.index_bounds``).

    ``exact`` holds the int32 results of MatMulInteger and ConvInteger of int8 weights with no
    zero point (or 0): OpenVINO computes them in its int8 kernels, exactly at any size (else
    through float32, wrong above 2**24); a Cast to float may read them (``exact_use``)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.small: set[str] = {n for n in graph.inputs if _wide(graph.type_of(n))}
        self.derived: set[str] = set(graph.inputs)
        self.exact: set[str] = set()
        for i, proto in enumerate(graph.nodes):
            node = graph.view(i)
            if self._makes_small(node):
                self.small.update(out for out in proto.output if out)
            if node.op_type not in _INDEX_OPS and self.derived.intersection(node.inputs):
                self.derived.update(out for out in proto.output if out)
            if node.op_type in _INT8_PRODUCTS and _symmetric_int8(node):
                self.exact.add(node.outputs[0])

    def value_fits(self, name: str) -> bool:
        value = self.graph.constant(name)
        if value is not None:
            return value.size == 0 or bool(np.all(np.abs(value.astype(np.float64)) <= _EXACT))
        return name in self.small

    def _makes_small(self, node: NodeView) -> bool:
        if node.op_type in _INDEX_OPS:
            return True
        if node.op_type in ("Cast", "CastLike"):
            source = node.input_type(0)
            if source is not None and source.dtype is not None:
                narrow = source.dtype.kind == "b" or (
                    source.dtype.kind in "iu" and source.dtype.itemsize <= 2
                )
                return narrow or (_wide(source) and self.value_fits(node.inputs[0]))
            return False
        return node.op_type not in _GROWING_OPS and all(
            self.value_fits(name)
            for i, name in enumerate(node.inputs)
            if name and _wide(node.input_type(i))
        )

    def exact_use(self, node: NodeView, name: str) -> bool:
        """``name`` is an exact int32 result that ``node`` makes, or casts to float."""
        if name not in self.exact:
            return False
        out = node.output_type(0)
        to_float = out is not None and out.dtype is not None and out.dtype.kind == "f"
        return name in node.outputs or (node.op_type in ("Cast", "CastLike") and to_float)


def _symmetric_int8(node: NodeView) -> bool:
    """B is int8 and its zero point absent or 0."""
    b = node.input_type(1)
    if b is None or b.dtype is None or b.dtype.name != "int8":
        return False
    if len(node.inputs) < 4 or not node.inputs[3]:
        return True
    zero_point = node.const(3)
    return zero_point is not None and not np.any(zero_point)


def _wide(t: TensorType | None) -> bool:
    return t is not None and t.dtype is not None and t.dtype.name in _WIDE_INTS


def _ints(t: TensorType | None) -> bool:
    return t is not None and t.dtype is not None and t.dtype.kind in "iu"


def moved_from(graph: Any, name: str, sources: Collection[str]) -> str | None:
    """The one of ``sources`` whose values ``name`` holds, moved by ``MOVES`` only, or None."""
    while name not in sources:
        if name not in graph.producer:
            return None
        node = graph.nodes[graph.producer[name]]
        if node.op_type not in MOVES or not node.input:
            return None
        name = node.input[0]
    return name


def _index_reason(node: NodeView, widths: _Widths) -> str | None:
    """Why indices computed from a model input cannot go to OpenVINO, or None."""
    if node.op_type not in _INDEXING or len(node.inputs) < 2:
        return None
    indices = node.inputs[1]
    if indices not in widths.derived:
        return None
    if node.op_type == "Gather" and moved_from(node.graph, indices, node.graph.inputs):
        return None  # the model's input, maybe reshaped: its range is checked before each run
    return (
        f"its indices '{indices}' are computed from a model input and may fall outside the "
        f"data, where onnxruntime fails and OpenVINO's {DEVICE} plugin gives zeros"
    )


# Ops OpenVINO says it supports but computes wrongly, found by byoc's conformance suite.
WRONG = {
    "LRN": (
        f"OpenVINO {DEVICE}'s LRN gives wrong values (0.6 off onnxruntime's) when another op "
        "reads its output (conformance suite, OpenVINO 2026.4)"
    ),
    "QuantizeLinear": (
        f"OpenVINO {DEVICE}'s QuantizeLinear adds the zero point before it rounds, in float32: "
        "x / scale = 10.500001 with zero point 128 becomes 138.5 and rounds to even, a step "
        "below onnxruntime's (a QDQ MnasNet 20 output steps off, OpenVINO 2026.4)"
    ),
    "QLinearConv": (
        f"OpenVINO {DEVICE}'s QLinearConv with per-channel weight scales comes out up to 71 "
        "output steps off onnxruntime's, which are the exact ones, and with one scale it "
        "requantizes as its QuantizeLinear does, a step off at rounding ties (a QOperator "
        "ResNet-18: 0.56 off, OpenVINO 2026.4)"
    ),
    "DynamicQuantizeLinear": (
        f"OpenVINO {DEVICE}'s DynamicQuantizeLinear computes its scale as (max - min) * "
        "(1 / 255), an ulp off onnxruntime's (max - min) / 255, which moves values across a "
        "rounding step (a T5 encoder quantized with quantize_dynamic: 0.022 off onnxruntime, "
        "OpenVINO 2026.4)"
    ),
}


# OpenVINO's CPU plugin divides floats as x * (1 / y): wrong where 1 / y overflows, for the
# smallest subnormal divisors (|y| < 1 / FLT_MAX; 1e-40 / 1e-40 is inf, fmod(1.5, 1e-40) is
# -inf). A float Div or Mod is claimed when its divisor cannot be one of those.
_TINY = 1 / float(np.finfo(np.float32).max)
_NON_NEGATIVE = frozenset(
    {"Abs", "Relu", "Exp", "Sigmoid", "Softplus", "Sqrt", "ReduceSumSquare", "ReduceL2"}
)  # fmt: skip


# Inputs an empty constant stands for as "not given" (ONNX's convention before optional inputs
# could be left out): Resize's roi and scales. Exporters write them (PP-OCR's and PicoDet's
# upsampling), and OpenVINO reads them as absent: its results there matched onnxruntime's.
_OPTIONAL_EMPTY = {"Resize": (1, 2)}


def _absent(node: NodeView, name: str) -> bool:
    """Whether ``name`` is an empty constant in one of the node's "not given" positions."""
    places = _OPTIONAL_EMPTY.get(node.op_type, ())
    return any(node.inputs[i] == name for i in places if i < len(node.inputs)) and (
        node.graph.constant(name) is not None
    )


def _safe_divisor(graph: Any, name: str) -> bool:
    """The value is never a nonzero float of magnitude below 1 / FLT_MAX."""
    value = graph.constant(name)
    if value is not None:
        magnitude = np.abs(value.astype(np.float64))
        return bool(np.all((magnitude == 0) | (magnitude >= _TINY)))
    if name not in graph.producer:
        return False
    node = graph.view(graph.producer[name])
    source = node.input_type(0)
    if node.op_type == "Sqrt":  # the root of a subnormal is a normal number
        return True
    if node.op_type in ("Cast", "CastLike"):
        return source is not None and source.dtype is not None and source.dtype.kind in "biu"
    if node.op_type == "Clip":  # x / clamp(n, min=eps)
        low = node.const(1) if len(node.inputs) > 1 else None
        if low is None and "min" in node.attrs:  # opset < 11
            low = np.asarray(node.attrs["min"])
        return low is not None and bool(np.all(low.astype(np.float64) >= _TINY))
    if node.op_type in ("Max", "Add") and len(node.inputs) == 2:  # max(norm, eps), var + eps
        for i in (0, 1):
            low, other = node.const(i), node.inputs[1 - i]
            if low is None or low.size == 0 or not np.all(low.astype(np.float64) >= _TINY):
                continue
            if node.op_type == "Max" or _non_negative(graph, other):
                return True
    return False


def _constant_or_zero(graph: Any, name: str) -> np.ndarray:
    value = graph.constant(name)
    return np.zeros(1) if value is None else value


def _non_negative(graph: Any, name: str) -> bool:
    if name not in graph.producer:
        return False
    node = graph.view(graph.producer[name])
    if node.op_type in _NON_NEGATIVE:
        return True
    if node.op_type in ("ReduceMean", "ReduceSum"):
        return _non_negative(graph, node.inputs[0])
    if node.op_type == "Pow":
        exponent = node.const(1)
        return exponent is not None and exponent.size == 1 and float(exponent.flat[0]) % 2 == 0
    return node.op_type == "Mul" and node.inputs[0] == node.inputs[1]


def _flattening_axis(node: NodeView) -> str | None:
    """Before opset 13, Softmax, LogSoftmax and Hardmax normalize over the input flattened to
    2-D at ``axis``; OpenVINO's frontend normalizes over that axis alone (up to 0.93 off
    onnxruntime for axis 1 of a rank-3 input). The two agree only on the last axis."""
    if node.op_type not in ("Softmax", "LogSoftmax", "Hardmax"):
        return None
    opset = next(
        (o.version for o in node.graph.model.opset_import if o.domain in ("", "ai.onnx")), 13
    )
    t = node.input_type(0)
    if opset >= 13 or t is None or t.shape is None:
        return None
    rank = len(t.shape)
    if int(node.attrs.get("axis", 1)) % max(rank, 1) == rank - 1:
        return None
    return (
        f"{node.op_type} of opset {opset} over the input flattened at axis "
        f"{node.attrs.get('axis', 1)} (not the last): OpenVINO's frontend normalizes over that "
        "axis alone"
    )


def _saturated(node: NodeView) -> str | None:
    """An 8-bit integer result that may overflow: int8 -60 * 3 is 76 in ONNX (it wraps), -128
    in OpenVINO's CPU plugin, and uint8 0 - 3 is 253, not 0."""
    t = node.output_type(0)
    if node.op_type not in _OVERFLOWING or t is None or t.dtype is None:
        return None
    if t.dtype.name not in ("int8", "uint8"):
        return None
    return (
        f"{node.op_type} of {t.dtype} wraps around on overflow in ONNX; OpenVINO's {DEVICE} "
        "plugin saturates it (int8 -60 * 3: 76 against -128)"
    )


def _tie_order(node: NodeView) -> str | None:
    """OpenVINO's TopK breaks ties otherwise than ONNX (equal values: the lower index first),
    so of 1000 picked from 4000 values with ties, other indices; and unsorted (``sorted=0``),
    it returns the same ones in another order than onnxruntime. A sorted TopK whose indices
    nothing reads gives the same values and is claimed. Its Hardmax marks another of equal
    maxima than the first along an axis of 8 or more (ArgMax and ArgMin pick the first)."""
    if node.op_type == "Hardmax":
        t = node.input_type(0)
        size = None if t is None or t.shape is None else t.shape[int(node.attrs.get("axis", -1))]
        if isinstance(size, int) and size < 8:
            return None
        return (
            f"OpenVINO {DEVICE}'s Hardmax does not mark the first of equal maxima, as ONNX "
            "says, along an axis of 8 or more (OpenVINO 2026.4)"
        )
    if node.op_type != "TopK":
        return None
    if int(node.attrs.get("sorted", 1)) == 0:
        return "TopK with sorted=0: OpenVINO returns the top k in another order than onnxruntime"
    indices = node.outputs[1] if len(node.outputs) > 1 else ""
    if indices and (indices in node.graph.consumers or indices in node.graph.outputs):
        return (
            f"OpenVINO {DEVICE}'s TopK does not break ties by the lower index, as ONNX says: "
            "with equal values its indices differ from onnxruntime's (a Mask R-CNN's region "
            "proposals, OpenVINO 2026.4)"
        )
    return None


# Inputs OpenVINO needs constant (by op type). Computed at run time, most set the output's
# shape, and OpenVINO compiles the node with an open one (which the partition's static
# signature refuses); so does Trilu for its k, Dropout's ratio is dropped from the compiled
# model's inputs, and Tile writes garbage (repeats (7, 6, 4, 2) over a rank-4 input; OpenVINO
# 2026.4).
_CONST_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
    "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Resize": (2, 3), "Upsample": (1,),
    "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "OneHot": (1,), "Range": (0, 1, 2),
    "TopK": (1,), "CenterCropPad": (1, 2), "Trilu": (1,), "Dropout": (1, 2),
    **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                           "ReduceSumSquare")},
}  # fmt: skip


def _const_input_reason(node: NodeView) -> str | None:
    """A node reading an input of ``_CONST_INPUTS`` that is computed at run time."""
    for i in _CONST_INPUTS.get(node.op_type, ()):
        if i < len(node.inputs) and node.inputs[i] and node.const(i) is None:
            return (
                f"{node.op_type}'s input '{node.inputs[i]}' is computed at run time; OpenVINO "
                "needs it constant (else it compiles an open output shape)"
            )
    return None


def _ceil_window_dropped(node: NodeView) -> bool:
    """A pool with ceil_mode=1 whose last window ceil_mode adds would start past the input and
    its begin padding: ONNX (and onnxruntime) drop that window, OpenVINO keeps it (a 2x2 input,
    kernel 1, stride 2: 1x1 against OpenVINO's 2x2). True also when the input shape is not
    known."""
    a = node.attrs
    auto_pad = str(a.get("auto_pad", "NOTSET"))
    if not int(a.get("ceil_mode", 0)) or auto_pad not in ("NOTSET", "VALID"):
        return False
    t = node.input_type(0)
    if t is None or not t.is_static or t.shape is None:
        return True
    spatial = [int(d) for d in t.shape[2:]]  # type: ignore[arg-type]
    kernel = [int(k) for k in a.get("kernel_shape", [])]
    n = len(spatial)
    strides = [int(v) for v in a.get("strides", [1] * n)]
    dilations = [int(v) for v in a.get("dilations", [1] * n)]
    pads = [int(v) for v in a.get("pads", [0] * 2 * n)]
    if auto_pad == "VALID":
        pads = [0] * 2 * n
    for j, size in enumerate(spatial):
        span = size + pads[j] + pads[j + n] - ((kernel[j] - 1) * dilations[j] + 1)
        out = -(-span // strides[j]) + 1
        if (out - 1) * strides[j] >= size + pads[j]:
            return True
    return False


def _pad_into_deconv(node: NodeView) -> str | None:
    """OpenVINO folds a zero Pad into the padding of a strided ConvTranspose that reads it,
    where padding crops: ONNX's 9x9 output comes out 7x7 (a 3x3 input padded by 1, kernel 4,
    stride 2, pads 2; OpenVINO 2026.4). The Pad stays on onnxruntime."""
    if node.op_type != "Pad" or node.attrs.get("mode", "constant") != "constant":
        return None
    given = len(node.inputs) > 2 and bool(node.inputs[2])
    value = node.const(2) if given else node.attrs.get("value", 0.0)  # opset < 11: attributes
    if value is None or np.any(np.asarray(value) != 0):
        return None
    graph = node.graph
    for i in graph.consumers.get(node.outputs[0], ()):
        reader = graph.nodes[i]
        strides = next((list(a.ints) for a in reader.attribute if a.name == "strides"), [])
        if reader.op_type == "ConvTranspose" and any(s > 1 for s in strides):
            return (
                f"a zero Pad read by a strided ConvTranspose ('{reader.name}'): OpenVINO folds "
                "it into the ConvTranspose's padding, which crops (9x9 comes out 7x7)"
            )
    return None


def _padded_strided_pointwise(node: NodeView) -> str | None:
    """A 1x1 convolution with a stride and padding: OpenVINO moves the stride in front of it
    (onto the Relu or LayerNormalization before) and loses the padding (3x9 comes out 4x10,
    and the compile fails; OpenVINO 2026.4)."""
    if node.op_type not in ("Conv", "ConvInteger"):
        return None
    a = node.attrs
    kernel = list(a.get("kernel_shape", []))
    weights = node.input_type(1)
    if not kernel and weights is not None and weights.shape is not None:
        kernel = list(weights.shape[2:])
    strided = any(int(v) > 1 for v in a.get("strides", []))
    if kernel and all(k == 1 for k in kernel) and strided and any(a.get("pads", [])):
        return (
            "a 1x1 convolution with a stride and padding: OpenVINO moves the stride in front "
            "of it and loses the padding (3x9 comes out 4x10)"
        )
    return None


_UNARIES = frozenset(
    {
        "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
        "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt", "Erf", "Clip", "Softplus", "Gelu", "Mish",
    }
)  # fmt: skip


def _prelu_after_dense(node: NodeView) -> str | None:
    """A PRelu of rank 4 or more whose slope varies along axis 1, after a MatMul or Gemm
    (through elementwise ops): OpenVINO fuses it into the dense layer as a per-output-channel
    post-op, the last axis, and fails to compile ("data size: 32 OC: 5"; OpenVINO 2026.4).
    The PRelu stays on onnxruntime."""
    if node.op_type != "PRelu":
        return None
    t, slope = node.input_type(0), node.input_type(1)
    if t is None or t.shape is None or len(t.shape) < 4:
        return None
    if slope is not None and slope.shape is not None:
        aligned = [1] * (len(t.shape) - len(slope.shape)) + list(slope.shape)
        if aligned[1] == 1:
            return None
    graph, name = node.graph, node.inputs[0]
    for _ in range(8):
        index = graph.producer.get(name)
        if index is None:
            return None
        source = graph.view(index)
        if source.op_type in ("MatMul", "Gemm"):
            return (
                f"a PRelu with a slope along axis 1 after a dense layer ('{source.name}'): "
                "OpenVINO fuses it as a post-op over the last axis and fails to compile it"
            )
        computed = [n for n in source.inputs if n and graph.constant(n) is None]
        elementwise = source.op_type in _UNARIES or source.op_type in _BINARIES
        if not elementwise or len(computed) != 1:
            return None
        name = computed[0]
    return None


# Functions with a jump at exact values: Sign and the comparisons (with a constant; at 0 they
# are exact when the zero point is 0), Floor, Ceil, Round and Shrink.
_ZERO_STEPS = ("Sign", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual")
_STEPS = frozenset({"Floor", "Ceil", "Round", "Shrink", *_ZERO_STEPS})
_CHAIN = 8  # elementwise ops between a dequantization and a step that the rule follows


def _step_of_dequantized(node: NodeView) -> str | None:
    """A Sign, Floor, Ceil, Round, Shrink or comparison of a dequantized activation, directly or
    through elementwise ops of one computed input: OpenVINO folds the dequantization into its
    neighbours (as q * scale - zero point * scale, and scale times the next constant), so a
    value exactly at a step (0 at the zero point, an integer) comes out an ulp off, 2e-9 where
    onnxruntime has 0, and the result jumps (Sign 1 for 0; OpenVINO 2026.4). The step, the
    DequantizeLinear and the ops between stay on onnxruntime (the step alone would read
    OpenVINO's value). A Sign or comparison is exact when the zero point is 0."""
    graph = node.graph
    jumps = _jumps(node)
    if not (jumps or node.op_type == "DequantizeLinear" or _elementwise(node)):
        return None
    dequantize = node if node.op_type == "DequantizeLinear" else _dequantized(node)
    if dequantize is None or graph.constant(dequantize.inputs[0]) is not None:
        return None  # none, or a weight's: a constant, exact
    step = node if jumps else _step_after(node)  # after the cheap test: float models stop there
    if step is None:
        return None
    point = dequantize.inputs[2] if len(dequantize.inputs) > 2 else ""
    value = graph.constant(point) if point else np.zeros(1)
    if step.op_type in _ZERO_STEPS and value is not None and not np.any(value):
        return None
    return (
        f"a {step.op_type} ('{step.name}') of a dequantized value ('{dequantize.name}'): "
        "OpenVINO folds the dequantization into its neighbours, and a value exactly at a step "
        "comes out an ulp off (2e-9 for 0)"
    )


def _jumps(node: NodeView) -> bool:
    """A step function of one computed input (a Shrink without a jump is not one)."""
    if node.op_type not in _STEPS or _computed(node) is None:
        return False
    a = node.attrs
    return node.op_type != "Shrink" or a.get("bias", 0.0) != a.get("lambd", 0.5)


def _computed(node: NodeView) -> str | None:
    """The node's one computed input (the others constants), or None."""
    computed = [n for n in node.inputs if n and node.graph.constant(n) is None]
    return computed[0] if len(computed) == 1 else None


def _elementwise(node: NodeView) -> str | None:
    """The one computed input of an elementwise op, or None."""
    elementwise = node.op_type in _UNARIES or node.op_type in _BINARIES
    return _computed(node) if elementwise else None


def _dequantized(node: NodeView) -> NodeView | None:
    """The DequantizeLinear that makes the node's computed input, through elementwise ops of
    one computed input, or None."""
    graph, name = node.graph, _computed(node)
    for _ in range(_CHAIN):
        index = graph.producer.get(name) if name else None
        if index is None:
            return None
        source = graph.view(index)
        if source.op_type == "DequantizeLinear":
            return source
        name = _elementwise(source)
    return None


def _step_after(node: NodeView) -> NodeView | None:
    """A step reading the node's output, through elementwise ops of one computed input."""
    graph, frontier = node.graph, [node.index]
    for _ in range(_CHAIN):
        following = []
        for index in frontier:
            for reader in map(graph.view, graph.succ(index)):
                if _jumps(reader):
                    return reader
                if _elementwise(reader):
                    following.append(reader.index)
        frontier = following
    return None


def _binary_after_group_norm(node: NodeView) -> str | None:
    """A binary op reading a GroupNormalization's output and a tensor another node computes
    (not a constant, not a graph input, not made by a node reading that output, as SiLU's
    Sigmoid is; a deeper dependence is refused too, to be safe): OpenVINO fuses the pair and
    crashes the process compiling it (a segfault in ``compile_model``, rank 3 or 4, any
    groups; OpenVINO 2026.4). The binary op (or Sum, Mean) stays on onnxruntime."""
    if node.op_type not in (*_BINARIES, "Sum", "Mean"):
        return None
    graph = node.graph
    made = {n: graph.producer.get(n) for n in node.inputs if n}
    norms = {
        n
        for n, i in made.items()
        if i is not None and graph.nodes[i].op_type == "GroupNormalization"
    }
    for norm in norms:
        for other, index in made.items():
            if other == norm or index is None or graph.constant(other) is not None:
                continue
            if norm not in graph.nodes[index].input:
                return (
                    f"a {node.op_type} of a GroupNormalization's output and '{other}', which "
                    "another node computes: OpenVINO crashes compiling the pair"
                )
    return None


_REDUCES = (
    "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
    "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
)  # fmt: skip
_BINARIES = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu")


def _reduced_signal(node: NodeView) -> str | None:
    """A reduction over the last axis of (N > 1, C, L), read by a binary op against a
    per-channel operand (the same for every n) or by a BatchNormalization, directly or through
    elementwise ops: OpenVINO fuses the chain and broadcasts that operand along the wrong axis
    (a 1-D conv net's mean over time times a (C, 1) constant: 1.25 off; scikit-learn's
    GaussianNB, a (1, 3) constant minus half a sum over the last axis: 99 off; OpenVINO
    2026.4). Rank 4 and full-size operands are right. The reduction stays on onnxruntime."""
    if node.op_type not in _REDUCES:
        return None
    t = node.input_type(0)
    if t is None or t.shape is None or len(t.shape) != 3 or t.shape[0] == 1:
        return None
    if node.op_type.startswith("Reduce"):
        given = node.const(1) if len(node.inputs) > 1 and node.inputs[1] else None
        axes = given if given is not None else node.attrs.get("axes", [0, 1, 2])
        if 2 not in {int(a) % 3 for a in np.asarray(axes).reshape(-1)}:
            return None
    graph, values = node.graph, [node.outputs[0]]
    for _ in range(_CHAIN):  # the reduction's output, then the elementwise ops reading it
        if not values:
            return None
        out = values.pop()
        rank = len((graph.type_of(out) or t).shape or ())
        for i in graph.consumers.get(out, ()):
            reader = graph.view(i)
            if _per_channel(reader, out, rank):
                return (
                    f"a reduction over the last axis of a batch of signals read by "
                    f"{reader.op_type} '{reader.name}' per channel: OpenVINO broadcasts that "
                    "operand along the wrong axis (1.25 off)"
                )
            if reader.op_type in _UNARIES or reader.op_type in _BINARIES:
                values.append(reader.outputs[0])
    return None


def _per_channel(reader: NodeView, out: str, rank: int) -> bool:
    """``reader`` is a BatchNormalization, or a binary op reading ``out`` (of ``rank``) and an
    operand that is the same for every n but not for every channel."""
    per_channel = reader.op_type == "BatchNormalization"
    if reader.op_type in _BINARIES:
        for k, name in enumerate(reader.inputs):
            other = reader.input_type(k) if name != out else None
            if other is None or other.shape is None:  # in real exports: full-size ones
                continue
            shape = list(other.shape)
            if len(shape) <= rank:
                shape = [1] * (rank - len(shape)) + shape
                per_channel |= shape[0] == 1 and rank > 1 and shape[1] != 1
    return per_channel


def _variant_reason(node: NodeView) -> str | None:
    """Attribute settings OpenVINO's CPU plugin computes otherwise than onnxruntime (OpenVINO
    2026.4; the conformance suite's ``OP_VARIANTS`` hold them)."""
    a = node.attrs
    if node.op_type == "Resize" and int(a.get("antialias", 0)):
        return "Resize with antialias=1: OpenVINO's is up to 1.6 off onnxruntime's"
    if node.op_type == "Resize" and a.get("mode") == "cubic" and int(a.get("exclude_outside", 0)):
        return "cubic Resize with exclude_outside=1: OpenVINO's is 0.1 off onnxruntime's"
    if node.op_type == "Resize" and a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return (
            f"Resize with keep_aspect_ratio_policy={a['keep_aspect_ratio_policy']!r}: OpenVINO "
            "stretches to the sizes given (7x9 where onnxruntime keeps the ratio, 7x7)"
        )
    if node.op_type == "RoiAlign" and a.get("mode", "avg") == "max":
        return "RoiAlign with mode='max': OpenVINO's is 0.7 off onnxruntime's"
    if node.op_type == "LSTM" and int(a.get("input_forget", 0)):
        return "LSTM with input_forget=1: OpenVINO's is 0.33 off onnxruntime's"
    given = node.op_type == "LSTM" and len(node.inputs) > 7 and bool(node.inputs[7])
    peepholes = node.const(7) if given else None
    if given and (peepholes is None or np.any(peepholes)):  # all zero: none
        return "LSTM with peepholes (input P): OpenVINO's is 0.12 off onnxruntime's"
    if node.op_type == "LpPool" and int(a.get("ceil_mode", 0)):
        return "LpPool with ceil_mode=1: OpenVINO's is 0.42 off onnxruntime's"
    indices = node.op_type == "MaxPool" and len(node.outputs) > 1 and bool(node.outputs[1])
    if indices and int(a.get("storage_order", 0)):
        return "MaxPool's indices with storage_order=1 (column-major): OpenVINO's count row-major"
    if node.op_type in ("MaxPool", "AveragePool") and _ceil_window_dropped(node):
        return (
            f"{node.op_type} with ceil_mode=1 where ONNX drops the last window (it would start "
            "in the padding): OpenVINO keeps it, one more output row or column"
        )
    counted = int(a.get("count_include_pad", 0)) and any(a.get("pads", []))
    if node.op_type == "AveragePool" and int(a.get("ceil_mode", 0)) and counted:
        return (
            "AveragePool with ceil_mode=1 and padding counted: OpenVINO divides a window that "
            "ceil_mode adds otherwise (0.24 off onnxruntime's)"
        )
    return None


def _fake_quantize(node: NodeView) -> bool:
    """A QuantizeLinear whose integers only DequantizeLinears read: a rounding of floats to
    its scale's grid, which OpenVINO runs as a FakeQuantize and folds into the int8 kernels
    around it. Where it rounds a near-tie a step otherwise than onnxruntime (``WRONG``), the
    dequantized value moves by one step, as onnxruntime's own fused and unfused runs differ by
    (a sum in another order tips a tie): byoc's comparison allows that there
    (``Graph.quantum``), and measured placement returns a partition whose outputs move more.
    Cut at every QuantizeLinear, a QDQ model ran on OpenVINO in a hundred pieces (a QDQ 3-D
    ResNet: 29 partitions; plain OpenVINO runs it in 0.54 of onnxruntime's time)."""
    graph, out = node.graph, node.outputs[0]
    readers = [graph.nodes[i] for i in graph.consumers.get(out, ())]
    return (
        node.op_type == "QuantizeLinear"
        and out not in graph.outputs
        and bool(readers)
        and all(r.op_type == "DequantizeLinear" and r.input[0] == out for r in readers)
        and not _requantized_concat(graph, node.inputs[0])
    )


def _requantized_concat(graph: Any, name: str) -> bool:
    """Whether ``name`` is a Concat's output quantized and dequantized (through ops that only
    move values): OpenVINO 2026.4 crashes the process (a segfault) compiling a QuantizeLinear
    of it. Any other graph that crashes it crashes a trial process instead (``trial``)."""
    for op in ("DequantizeLinear", "QuantizeLinear", "Concat"):
        while name in graph.producer and graph.nodes[graph.producer[name]].op_type in _MOVED:
            name = graph.nodes[graph.producer[name]].input[0]
        maker = graph.nodes[graph.producer[name]] if name in graph.producer else None
        if maker is None or maker.op_type != op or not maker.input:
            return False
        name = maker.input[0]
    return True


_MOVED = MOVES | {"Slice"}  # a Slice of everything: OpenVINO removes it


def dtype_reason(node: NodeView, widths: _Widths) -> str | None:
    """Why the CPU plugin would compute this node at another precision (or wrongly), or None."""
    if node.op_type in WRONG and not _fake_quantize(node):
        return WRONG[node.op_type]
    rule = _flattening_axis(node) or _tie_order(node) or _variant_reason(node)
    rule = rule or _const_input_reason(node) or _pad_into_deconv(node)
    rule = rule or _padded_strided_pointwise(node) or _reduced_signal(node)
    rule = rule or _prelu_after_dense(node) or _binary_after_group_norm(node)
    rule = rule or _step_of_dequantized(node) or _index_reason(node, widths)
    rule = rule or _saturated(node)
    if rule is not None:
        return rule
    divisor = node.input_type(1) if node.op_type in ("Div", "Mod") else None
    floats = divisor is not None and divisor.dtype is not None and divisor.dtype.kind == "f"
    ints = node.op_type == "Div" and _ints(divisor)
    if ints and not np.all(_constant_or_zero(node.graph, node.inputs[1])):
        return (
            f"onnxruntime fails on an integer division by zero, OpenVINO's {DEVICE} plugin "
            f"returns a value; the divisor '{node.inputs[1]}' is not a constant without zeros"
        )
    if floats and not _safe_divisor(node.graph, node.inputs[1]):
        return (
            f"OpenVINO's {DEVICE} plugin divides ({node.op_type}) as x * (1 / y), which is inf "
            f"where 0 < |y| < 1 / FLT_MAX; the divisor '{node.inputs[1]}' is not known to "
            "stay outside that range (a square root, a cast integer, a clamp or a "
            "constant)"
        )
    values = [(n, node.input_type(i)) for i, n in enumerate(node.inputs) if n]
    values += [(n, node.output_type(i)) for i, n in enumerate(node.outputs) if n]
    for name, t in values:
        if t is None or t.dtype is None:
            return f"the type of '{name}' is unknown"
        if t.dtype.name == "float64":
            return f"'{name}' is float64, which OpenVINO's {DEVICE} plugin computes in float32"
        if t.dtype.name not in DTYPES:
            return f"'{name}' is {t.dtype}, which the backend does not hand to OpenVINO"
        if not t.is_static:
            return (
                f"'{name}' has a non-static shape {t}; fix the model's input shapes in the "
                "config's [shapes] table"
            )
        if 0 in (t.shape or ()) and not _absent(node, name):
            return (
                f"'{name}' is empty ({t}): OpenVINO's {DEVICE} plugin computes other values of "
                "a graph holding an empty tensor wrongly (OpenVINO 2026.4)"
            )
    if node.op_type in _INT8_PRODUCTS and node.outputs[0] not in widths.exact:
        return (
            f"OpenVINO's {DEVICE} plugin computes {node.op_type} exactly only with int8 weights "
            f"of zero point 0; with these ('{node.inputs[1]}') it goes through float32, wrong "
            "above 2**24"
        )
    for name, t in values:
        if _wide(t) and not widths.value_fits(name) and not widths.exact_use(node, name):
            return (
                f"'{name}' is {t.dtype}, which OpenVINO's {DEVICE} plugin computes in int32 or "
                "float32, and its values are not known to stay below 2**24 (a model input, or "
                "computed from one)"
            )
    return None


# -- the whole-graph query --------------------------------------------------------------------


class Support:
    """OpenVINO's answer for every node of one graph: ``reasons[name]`` is None (supported) or
    why not; names missing from it are asked one by one (``ask_alone``)."""

    def __init__(self, graph: Any, tried: bool = True) -> None:
        self.graph = graph
        self.reasons: dict[str, str | None] = {}
        self.widths = _Widths(graph)
        self.tried = tried  # the whole-graph query is tried in a child process first (trial)
        self._query()

    def reason(self, node: NodeView) -> str | None:
        found = dtype_reason(node, self.widths)
        if found:
            return found
        if node.name not in self.reasons:
            self.reasons[node.name] = ask_alone(node, self.tried)
        return self.reasons[node.name]

    def _query(self) -> None:
        graph = self.graph
        model = graph.model
        cut = _never_shown(graph)  # WRONG's reason (dtype_reason), or each asked alone
        for _ in range(_MAX_ROUNDS):
            part = model if not cut else _without(graph, cut)
            try:
                ov_model = convert(part)
            except Exception as exc:
                failed = _conversion_failures(str(exc), graph, cut)
                if not failed:
                    return  # nothing to learn from the message: ask node by node
                self.reasons.update(failed)
                cut |= set(failed)
                continue
            self._trace(part, ov_model, cut)
            return

    def _trace(self, part: onnx.ModelProto, ov_model: Any, cut: set[str]) -> None:
        if self.tried and trial.crash("query", part, {}):
            return  # the query would crash this process: ask node by node
        try:
            supported = query(ov_model)
        except Exception:  # the plugin failed on the whole model: ask node by node
            return
        graph = self.graph
        maker = {out: n.name for n in graph.nodes if n.name not in cut for out in n.output if out}
        owners: dict[str, set[str]] = {}  # OpenVINO op (its unique name) -> ONNX nodes
        ops = list(ov_model.get_ordered_ops())
        for op in reversed(ops):
            kind = op.get_type_name()
            if kind in ("Parameter", "Result"):
                continue
            names = {maker[t] for o in op.outputs() for t in o.get_names() if t in maker}
            if op.get_friendly_name() in graph.index and op.get_friendly_name() not in cut:
                names.add(op.get_friendly_name())
            if not names:  # made while converting a node: that of the ops reading it
                readers = [
                    owners.get(i.get_node().get_name(), set())
                    for o in op.outputs()
                    for i in o.get_target_inputs()
                ]
                found = set().union(*readers) if readers else set()
                names = found if len(found) == 1 else set()
            owners[op.get_name()] = names
        verdict: dict[str, list[str]] = {}
        for op in ops:
            for name in owners.get(op.get_name(), ()):
                bad = verdict.setdefault(name, [])
                if op.get_type_name() != "Constant" and op.get_friendly_name() not in supported:
                    bad.append(op.get_type_name())
        for name, bad in verdict.items():
            if bad:
                kinds = ", ".join(sorted(set(bad)))
                self.reasons[name] = f"{NOT_SUPPORTED} (its {kinds} op(s))"
            else:
                self.reasons[name] = None
        for value, why in _misshapen(ov_model, graph.type_of).items():
            if value in maker:
                self.reasons[maker[value]] = why


def _never_shown(graph: Any) -> set[str]:
    """The nodes cut from the graph OpenVINO is asked about: every QuantizeLinear (those that
    may run on OpenVINO, ``_fake_quantize``, are asked alone). OpenVINO 2026.4 crashes the
    process (a segfault in ``query_model`` and in compiling) on a Concat, QuantizeLinear,
    DequantizeLinear, then a QuantizeLinear of that, directly or through an op it removes (an
    Identity, a Transpose by the identity, a Slice of everything): no list of such ops can be
    complete."""
    return {n.name for n in graph.nodes if n.op_type == "QuantizeLinear"}


def _without(graph: Any, cut: set[str]) -> onnx.ModelProto:
    """The model without the nodes in ``cut``: what they made becomes graph inputs, and what
    they read graph outputs (else OpenVINO drops the nodes making it unasked, and their
    answers were taken from ops of other names)."""
    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    g = model.graph
    kept = [n for n in g.node if n.name not in cut]
    made = {out for n in g.node if n.name in cut for out in n.output if out}
    wanted = {x for n in g.node if n.name in cut for x in n.input if x}
    returned = {o.name for o in g.output}
    for n in kept:
        outputs = [o for o in n.output if o in wanted and o not in returned]
        g.output.extend(helper.make_empty_tensor_value_info(o) for o in outputs)
        returned.update(outputs)
    del g.node[:]
    g.node.extend(kept)
    read = {x for n in kept for x in n.input} | {o.name for o in g.output}
    for name in sorted(made & read):
        t = graph.type_of(name)
        if t is None or t.dtype is None:
            continue  # the conversion of its readers fails and says so
        shape = None if t.shape is None else [d if isinstance(d, int) else None for d in t.shape]
        g.input.append(
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), shape)
        )
    outputs = [o for o in g.output if o.name not in made]
    del g.output[:]
    g.output.extend(outputs)
    if not outputs:  # keep a graph: every kept node's outputs
        for n in kept:
            g.output.extend(helper.make_empty_tensor_value_info(o) for o in n.output if o)
    return model


def _conversion_failures(message: str, graph: Any, cut: set[str]) -> dict[str, str]:
    """``{node: reason}`` from the ONNX frontend's report of what it could not convert."""
    failed: dict[str, str] = {}
    for block in message.split("\n-- ")[1:]:
        found = _FAILED_NODE.search(block)
        if not found or found.group(2) not in graph.index:
            continue
        lines = [ln.strip() for ln in block.split("Summary:")[0].splitlines() if ln.strip()]
        detail = lines[-1] if lines else "conversion failed"
        failed[found.group(2)] = f"OpenVINO's ONNX frontend cannot convert it: {detail[:300]}"
    rule = _NO_RULE.search(message)
    if rule:
        kinds = {item.strip().rsplit("-", 1)[0] for item in rule.group(1).split(",")}
        for node in graph.nodes:
            if node.op_type in kinds and node.name not in cut:
                failed[node.name] = (
                    f"OpenVINO's ONNX frontend has no conversion rule for {node.op_type}"
                )
    return {k: v for k, v in failed.items() if k not in cut}


_supports: weakref.WeakKeyDictionary[Any, Support] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def support(graph: Any, tried: bool = True) -> Support:
    """The query of ``graph``, made once. The answer holds only a weak proxy of the graph: a
    value that held the graph itself would keep its weak key, and every graph with its
    weights, alive for good (about 120 MB more per compile of gpt2-kv, 500 MB with every
    backend)."""
    with _lock:
        if graph not in _supports:
            _supports[graph] = Support(weakref.proxy(graph), tried)
        return _supports[graph]


def check(node: NodeView, tried: bool = True) -> str | None:
    """None when OpenVINO's CPU plugin runs the node as onnxruntime would, else why not."""
    return support(node.graph, tried).reason(node)


# -- one node alone ----------------------------------------------------------------------------

_alone: dict[str, str | None] = {}


def ask_alone(node: NodeView, tried: bool = True) -> str | None:
    """OpenVINO's answer for a one-node model of this node (cached by what decides it)."""
    key = _key(node)
    if key not in _alone:
        _alone[key] = _ask(node, tried)
    return _alone[key]


def _key(node: NodeView) -> str:
    digest = hashlib.sha256()
    digest.update(node.op_type.encode())
    for attr in sorted(node.proto.attribute, key=lambda a: a.name):
        digest.update(attr.SerializeToString(deterministic=True))
    imports = sorted((o.domain, o.version) for o in node.graph.model.opset_import)
    digest.update(repr(imports).encode())
    for i, name in enumerate(node.inputs):
        t = node.input_type(i) if name else None
        value = node.const(i) if name else None
        digest.update(f"|{i}:{bool(name)}:{t}:{value is not None}".encode())
        if value is not None and value.size <= _SMALL_CONST:
            digest.update(np.ascontiguousarray(value).tobytes())
    for i, name in enumerate(node.outputs):
        digest.update(f"|o{i}:{bool(name)}".encode())
    return digest.hexdigest()


def _ask(node: NodeView, tried: bool) -> str | None:
    model = single_node_model(node)
    crashed = trial.crash("query", model, {}) if tried else None
    if crashed:
        return f"{NOT_SUPPORTED}: {crashed}"
    try:
        ov_model = convert(model)
    except Exception as exc:
        failures = _conversion_failures(str(exc), single_node_graph(node), set())
        if node.name in failures:
            return failures[node.name]
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return f"OpenVINO's ONNX frontend cannot convert it: {(lines or ['?'])[-1][:300]}"
    try:
        supported = query(ov_model)
    except Exception as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return f"{NOT_SUPPORTED}: {(lines or ['?'])[-1][:300]}"
    misshapen = _misshapen(ov_model, lambda name: _type_of(node, name))
    if misshapen:
        return next(iter(misshapen.values()))
    bad = sorted(
        {
            op.get_type_name()
            for op in ov_model.get_ops()
            if op.get_type_name() not in ("Parameter", "Result", "Constant")
            and op.get_friendly_name() not in supported
        }
    )
    return f"{NOT_SUPPORTED} (its {', '.join(bad)} op(s))" if bad else None


def _type_of(node: NodeView, name: str) -> TensorType | None:
    """The type of one of ``node``'s outputs, by name."""
    return node.output_type(node.outputs.index(name)) if name in node.outputs else None


def _misshapen(ov_model: Any, type_of: Callable[[str], TensorType | None]) -> dict[str, str]:
    """ONNX values to which OpenVINO's conversion gives another static shape than ONNX does:
    value -> why. OpenVINO 2026.4's frontend ignores the ``axes`` attribute of ReduceL1,
    ReduceLogSum and ReduceLogSumExp at opsets 13 to 17 and reduces over every axis (each
    scikit-learn naive Bayes model has a ReduceLogSumExp), and the next op broadcasts it."""
    found = {}
    for op in ov_model.get_ordered_ops():
        for out in op.outputs():
            shape = out.get_partial_shape()
            if op.get_type_name() in ("Parameter", "Result") or not shape.is_static:
                continue
            for name in out.get_names():
                t = type_of(name)
                want = list(t.shape) if t is not None and t.is_static else None
                if want is not None and want != list(shape.to_shape()):
                    found[name] = (
                        f"OpenVINO's ONNX frontend gives '{name}' the shape "
                        f"{list(shape.to_shape())}, ONNX {want} (OpenVINO 2026.4)"
                    )
    return found


class _Names:
    """Enough of a Graph for ``_conversion_failures``: the node's name."""

    def __init__(self, node: NodeView) -> None:
        self.index = {node.name: 0}
        self.nodes = [node.proto]


def single_node_graph(node: NodeView) -> Any:
    return _Names(node)


def single_node_model(node: NodeView) -> onnx.ModelProto:
    """A model of this node alone: its constant inputs as initializers, the others inputs."""
    inputs, inits, seen = [], [], set()
    for i, name in enumerate(node.inputs):
        if not name or name in seen:
            continue
        seen.add(name)
        value = node.const(i)
        if value is not None:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
            continue
        t = node.input_type(i)
        assert t is not None and t.dtype is not None  # dtype_reason refused unknown types
        inputs.append(_info(name, t))
    outputs = []
    for i, name in enumerate(node.outputs):
        t = node.output_type(i)
        if name and t is not None and t.dtype is not None:
            outputs.append(_info(name, t))
        elif name:
            outputs.append(helper.make_empty_tensor_value_info(name))
    graph = helper.make_graph([node.proto], "alone", inputs, outputs, inits)
    source = node.graph.model
    model = helper.make_model(graph, opset_imports=list(source.opset_import))
    model.ir_version = max(source.ir_version, 4)  # its constants are no inputs: not IR 3
    return model


def _info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    shape = None if t.shape is None else [d if isinstance(d, int) else None for d in t.shape]
    assert t.dtype is not None
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), shape)


# -- the op types to offer --------------------------------------------------------------------


@cache
def convertible_op_types() -> frozenset[str]:
    """The default-domain ONNX op types OpenVINO's ONNX frontend has a conversion rule for:
    one model with a node of every type, converted once; the frontend lists those it has no
    rule for."""
    from byoc.graph import SUBGRAPH_OPS

    kinds = sorted(
        {s.name for s in onnx.defs.get_all_schemas() if s.domain == "" and not s.deprecated}
        - SUBGRAPH_OPS
    )
    nodes, inputs = [], []
    for k, kind in enumerate(kinds):
        schema = onnx.defs.get_schema(kind)
        ins = [f"in{k}_{j}" for j in range(schema.min_input)]
        inputs += [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None) for x in ins]
        nodes.append(helper.make_node(kind, ins, [f"out{k}"], name=f"node{k}"))
    outputs = [helper.make_empty_tensor_value_info(f"out{k}") for k in range(len(kinds))]
    graph = helper.make_graph(nodes, "probe", inputs, outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", onnx.defs.onnx_opset_version())]
    )
    try:
        convert(model)
        return frozenset(kinds)
    except Exception as exc:
        rule = _NO_RULE.search(str(exc))
        missing = (
            {item.strip().rsplit("-", 1)[0] for item in rule.group(1).split(",")} if rule else set()
        )
    return frozenset(kinds) - missing


def checks(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{op_type: check}`` for every op type the frontend converts and byoc's conformance
    suite can hold it to (``byoc.testing.ops.OP_CASES``: an op without a case there is never
    checked against onnxruntime, so it is not claimed)."""
    from byoc.testing.ops import OP_CASES

    claimable = (convertible_op_types() - _NEVER) & set(OP_CASES)
    tried = bool(config.get("trial", True))
    return dict.fromkeys(sorted(claimable), partial(check, tried=tried))
