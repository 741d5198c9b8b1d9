"""Small representative ONNX graphs per op type, and graphs built from pattern tables.

``OP_CASES[op_type]`` says how to build one node of that op: its inputs (graph inputs, or
constants with a fixed value), attributes, number of outputs, opset. ``single_op_model`` makes a
model of one such node; ``pattern_model`` makes a model that a ``byoc.patterns`` pattern matches,
from the cases of the ops it names. ``wiring_model`` puts a case's node where real
models put it (a constant operand, broadcasting operands, one value as two inputs, outputs that
other nodes read). ``special_feeds`` puts NaN, infinities, -0.0 or subnormals into a model's
float inputs, ``integer_case`` and ``edge_feeds`` make a case integer and feed it the dtype's
limits. Used by the conformance suite (``byoc.testing.conformance``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from byoc.patterns import Alt, Const, Named, Op, Pattern, Wildcard
from byoc.testing.build import IR_VERSION

A = (1, 4, 6, 6)  # the activation every case reads: NCHW, small
_RNG = np.random.default_rng(7)


@dataclass(frozen=True)
class In:
    """One input of a case: a graph input of ``shape`` and ``dtype``, or a constant ``value``."""

    shape: tuple[int, ...] = A
    dtype: Any = np.float32
    value: Any = None
    positive: bool = False  # random values in [0.5, 2) instead of standard normal
    span: tuple[float, float] | None = None  # random values in [low, high) instead
    ties: bool = False  # floats rounded to whole numbers: many equal values

    def array(self) -> np.ndarray:
        if self.value is not None:
            return np.asarray(self.value, dtype=self.dtype)
        values = random_array(self.shape, self.dtype, self.positive, self.span)
        return np.round(values) if self.ties else values


@dataclass(frozen=True)
class Case:
    """How to build one representative node of an op type."""

    inputs: tuple[In, ...] = (In(),)
    attrs: dict[str, Any] = field(default_factory=dict)
    outputs: int = 1
    opset: int = 17
    elementwise: bool = False  # constants next to a computed input broadcast against it
    broadcasting: bool = False  # its inputs broadcast against each other (numpy's rules)
    integer_attrs: dict[str, Any] = field(default_factory=dict)  # of its integer_case form
    declared: tuple[In, ...] = ()  # its outputs' types, where onnx's shape inference has none


def random_array(
    shape: tuple[int, ...],
    dtype: Any,
    positive: bool = False,
    span: tuple[float, float] | None = None,
) -> np.ndarray:
    """Seeded random values: floats normal (or in [0.5, 2)), ints in [0, 4), bools; or
    uniform in ``span`` = [low, high)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        if span is not None:
            return _RNG.uniform(*span, shape).astype(dt)
        values = _RNG.uniform(0.5, 2.0, shape) if positive else _RNG.standard_normal(shape)
        return values.astype(dt)
    if dt.kind in "iu":
        low, high = (0, 4) if span is None else (int(span[0]), int(span[1]))
        return _RNG.integers(low, high, shape).astype(dt)
    return _RNG.integers(0, 2, shape).astype(bool)


def _c(value: Any, dtype: Any = np.float32) -> In:
    arr = np.asarray(value, dtype=dtype)
    return In(tuple(arr.shape), dtype, arr)


def _w(*shape: int, positive: bool = False) -> In:
    return _c(random_array(shape, np.float32, positive))


_MORE = np.random.default_rng(8)  # later constants: the draws from _RNG stay what they were


def _k(*shape: int, dtype: Any = np.float32, span: tuple[float, float] = (-1.0, 1.0)) -> In:
    """A constant of random values in ``span``, drawn without touching ``_RNG``."""
    if np.dtype(dtype).kind == "f":
        return _c(_MORE.uniform(*span, shape), dtype)
    return _c(_MORE.integers(int(span[0]), int(span[1]), shape), dtype)


