"""How close an output is to onnxruntime's: the check of ``byoc compare`` and of placement."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

_NARROW = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
# the relative size of one unit in the last place: an rtol below it asks for equal bits
_RESOLUTION = {"float16": 2.0**-10, "bfloat16": 2.0**-7}


@dataclass
class OutputReport:
    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""
    spread: float | None = None  # how far onnxruntime's own other runs are, when asked (below)
    quantum: float = 0.0  # the step of a dequantized output's values, when allowed (below)
    resolution: float = 0.0  # the rtol a float16 or bfloat16 output is compared with at least


def compare_arrays(name: str, got: Any, want: Any, rtol: float, atol: float) -> OutputReport:
    """Compare one output the way ORT's EP tests do: |got - want| <= atol + rtol * |want|; a
    float16 or bfloat16 output with rtol at least its own resolution (``_RESOLUTION``), as
    onnxruntime's tests take float16's: one rounding more of the output is not a difference.
    A sequence (a list) or a map (a dict: ZipMap's) is compared item by item (``_items``)."""
    if isinstance(want, list | dict):
        return _items(name, got, want, rtol, atol)
    got, want = np.asarray(got), np.asarray(want)
    for what, a, b in (("shape", got.shape, want.shape), ("dtype", got.dtype, want.dtype)):
        if a != b:
            return OutputReport(
                name, want.shape, float("inf"), float("inf"), False, f"{what} {a} != {b}"
            )
    if want.dtype.kind not in "fciub" or want.size == 0:
        same = bool(np.array_equal(got, want))
        return OutputReport(name, want.shape, 0.0 if same else float("inf"), 0.0, same)
    resolution = _RESOLUTION.get(want.dtype.name, 0.0)
    rtol = max(rtol, resolution)
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, judged below
        diff = np.where(both_nan, 0.0, np.abs(g - w))
    diff = np.where(np.isinf(w) & (g == w), 0.0, diff)
    bound = atol + rtol * np.abs(np.where(both_nan | np.isinf(w), 0.0, w))  # 0 * inf is NaN
    ok = bool(np.all(diff <= bound))
    max_abs = float(np.max(diff))
    max_rel = float(np.max(diff / np.maximum(np.abs(np.where(both_nan, 1.0, w)), 1e-12)))
    return OutputReport(name, want.shape, max_abs, max_rel, ok, resolution=resolution)


def _items(
    name: str, got: Any, want: list[Any] | dict[Any, Any], rtol: float, atol: float
) -> OutputReport:
    """A sequence or map output: the same length (keys), and each item within tolerance; its
    report has the items' largest errors, and the shape (number of items,)."""
    if isinstance(want, dict):
        same = isinstance(got, dict) and got.keys() == want.keys()
        pairs = [(got[k], want[k]) for k in want] if same else []
        why = "" if same else "keys differ"
    else:
        same = isinstance(got, list) and len(got) == len(want)
        pairs = list(zip(got, want, strict=True)) if same else []
        why = "" if same else f"{len(got) if isinstance(got, list) else 'no'} items != {len(want)}"
    if not same:
        return OutputReport(name, (len(want),), math.inf, math.inf, False, why)
    reports = [compare_arrays(name, g, w, rtol, atol) for g, w in pairs]
    return OutputReport(
        name,
        (len(want),),
        max((r.max_abs for r in reports), default=0.0),
        max((r.max_rel for r in reports), default=0.0),
        all(r.passed for r in reports),
        next((f"item {i}: {r.note}" for i, r in enumerate(reports) if r.note), ""),
        resolution=max((r.resolution for r in reports), default=0.0),
    )


def within_spread(
    name: str,
    got: Any,
    want: Any,
    references: Sequence[Any],
    rtol: float,
    atol: float,
    quantum: float = 0.0,
) -> OutputReport:
    """The comparison again, allowing ``got`` twice what onnxruntime's ``want`` differs from
    its own other runs of the model (the spread): ``references``, the same output with its
    graph optimizations off and, for a float16 or bfloat16 model, computed in float32
    (``float32_outputs``); and one ``quantum`` more. Fused kernels round differently: a
    quantized model's fused QLinearConv lands a value a quantum away from DequantizeLinear,
    Conv, QuantizeLinear in float32, and later layers carry that quantum on. A float16 model
    rounds every value onnxruntime writes to float16, where a backend may keep float32 between
    its ops. And an output a DequantizeLinear writes holds multiples of its scale (the
    quantum): a sum taken in another order anywhere before it may tip a value on a rounding
    tie into the next step. The report's ``spread`` says how far onnxruntime is from itself;
    passed as the widened check says (an infinite or NaN spread widens nothing)."""
    spread = max((_distance(r, want) for r in references), default=0.0)
    usable = spread if math.isfinite(spread) else 0.0
    report = compare_arrays(name, got, want, rtol, atol + 2 * usable + quantum)
    report.spread, report.quantum = spread, quantum
    return report


def _distance(reference: Any, want: Any) -> float:
    """The largest difference between two runs' output; a float32 run of a float16 one's
    counts in float64."""
    arrays = isinstance(reference, np.ndarray) and isinstance(want, np.ndarray)
    if arrays and reference.dtype != want.dtype and reference.dtype.kind == want.dtype.kind == "f":
        reference, want = reference.astype(np.float64), want.astype(np.float64)
    return compare_arrays("", reference, want, 0.0, 0.0).max_abs


def float32_outputs(
    model: onnx.ModelProto, feeds: Mapping[str, Any], names: Sequence[str], rounded: bool
) -> list[Any] | None:
    """Outputs ``names`` of ``model`` from onnxruntime with every float16 and bfloat16 value
    (inputs, initializers, constants, Cast targets, subgraphs) made float32: how far the
    model's own rounding takes it from float32. ``rounded``: each such value a node of the
    main graph writes is rounded to its type after all, as ONNX has it (onnxruntime skips
    some of those roundings: it runs a float16 op between float32 ones in float32). None when
    the model has no such value, or onnxruntime cannot run it so."""
    if not _holds_narrow(model.graph):  # no copy of a float32 model
        return None
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    narrow = {v.name for v in model.graph.input if v.type.tensor_type.elem_type in _NARROW}
    _widen(twin.graph)
    wide = {k: np.asarray(v, np.float32) if k in narrow else v for k, v in feeds.items()}
    options = ort.SessionOptions()  # keeps the rounding Casts
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        if rounded:
            _round_written(model, twin.graph)
        session = ort.InferenceSession(
            twin.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        return list(session.run(list(names), wide))
    except Exception:  # an op without a float32 kernel, say: no such spread
        return None


def _round_written(model: onnx.ModelProto, graph: onnx.GraphProto) -> None:
    """Round each value a node of widened ``graph`` writes to the float16 or bfloat16 it has
    in ``model`` (types by ONNX's shape inference; an untyped value stays float32)."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.value_info, *inferred.output)}
    nodes = []
    for node in graph.node:
        nodes.append(node)
        for i, name in enumerate(node.output):
            if types.get(name) in _NARROW:
                node.output[i] = f"{name}/float32"
                nodes.append(
                    onnx.helper.make_node(
                        "Cast", [node.output[i]], [f"{name}/narrow"], to=types[name]
                    )
                )
                nodes.append(
                    onnx.helper.make_node(
                        "Cast", [f"{name}/narrow"], [name], to=onnx.TensorProto.FLOAT
                    )
                )
    del graph.node[:]
    graph.node.extend(nodes)


def _holds_narrow(graph: onnx.GraphProto) -> bool:
    """Whether a value ``graph`` declares or a constant it holds is float16 or bfloat16, or
    one of its nodes casts to one (a subgraph's own are not looked for)."""
    values = (*graph.input, *graph.output, *graph.value_info)
    return (
        any(v.type.tensor_type.elem_type in _NARROW for v in values)
        or any(t.data_type in _NARROW for t in graph.initializer)
        or any(a.name == "to" and a.i in _NARROW for n in graph.node for a in n.attribute)
    )


def _widen(graph: onnx.GraphProto) -> None:
    """Make ``graph``'s float16 and bfloat16 values float32, in place, subgraphs too."""
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.tensor_type.elem_type in _NARROW:
            value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    tensors = list(graph.initializer)
    for node in graph.node:
        for a in node.attribute:
            tensors += [a.t] if a.type == onnx.AttributeProto.TENSOR else []
            if a.type == onnx.AttributeProto.INT and a.name in ("to", "dtype") and a.i in _NARROW:
                a.i = onnx.TensorProto.FLOAT
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                _widen(sub)
    for t in tensors:
        if t.data_type in _NARROW:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))


def precision_error(got: list[Any], want: list[Any]) -> float:
    """How far reduced-precision outputs are from fp32 ones: per output, the largest
    difference over the largest magnitude of the fp32 output; infinite when shapes, integer
    values, or where NaN and infinities stand differ."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return math.inf
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return math.inf
            continue
        finite = np.isfinite(w)
        if not np.array_equal(np.isfinite(g), finite) or not np.array_equal(
            np.isnan(g), np.isnan(w)
        ):
            return math.inf
        if finite.any():
            scale = max(float(np.max(np.abs(w[finite]))), float(np.finfo(np.float32).tiny))
            diff = np.abs(g[finite].astype(np.float64) - w[finite].astype(np.float64))
            worst = max(worst, float(np.max(diff)) / scale)
    return worst
