"""The cases: how to build one representative node of each op type (``OP_CASES``) and the
other settings of an op where kernels often compute otherwise than onnxruntime
(``OP_VARIANTS``).

A case says its inputs (graph inputs, or constants with a fixed value), attributes, number of
outputs, opset. Random values come from seeded generators.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

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