_X, _POS = In(), In(positive=True)
_I64, _U8, _I8 = np.int64, np.uint8, np.int8
_UNIT = In(span=(-0.9, 0.9))  # inside the domain of Asin, Acos, Atanh
_BYTES, _BYTES_3D = In(A, _U8, span=(0, 256)), In((2, 3, 4), _U8, span=(0, 256))
# int8 weights within +-64: an x86 CPU without VNNI adds pairs of uint8 x int8 products in int16,
# and onnxruntime's kernels there saturate beyond (its MatMulInteger 74490 off on a 256-long row)
_INT8_4X5 = _k(4, 5, dtype=_I8, span=(-64, 64))
_INT8_CONV = _k(4, 4, 3, 3, dtype=_I8, span=(-64, 64))
# (scale, zero point) of activations and weights: scales as calibration makes them; round ones
# (0.02, 0.01 -> 0.05) put results exactly on rounding ties, which kernels break either way
_SCALED, _SCALED_W = (_c(0.0213), _c(128, _U8)), (_c(0.0079), _c(0, _I8))
_BIAS = _k(4, dtype=np.int32, span=(-500, 500))
_UNARY = ["Abs", "Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Floor", "Ceil", "Round", "Sin", "Cos"]
_UNARY += ["Erf", "Identity", "Softplus", "Softsign", "HardSwish", "Sign", "Elu", "Selu"]
_UNARY += ["Tan", "Atan", "Sinh", "Cosh", "Asinh", "Celu"]
_BINARY = ["Add", "Sub", "Mul", "Max", "Min", "Sum"]
_COMPARE = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
_REDUCE = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1"]
_REDUCE += ["ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]
_BITWISE = ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]
_ROWS = [[0, 1], [0, 3]]  # GatherND's and ScatterND's indices into A: rows (0, 1) and (0, 3)
# ScatterElements' indices along A's last axis: two distinct columns in each row
_COLUMNS = (np.arange(24).reshape(1, 4, 6, 1) + np.array([0, 3])) % 6

