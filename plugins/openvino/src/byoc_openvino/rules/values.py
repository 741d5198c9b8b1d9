"""Values OpenVINO's CPU plugin holds otherwise than onnxruntime: indices it does not check,
8-bit integers it saturates, divisors it inverts, dtypes it narrows or does not take, shapes
it needs static, empty tensors, and integers past 2**24 (``widths``)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np
from byoc import NodeView, TensorType
from byoc.graph import MOVES

from byoc_openvino.artifact import DTYPES
from byoc_openvino.handles import DEVICE
from byoc_openvino.rules.base import Rule
from byoc_openvino.rules.widths import GROWING_OPS, INT8_PRODUCTS, Widths, wide

# Ops that index their data with input 1: onnxruntime fails on an index out of range, OpenVINO
# gives zeros (Gather-8) or writes elsewhere.
_INDEXING = frozenset({"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"})
# Ops whose integer result may leave its type: ONNX (onnxruntime) wraps it around, OpenVINO's
# CPU plugin saturates an 8-bit one.
_OVERFLOWING = GROWING_OPS | {"Add", "Sub", "Neg", "Abs", "Div", "Mean", "ReduceMean"}
# OpenVINO's CPU plugin divides floats as x * (1 / y): wrong where 1 / y overflows, for the
# smallest subnormal divisors (|y| < 1 / FLT_MAX; 1e-40 / 1e-40 is inf, fmod(1.5, 1e-40) is
# -inf). A float Div or Mod is claimed when its divisor cannot be one of those.
_TINY = 1 / float(np.finfo(np.float32).max)
_NON_NEGATIVE = frozenset(
    {"Abs", "Relu", "Exp", "Sigmoid", "Softplus", "Sqrt", "ReduceSumSquare", "ReduceL2"}
)  # fmt: skip
# Inputs an empty constant stands for as "not given" (ONNX's convention before optional inputs
# could be left out): Resize's roi and scales. Exporters write them, and OpenVINO reads them as
# absent: its results there match onnxruntime's.
_OPTIONAL_EMPTY = {"Resize": (1, 2)}


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


def _unchecked_indices(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """Indices computed from a model input. A Gather reading the model's input itself (maybe
    reshaped) is claimed: its range is checked before each run (``runtime.index_bounds``)."""
    if len(node.inputs) < 2:
        return None
    indices = node.inputs[1]
    if indices not in widths.derived:
        return None
    if node.op_type == "Gather" and moved_from(node.graph, indices, node.graph.inputs):
        return None
    return {"indices": indices}


def _saturated(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """An 8-bit integer result that may overflow: int8 -60 * 3 is 76 in ONNX (it wraps), -128
    in OpenVINO's CPU plugin, and uint8 0 - 3 is 253, not 0."""
    t = node.output_type(0)
    if t is None or t.dtype is None or t.dtype.name not in ("int8", "uint8"):
        return None
    return {"dtype": t.dtype}