OP_CASES: dict[str, Case] = {
    **{op: Case(elementwise=True) for op in _UNARY},
    "Mish": Case(opset=18),
    "Gelu": Case(opset=20),
    "Sqrt": Case((_POS,)),
    "Log": Case((_POS,)),
    "Reciprocal": Case((_POS,)),
    "LeakyRelu": Case(attrs={"alpha": 0.1}),
    "ThresholdedRelu": Case(attrs={"alpha": 0.5}),
    "HardSigmoid": Case(attrs={"alpha": 0.3, "beta": 0.4}),
    "Clip": Case((_X, _c(-0.5), _c(0.5))),
    **{op: Case((_X, _X), elementwise=True, broadcasting=True) for op in _BINARY},
    "Mean": Case((_X, _X, _X), elementwise=True, broadcasting=True),
    "Div": Case((_X, _POS), elementwise=True, broadcasting=True),
    "Pow": Case((_POS, _c(2.0)), elementwise=True, broadcasting=True),
    "PRelu": Case((_X, _w(4, 1, 1))),
    **{op: Case((_X, _X), broadcasting=True) for op in _COMPARE},
    "Not": Case((In(dtype=bool),)),
    **{
        op: Case((In(dtype=bool), In(dtype=bool)), broadcasting=True) for op in ["And", "Or", "Xor"]
    },
    "Where": Case((In(dtype=bool), _X, _X), broadcasting=True),
    "Cast": Case(attrs={"to": onnx.TensorProto.INT32}),
    "MatMul": Case((In((2, 3, 4)), _w(4, 5))),
    "Gemm": Case((In((3, 4)), _w(5, 4), _w(5)), attrs={"transB": 1}),
    "Conv": Case((_X, _w(4, 4, 3, 3), _w(4)), attrs={"pads": [1, 1, 1, 1]}),
    "ConvTranspose": Case((_X, _w(4, 2, 3, 3), _w(2))),
    "LSTM": Case(  # x [5 steps, batch 1, 6]; W, R, B of both directions, 4 gates of 4 units
        (In((5, 1, 6)), _w(2, 16, 6), _w(2, 16, 4), _w(2, 32)),
        attrs={"hidden_size": 4, "direction": "bidirectional"},
    ),
    "GRU": Case(
        (In((5, 1, 6)), _w(2, 12, 6), _w(2, 12, 4), _w(2, 24)),
        attrs={"hidden_size": 4, "direction": "bidirectional", "linear_before_reset": 1},
    ),
    "MaxPool": Case(attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
    "AveragePool": Case(attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
    "GlobalAveragePool": Case(),
    "GlobalMaxPool": Case(),
    "BatchNormalization": Case((_X, _w(4), _w(4), _w(4), _w(4, positive=True))),
    "InstanceNormalization": Case((_X, _w(4), _w(4))),
    "LayerNormalization": Case((In((2, 3, 8)), _w(8), _w(8))),
    "LRN": Case((In((1, 8, 6, 6)),), attrs={"size": 5, "alpha": 0.02, "bias": 1.5}),
    "Softmax": Case(),
    "LogSoftmax": Case(),
    **{op: Case((_X, _c([2, 3], _I64)), opset=18) for op in _REDUCE},  # dnnl: a global pooling
    "ArgMax": Case(attrs={"axis": 1}),
    "ArgMin": Case(attrs={"axis": 1}),
    "Concat": Case((_X, _X), attrs={"axis": 1}),
    "Split": Case(attrs={"axis": 1, "num_outputs": 2}, outputs=2, opset=18),
    "TopK": Case((_X, _c([3], _I64)), attrs={"axis": -1}, outputs=2),
    "Reshape": Case((_X, _c([1, -1], _I64))),
    "Dropout": Case(),
    "DynamicQuantizeLinear": Case(outputs=3),
    "DequantizeLinear": Case((In(dtype=np.uint8), _c(0.05), _c(3, np.uint8))),
    "QuantizeLinear": Case((_X, _c(0.05), _c(3, np.uint8))),
    "Flatten": Case(attrs={"axis": 1}),
    "Transpose": Case(attrs={"perm": [0, 2, 3, 1]}),
    "Squeeze": Case((In((1, 4, 1, 6)), _c([2], _I64))),
    "Unsqueeze": Case((_X, _c([0], _I64))),
    "Gather": Case((_X, _c([[0, 2], [1, 3]], _I64)), attrs={"axis": 1}),
    "Slice": Case((_X, _c([1], _I64), _c([3], _I64), _c([1], _I64))),
    "Pad": Case((_X, _c([0, 0, 1, 1, 0, 0, 1, 1], _I64))),
    "Resize": Case(
        (_X, _c([]), _c([1, 1, 2, 2])),
        attrs={"mode": "nearest", "coordinate_transformation_mode": "asymmetric"},
    ),
    "Expand": Case((_X, _c([2, 4, 6, 6], _I64))),
    "Tile": Case((_X, _c([1, 1, 2, 1], _I64))),
    "Shape": Case(),
    "DepthToSpace": Case(attrs={"blocksize": 2}),
    "SpaceToDepth": Case(attrs={"blocksize": 2}),
    "IsNaN": Case(),
    "IsInf": Case(),
    **{op: Case((_UNIT,)) for op in ["Asin", "Acos", "Atanh"]},
    "Acosh": Case((In(span=(1.1, 4.0)),)),
    "Shrink": Case(attrs={"lambd": 0.5, "bias": 0.2}),
    "Hardmax": Case(),
    "Mod": Case(  # fmod=1 for floats (C's fmod); integers take Python's % (fmod=0)
        (_X, _c([[[0.7]], [[1.5]], [[2.0]], [[3.1]]])),
        {"fmod": 1},
        elementwise=True,
        integer_attrs={"fmod": 0},
    ),
    "CastLike": Case((_X, _c(0.0, np.float16))),
    "ReduceLogSum": Case((_POS, _c([2, 3], _I64)), opset=18),
    "CumSum": Case((_X, _c(-1, _I64))),
    "Einsum": Case((In((2, 3, 4)), In((2, 4, 5))), attrs={"equation": "bij,bjk->bik"}),
    "GroupNormalization": Case(
        (_X, _k(4, span=(0.5, 2.0)), _k(4)), {"num_groups": 2}, opset=21, declared=(_X,)
    ),
    "LpNormalization": Case(attrs={"axis": 1, "p": 2}),
    "MeanVarianceNormalization": Case(),
    "GlobalLpPool": Case(attrs={"p": 2}),
    "LpPool": Case(attrs={"kernel_shape": [2, 2], "strides": [2, 2], "p": 2}, opset=18),
    "RNN": Case(
        (In((5, 1, 6)), _k(2, 4, 6), _k(2, 4, 4), _k(2, 8)),
        attrs={"hidden_size": 4, "direction": "bidirectional"},
    ),
    "GatherND": Case((_X, _c(_ROWS, _I64))),
    "GatherElements": Case((_X, _k(1, 2, 6, 6, dtype=_I64, span=(0, 4))), {"axis": 1}),
    "ScatterND": Case((_X, _c(_ROWS, _I64), In((2, 6, 6)))),
    "ScatterElements": Case((_X, _c(_COLUMNS, _I64), In((1, 4, 6, 2))), {"axis": 3}),
    "Trilu": Case((_X, _c(1, _I64)), attrs={"upper": 1}),
    "ReverseSequence": Case(
        (In((5, 2, 3)), _c([5, 3], _I64)), attrs={"batch_axis": 1, "time_axis": 0}
    ),
    "GridSample": Case((_X, In((1, 5, 5, 2), span=(-1.0, 1.0))), attrs={"align_corners": 0}),
    "RoiAlign": Case(  # rois (x1, y1, x2, y2) inside A's 6 x 6
        (_X, _c([[0.5, 0.5, 4.0, 4.5], [1.0, 2.0, 5.5, 5.0]]), _c([0, 0], _I64)),
        attrs={"output_height": 2, "output_width": 2, "sampling_ratio": 2},
    ),
    "Range": Case((_c(0, _I64), _c(12, _I64), _c(2, _I64))),
    "ConstantOfShape": Case(
        (_c([1, 4, 6, 6], _I64),),
        attrs={"value": helper.make_tensor("value", onnx.TensorProto.FLOAT, [1], [0.5])},
    ),
    "EyeLike": Case((In((4, 6)),), attrs={"k": 1}),
    "Size": Case(),
    "OneHot": Case((_c([[0, 3, 1], [4, 2, 0]], _I64), _c(5, _I64), In((2,))), {"axis": -1}),
    "BitShift": Case((_BYTES, In(A, _U8)), attrs={"direction": "RIGHT"}, broadcasting=True),
    **{op: Case((_BYTES, _BYTES), opset=18, broadcasting=True) for op in _BITWISE},
    "BitwiseNot": Case((_BYTES,), opset=18),
    # quantized: uint8 activations, int8 weights (zero point 0), int32 (or requantized) results
    "MatMulInteger": Case((_BYTES_3D, _INT8_4X5, _c(131, _U8), _c(0, _I8))),
    "ConvInteger": Case((_BYTES, _INT8_CONV, _c(131, _U8), _c(0, _I8)), {"pads": [1, 1, 1, 1]}),
    "QLinearConv": Case(
        (_BYTES, *_SCALED, _INT8_CONV, *_SCALED_W, _c(0.217), _c(128, _U8), _BIAS),
        attrs={"pads": [1, 1, 1, 1]},
    ),
    "QLinearMatMul": Case((_BYTES_3D, *_SCALED, _INT8_4X5, *_SCALED_W, _c(0.0517), _c(128, _U8))),
}


_TIES = In(span=(-3.0, 3.0), ties=True)
_NO_ROI = _c([])


def _with(op_type: str, **attrs: Any) -> Case:
    """The op's case with these attributes too."""
    case = OP_CASES[op_type]
    return dataclasses.replace(case, attrs={**case.attrs, **attrs})


def _resize(scales: list[float], opset: int = 17, **attrs: Any) -> Case:
    return Case((_X, _NO_ROI, _c([1, 1, *scales])), attrs=attrs, opset=opset)


# Other settings of an op than its case's, where kernels often compute otherwise than
# onnxruntime: interpolation and coordinate modes, ties (TopK, ArgMax), duplicate indices under
# a reduction, pads derived from an output shape. The conformance suite runs each one the
# backend claims; a backend may refuse any of them (OpenVINO 2026.4 computes thirteen of
# them otherwise, among them TopK's ties, antialiased Resize and LSTM's peepholes; dnnl one).
OP_VARIANTS: dict[str, dict[str, Case]] = {
    "Resize": {
        "linear, half_pixel, x2": _resize([2, 2], mode="linear"),
        "linear, align_corners, x0.5": _resize(
            [0.5, 0.5], mode="linear", coordinate_transformation_mode="align_corners"
        ),
        "linear, pytorch_half_pixel, x0.5": _resize(
            [0.5, 0.5], mode="linear", coordinate_transformation_mode="pytorch_half_pixel"
        ),
        "nearest, half_pixel, round_prefer_floor, x1.5": _resize(
            [1.5, 1.5], mode="nearest", coordinate_transformation_mode="half_pixel"
        ),
        "cubic, x2": _resize([2, 2], mode="cubic"),
        "cubic, exclude_outside": _resize([1.5, 0.7], mode="cubic", exclude_outside=1),
        "linear, antialias, x0.5": _resize([0.5, 0.4], 18, mode="linear", antialias=1),
        "cubic, antialias, x0.5": _resize([0.5, 0.4], 18, mode="cubic", antialias=1),
        "linear, sizes of two axes, aspect ratio kept": Case(
            (_X, _NO_ROI, _c([]), _c([9, 7], _I64)),
            attrs={"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"},
            opset=18,
        ),
    },
    "RoiAlign": {
        "max": _with("RoiAlign", mode="max"),
        "output_half_pixel": _with("RoiAlign", coordinate_transformation_mode="output_half_pixel"),
    },
    "TopK": {
        "ties": Case((_TIES, _c([3], _I64)), attrs={"axis": -1}, outputs=2),
        "smallest, ties": Case((_TIES, _c([3], _I64)), attrs={"axis": 1, "largest": 0}, outputs=2),
        "unsorted": Case((_X, _c([3], _I64)), attrs={"axis": -1, "sorted": 0}, outputs=2),
    },
    "ArgMax": {
        "ties": Case((_TIES,), attrs={"axis": 1}),
        "ties, last index": Case((_TIES,), attrs={"axis": 1, "select_last_index": 1}),
    },
    "ArgMin": {"ties": Case((_TIES,), attrs={"axis": -1, "keepdims": 0})},
    "GridSample": {
        "nearest, border, align_corners": _with(
            "GridSample", mode="nearest", padding_mode="border", align_corners=1
        ),
        "bicubic, reflection": _with("GridSample", mode="bicubic", padding_mode="reflection"),
    },
    "ScatterElements": {
        "add, duplicate indices": Case(
            (_X, _k(1, 4, 6, 2, dtype=_I64, span=(0, 2)), In((1, 4, 6, 2))),
            {"axis": 3, "reduction": "add"},
        ),
        "max, duplicate indices": Case(
            (_X, _k(1, 4, 6, 2, dtype=_I64, span=(0, 2)), In((1, 4, 6, 2))),
            {"axis": 3, "reduction": "max"},
            opset=18,
        ),
    },
    "ScatterND": {
        "add, duplicate indices": Case(
            (_X, _c([[0, 1], [0, 1], [0, 3]], _I64), In((3, 6, 6))), {"reduction": "add"}
        ),
    },
    "ConvTranspose": {
        "stride 2, output_padding": _with("ConvTranspose", strides=[2, 2], output_padding=[1, 0]),
        # ONNX ignores pads then: the larger half of the total padding comes first
        "stride 2, output_shape": _with("ConvTranspose", strides=[2, 2], output_shape=[12, 11]),
    },
    "Conv": {
        "stride 2, SAME_LOWER": Case(
            OP_CASES["Conv"].inputs, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}
        ),
        "dilated, uneven pads": _with("Conv", dilations=[2, 1], pads=[2, 0, 1, 1]),
    },
    "LpPool": {"ceil_mode": _with("LpPool", kernel_shape=[3, 3], p=3, ceil_mode=1)},
    "MaxPool": {
        "indices, column-major": dataclasses.replace(_with("MaxPool", storage_order=1), outputs=2),
        "ceil_mode, dilations": Case(
            attrs={"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "dilations": [1, 2]}
        ),
    },
    "AveragePool": {
        "ceil_mode, pads counted": _with(
            "AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1
        ),
        "pads not counted": Case(
            attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 0}
        ),
    },
    "CumSum": {
        "exclusive, reverse": Case((_X, _c(2, _I64)), attrs={"exclusive": 1, "reverse": 1}),
    },
    "Pad": {
        "reflect": Case((_X, _c([0, 0, 2, 1, 0, 0, 1, 3], _I64)), attrs={"mode": "reflect"}),
        "edge": Case((_X, _c([0, 0, 2, 1, 0, 0, 1, 3], _I64)), attrs={"mode": "edge"}),
    },
    "DepthToSpace": {"CRD": Case(attrs={"blocksize": 2, "mode": "CRD"})},
    "LSTM": {
        "input_forget": _with("LSTM", input_forget=1),
        # sequence_lens 3 of 5 steps, initial states, peepholes P (i, o, f of both directions)
        "shorter sequence, initial states, peepholes": Case(
            (*OP_CASES["LSTM"].inputs, _c([3], np.int32), _k(2, 1, 4), _k(2, 1, 4), _k(2, 12)),
            attrs=OP_CASES["LSTM"].attrs,
        ),
    },
    "GRU": {
        "linear_before_reset = 0, shorter sequence": Case(
            (*OP_CASES["GRU"].inputs, _c([3], np.int32)),
            attrs={**OP_CASES["GRU"].attrs, "linear_before_reset": 0},
        ),
    },
    "Einsum": {
        "attention scores": Case(
            (In((1, 2, 3, 4)), In((1, 2, 5, 4))), attrs={"equation": "bhqd,bhkd->bhqk"}
        ),
        "diagonal": Case((In((4, 4)),), attrs={"equation": "ii->i"}),
    },
}


Example = tuple[onnx.ModelProto, dict[str, np.ndarray]]  # a model and inputs to run it on


def single_op_model(op_type: str, case: Case | None = None) -> Example:
    """A model of one ``op_type`` node built from its case, and inputs for it."""
    case = case or OP_CASES[op_type]
    b = _Builder()
    names = [b.leaf(spec) for spec in case.inputs]
    outs = b.add(op_type, names, case)
    return b.model(outs), b.feeds


def pattern_model(pattern: Pattern) -> Example:
    """A model the pattern matches, built from the cases of its ops, and inputs for it.

    Raises ``LookupError`` naming an op type that has no case, or saying why the graph built
    from the cases is not valid ONNX (their types do not meet: an int32 MatMulInteger's product
    times a float scale).
    """
    b = _Builder()
    out = b.value(pattern, In())
    model = b.model([out])
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        onnx.checker.check_model(model)
    except Exception as exc:  # onnx's errors: the cases' types do not fit together
        ops = " -> ".join(n.op_type for n in model.graph.node)
        why = str(exc).strip().splitlines()[0]
        raise LookupError(f"the graph of cases {ops} is not valid ONNX: {why}") from exc
    return model, b.feeds


class _Builder:
    def __init__(self) -> None:
        self.opset = 17
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.bound: dict[str, str] = {}
        self.feeds: dict[str, np.ndarray] = {}
        self.declared: dict[str, onnx.ValueInfoProto] = {}

    def _name(self, prefix: str) -> str:
        return f"{prefix}{len(self.nodes) + len(self.inputs) + len(self.inits)}"

    def leaf(self, spec: In, constant: bool | None = None) -> str:
        """A graph input (random feed recorded) or an initializer for one input spec."""
        if constant if constant is not None else spec.value is not None:
            name = self._name("c")
            self.inits.append(numpy_helper.from_array(spec.array(), name))
            return name
        name = self._name("in")
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(spec.dtype))
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(spec.shape)))
        self.feeds[name] = spec.array()
        return name

    def add(self, op_type: str, inputs: list[str], case: Case, attrs: Any = None) -> list[str]:
        outs = [self._name("out") + f"_{k}" for k in range(case.outputs)]
        self.opset = max(self.opset, case.opset)
        for out, spec in zip(outs, case.declared, strict=False):
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(spec.dtype))
            self.declared[out] = helper.make_tensor_value_info(out, elem, list(spec.shape))
        merged = {**case.attrs, **(attrs or {})}
        self.nodes.append(
            helper.make_node(
                op_type, inputs, outs, name=f"{op_type.lower()}_{len(self.nodes)}", **merged
            )
        )
        return outs

    def value(self, pattern: Pattern, spec: In) -> str:
        if isinstance(pattern, Alt):
            return self.value(pattern.options[0], spec)
        if isinstance(pattern, Wildcard):
            if pattern.name and pattern.name in self.bound:
                return self.bound[pattern.name]
            name = self.leaf(spec, constant=False)  # any computed value; const() is a constant
            if pattern.name:
                self.bound[pattern.name] = name
            return name
        if isinstance(pattern, Named):  # one value for every use of the name
            if pattern.name not in self.bound:
                self.bound[pattern.name] = self.value(pattern.pattern, spec)
            return self.bound[pattern.name]
        if isinstance(pattern, Const) and pattern.value is not None:
            return self.leaf(In((), spec.dtype, pattern.value), constant=True)
        if isinstance(pattern, Const):
            return self.leaf(spec, constant=True)
        assert isinstance(pattern, Op), f"unknown pattern {pattern!r}"
        if pattern.op_types is None:  # a wildcard op: the first case with as many inputs
            n = None if pattern.inputs is None else len(pattern.inputs)
            types = [t for t in sorted(OP_CASES) if n in (None, len(OP_CASES[t].inputs))]
        else:
            types = sorted(pattern.op_types)
        op_type = next((t for t in types if t in OP_CASES), None)
        if op_type is None:
            raise LookupError(f"no case for {' or '.join(types) or 'this wildcard op'}")
        case = OP_CASES[op_type]
        subs = pattern.inputs
        if subs is None:
            names = [self.leaf(s) for s in case.inputs]
        else:
            specs = list(case.inputs) + [In()] * (len(subs) - len(case.inputs))
            order = sorted(range(len(subs)), key=lambda i: not _computed(subs[i]))
            names = [""] * len(subs)
            for i in order:  # computed inputs first: constants then fit their shapes
                spec = specs[i]
                computed = [n for n in names if n]
                if case.elementwise and computed and not _computed(subs[i]):
                    spec = self._broadcast(computed[0], subs[i])
                if op_type == "MatMul" and i == 1 and _computed(subs[0]):  # fits the product
                    spec = In((self.shape_of(names[0])[-1], 4))
                names[i] = self.value(subs[i], spec)
        return self.add(op_type, names, case, pattern.attrs)[0]

    def _broadcast(self, value: str, pattern: Pattern) -> In:
        pattern = pattern.pattern if isinstance(pattern, Named) else pattern
        shape = self.shape_of(value)
        if isinstance(pattern, Const) and pattern.value is not None:
            return In(())
        if isinstance(pattern, Const) and len(shape) == 4:
            return In((1, shape[1], 1, 1))
        if isinstance(pattern, Const) and shape:
            return In((shape[-1],))
        return In(tuple(shape))

    def shape_of(self, value: str) -> tuple[int, ...]:
        inferred = onnx.shape_inference.infer_shapes(self.model([value]), strict_mode=False)
        for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]:
            if v.name == value:
                return tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        return A

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "case",
            self.inputs,
            [self.declared.get(o) or helper.make_empty_tensor_value_info(o) for o in outputs],
            initializer=self.inits,
            value_info=[v for name, v in self.declared.items() if name not in outputs],
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=IR_VERSION
        )
        inferred = onnx.shape_inference.infer_shapes(model)
        known = {v.name: v for v in inferred.graph.value_info}
        for out in model.graph.output:
            if out.name in known:
                out.CopyFrom(known[out.name])
        return model


def _computed(pattern: Pattern) -> bool:
    """The pattern stands for a node's output (built before the constants that fit it)."""
    if isinstance(pattern, Named):
        return _computed(pattern.pattern)
    return isinstance(pattern, Op | Alt)


# -- wirings: a node where real models put it ---------------------------------------------------

# dtype kind -> unary ops, in the order tried, that read a node's output of that kind
FOLLOWERS: dict[str, tuple[str, ...]] = {
    "f": ("Relu", "Abs", "Neg", "Identity", "Tanh", "Sigmoid"),
    "i": ("Abs", "Neg", "Identity"),
    "u": ("Identity",),
    "b": ("Not", "Identity"),
}
_BROADCAST_CONSTANT = (4, 1, 1)  # one value per channel of A
_BROADCAST_INPUTS = ((1, 4, 1, 6), (1, 1, 6, 1), (6,))  # none of them A; together they make A


def wirings(op_type: str, claimed: Collection[str]) -> list[str]:
    """The ways ``wiring_model`` wires ``op_type``'s case that apply to it, for a backend that
    claims the op types ``claimed``. Each is a node of the case with:

    - ``input K constant``: its input K an initializer (in a partition, a constant the
      partition binds inside, not one of ``partition.inputs``), for each computed input of a
      node with two or more;
    - ``broadcast constant``: its last computed input a [4, 1, 1] constant (broadcasting ops);
    - ``broadcast inputs``: its computed inputs of shapes [1, 4, 1, 6], [1, 1, 6, 1] and [6]
      (broadcasting ops);
    - ``repeated input``: one value as each of its computed inputs of one shape and type,
      ``Add(x, x)``;
    - ``outputs read inside the partition``: each output read by a claimed unary op
      (``FOLLOWERS``) and a model output too, the node's outputs listed last to first;
    - ``one output used``: of its several outputs, only the last one read.
    """
    case = OP_CASES[op_type]
    computed = [s for s in case.inputs if s.value is None]
    found = []
    if len(computed) >= 2:
        found += [f"input {i} constant" for i, s in enumerate(case.inputs) if s.value is None]
        if case.broadcasting:
            found += ["broadcast constant", "broadcast inputs"]
        kinds = [(s.shape, np.dtype(s.dtype)) for s in computed]
        if len(set(kinds)) < len(kinds):
            found.append("repeated input")
    if any(_follower(kind, claimed) for kind in _output_kinds(op_type)):
        found.append("outputs read inside the partition")
    if case.outputs > 1:
        found.append("one output used")
    return found