def _divisor_with_zeros(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """An integer division whose divisor may hold 0: onnxruntime fails, OpenVINO returns a
    value."""
    divisor = node.input_type(1)
    if divisor is None or divisor.dtype is None or divisor.dtype.kind not in "iu":
        return None
    value = node.graph.constant(node.inputs[1])
    if value is not None and np.all(value):
        return None
    return {"divisor": node.inputs[1]}


def _tiny_divisor(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """A float divisor not known to stay outside 0 < |y| < 1 / FLT_MAX."""
    divisor = node.input_type(1)
    if divisor is None or divisor.dtype is None or divisor.dtype.kind != "f":
        return None
    return None if _safe_divisor(node.graph, node.inputs[1]) else {"divisor": node.inputs[1]}


def _safe_divisor(graph: Any, name: str) -> bool:
    """The value is never a nonzero float of magnitude below 1 / FLT_MAX: a constant, a square
    root (the root of a subnormal is a normal number), a cast integer, a clamp or max with a
    positive constant, or ``var + eps`` of a non-negative value."""
    value = graph.constant(name)
    if value is not None:
        magnitude = np.abs(value.astype(np.float64))
        return bool(np.all((magnitude == 0) | (magnitude >= _TINY)))
    if name not in graph.producer:
        return False
    node = graph.view(graph.producer[name])
    source = node.input_type(0)
    if node.op_type == "Sqrt":
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


def _values(node: NodeView) -> list[tuple[str, TensorType | None]]:
    """The values the node reads, then those it makes: name and type."""
    values = [(n, node.input_type(i)) for i, n in enumerate(node.inputs) if n]
    return values + [(n, node.output_type(i)) for i, n in enumerate(node.outputs) if n]


def _absent(node: NodeView, name: str) -> bool:
    """Whether ``name`` is an empty constant in one of the node's "not given" positions."""
    places = _OPTIONAL_EMPTY.get(node.op_type, ())
    return any(node.inputs[i] == name for i in places if i < len(node.inputs)) and (
        node.graph.constant(name) is not None
    )


# Each value a node reads or makes, in order, against these, in order: the first that holds
# is the node's reason. A value of known type meets the next ones.
_VALUE_RULES: tuple[tuple[Callable[[NodeView, str, Any], Any], str], ...] = (
    (lambda node, name, t: t is None or t.dtype is None, "the type of '{name}' is unknown"),
    (
        lambda node, name, t: t.dtype.name == "float64",
        "'{name}' is float64, which OpenVINO's {device} plugin computes in float32",
    ),
    (
        lambda node, name, t: t.dtype.name not in DTYPES,
        "'{name}' is {t.dtype}, which the backend does not hand to OpenVINO",
    ),
    (
        lambda node, name, t: not t.is_static,
        "'{name}' has a non-static shape {t}; fix the model's input shapes in the config's "
        "[shapes] table",
    ),
    (
        lambda node, name, t: 0 in (t.shape or ()) and not _absent(node, name),
        "'{name}' is empty ({t}): OpenVINO's {device} plugin computes other values of a graph "
        "holding an empty tensor wrongly (OpenVINO 2026.4)",
    ),
)


def _unfit_value(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """The first value of the node that one of ``_VALUE_RULES`` refuses, and why."""
    for name, t in _values(node):
        for test, reason in _VALUE_RULES:
            if test(node, name, t):
                return {"why": reason.format(name=name, t=t, device=DEVICE)}
    return None


def _inexact_int8_product(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """MatMulInteger and ConvInteger are exact in OpenVINO's int8 kernels, with int8 weights of
    zero point 0 (``Widths.exact``); with others their int32 goes through float32."""
    return None if node.outputs[0] in widths.exact else {"weights": node.inputs[1]}


def _large_integer(node: NodeView, widths: Widths) -> dict[str, Any] | None:
    """A 32- or 64-bit integer value not known to stay below 2**24 (``Widths``). A constant
    Slice bound is not computed on: "to the end" (INT64_MAX, INT64_MIN backwards) is clamped
    to the dim, and OpenVINO clamps it the same after saturating it to int32 (every exporter
    writes it: Llama's rotary half-swap split the decoder into five units)."""
    for name, t in _values(node):
        if not wide(t) or widths.value_fits(name) or widths.exact_use(node, name):
            continue
        if not _slice_bound(node, name):
            return {"name": name, "dtype": t.dtype}  # type: ignore[union-attr]
    return None


def _slice_bound(node: NodeView, name: str) -> bool:
    """``name`` is a constant that ``node`` reads only as a Slice's starts or ends."""
    if node.op_type != "Slice" or node.graph.constant(name) is None:
        return False
    places = {i for i, n in enumerate(node.inputs) if n == name}
    return bool(places) and places <= {1, 2}


RULES = (
    Rule(
        _INDEXING,
        _unchecked_indices,
        "its indices '{indices}' are computed from a model input and may fall outside the "
        "data, where onnxruntime fails and OpenVINO's {device} plugin gives zeros",
    ),
    Rule(
        _OVERFLOWING,
        _saturated,
        "{node.op_type} of {dtype} wraps around on overflow in ONNX; OpenVINO's {device} "
        "plugin saturates it (int8 -60 * 3: 76 against -128)",
    ),
    Rule(
        {"Div"},
        _divisor_with_zeros,
        "onnxruntime fails on an integer division by zero, OpenVINO's {device} plugin returns "
        "a value; the divisor '{divisor}' is not a constant without zeros",
    ),
    Rule(
        {"Div", "Mod"},
        _tiny_divisor,
        "OpenVINO's {device} plugin divides ({node.op_type}) as x * (1 / y), which is inf "
        "where 0 < |y| < 1 / FLT_MAX; the divisor '{divisor}' is not known to stay outside "
        "that range (a square root, a cast integer, a clamp or a constant)",
    ),
    Rule(None, _unfit_value, "{why}"),
    Rule(
        INT8_PRODUCTS,
        _inexact_int8_product,
        "OpenVINO's {device} plugin computes {node.op_type} exactly only with int8 weights of "
        "zero point 0; with these ('{weights}') it goes through float32, wrong above 2**24",
    ),
    Rule(
        None,
        _large_integer,
        "'{name}' is {dtype}, which OpenVINO's {device} plugin computes in int32 or float32, "
        "and its values are not known to stay below 2**24 (a model input, or computed from "
        "one)",
    ),
)