def wiring_model(
    op_type: str, claimed: Collection[str], only: str | None = None
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, str]]:
    """A model holding ``op_type``'s case in every wiring of ``wirings`` (or in ``only``), inputs
    for it, and the wiring of each of its ``op_type`` nodes, by node name."""
    case = OP_CASES[op_type]
    b = _Builder()
    outputs: list[str] = []
    nodes: dict[str, str] = {}
    for wiring in [only] if only else wirings(op_type, claimed):
        computed = [i for i, s in enumerate(case.inputs) if s.value is None]
        specs = list(case.inputs)
        kinds = [(s.shape, np.dtype(s.dtype)) for s in specs]
        shared: dict[Any, str] = {}
        names: list[str] = []
        for i, spec in enumerate(specs):
            if wiring == f"input {i} constant":
                names.append(b.leaf(spec, constant=True))
            elif wiring == "broadcast constant" and i == computed[-1]:
                names.append(b.leaf(_like(spec, _BROADCAST_CONSTANT), constant=True))
            elif wiring == "broadcast inputs" and i in computed:
                names.append(b.leaf(_like(spec, _BROADCAST_INPUTS[computed.index(i)])))
            elif wiring == "repeated input" and i in computed:
                if kinds[i] not in shared:  # positive values if any of the sharers needs them
                    positive = any(specs[j].positive for j in computed if kinds[j] == kinds[i])
                    shared[kinds[i]] = b.leaf(_like(spec, spec.shape, positive))
                names.append(shared[kinds[i]])
            else:
                names.append(b.leaf(spec))
        outs = b.add(op_type, names, case)
        nodes[b.nodes[-1].name] = wiring
        if wiring == "outputs read inside the partition":
            for out, kind in zip(outs, _output_kinds(op_type), strict=True):
                follower = _follower(kind, claimed)
                if follower:
                    outputs += b.add(follower, [out], Case())
            outputs += outs[::-1]
        elif wiring == "one output used":
            outputs.append(outs[-1])
        else:
            outputs += outs
    return b.model(outputs), b.feeds, nodes


def _like(spec: In, shape: tuple[int, ...], positive: bool | None = None) -> In:
    """``spec`` (a computed input) with another shape, random values of its kind."""
    positive = spec.positive if positive is None else positive
    return dataclasses.replace(spec, shape=shape, value=None, positive=positive)


@functools.cache
def _output_kinds(op_type: str) -> tuple[str | None, ...]:
    """The dtype kind ("f", "i", "u", "b") of each output of ``op_type``'s case, None where
    shape inference does not know it."""
    model, _ = single_op_model(op_type)
    elems = [out.type.tensor_type.elem_type for out in model.graph.output]
    return tuple(np.dtype(helper.tensor_dtype_to_np_dtype(e)).kind if e else None for e in elems)


def _follower(kind: str | None, claimed: Collection[str]) -> str | None:
    return next((op for op in FOLLOWERS.get(kind or "", ()) if op in claimed), None)


# -- special values -----------------------------------------------------------------------------

SPECIAL_VALUES: dict[str, tuple[float, ...]] = {
    "NaN": (float("nan"),),
    "+inf": (float("inf"),),
    "-inf": (float("-inf"),),
    "-0.0": (-0.0,),
    "subnormal": (1e-40, -1e-40),  # float32's smallest normal is 1.18e-38
}
INTEGER_DTYPES = ("int32", "int64")
DIVISORS = {"Div": 1, "Mod": 1}  # op type -> its input onnxruntime refuses to hold an integer 0


def special_feeds(feeds: dict[str, np.ndarray], value: str) -> dict[str, np.ndarray]:
    """``feeds`` with ``SPECIAL_VALUES[value]`` written into every float input: input k at the
    flat positions whose bit k is 0, so that two inputs meet as (special, special),
    (special, x), (x, special) and (x, x)."""
    specials = SPECIAL_VALUES[value]
    out = dict(feeds)
    floats = [name for name, v in feeds.items() if v.dtype.kind == "f"]
    for k, name in enumerate(floats):
        flat = feeds[name].copy().reshape(-1)
        at = np.flatnonzero((np.arange(flat.size) >> k) & 1 == 0)
        flat[at] = np.resize(np.asarray(specials, flat.dtype), at.size)
        out[name] = flat.reshape(feeds[name].shape)
    return out


def integer_edges(dtype: Any) -> np.ndarray:
    """The values integer kernels get wrong, for a signed ``dtype``: its limits, their
    neighbours, -1, 0, 1."""
    info = np.iinfo(dtype)
    return np.array([info.min, info.max, -1, 0, 1, info.min + 1, info.max - 1, 2, -3], dtype)


def integer_case(op_type: str, dtype: Any) -> Case | None:
    """``OP_CASES[op_type]`` with its float inputs made ``dtype`` (float constants rounded away
    from zero, so -0.5 and 0.5 stay apart), or None when ONNX does not define that node."""
    case = OP_CASES[op_type]
    dt = np.dtype(dtype)

    def convert(spec: In) -> In:
        if np.dtype(spec.dtype).kind != "f":
            return spec
        if spec.value is None:
            return In(spec.shape, dt)
        value = np.asarray(spec.value, np.float64)
        return In(spec.shape, dt, (np.sign(value) * np.ceil(np.abs(value))).astype(dt))

    inputs = tuple(convert(s) for s in case.inputs)
    if all(new is old for new, old in zip(inputs, case.inputs, strict=True)):
        return None  # no float input to make integer
    ints = Case(inputs, {**case.attrs, **case.integer_attrs}, case.outputs, case.opset)
    try:
        onnx.checker.check_model(single_op_model(op_type, ints)[0], full_check=True)
    except Exception:  # onnx.checker's errors: the schema has no such types
        return None
    return ints


def edge_feeds(feeds: dict[str, np.ndarray], divisor: str | None = None) -> dict[str, np.ndarray]:
    """``feeds`` with ``integer_edges`` in every integer input: input k holds the edge
    ``(position // n**k) % n`` of the n edges, so two inputs meet in every pair. The input
    named ``divisor`` holds 1 for 0 and -1 (onnxruntime fails on x / 0, and dies of SIGFPE on
    the int64 minimum / -1)."""
    out = dict(feeds)
    names = [name for name, v in feeds.items() if v.dtype.kind in "iu"]
    for k, name in enumerate(names):
        edges = integer_edges(feeds[name].dtype)
        if name == divisor:
            edges = np.where((edges == 0) | (edges == -1), 1, edges).astype(edges.dtype)
        positions = np.arange(feeds[name].size)
        out[name] = edges[(positions // len(edges) ** k) % len(edges)].reshape(feeds[name].shape)
    return out
