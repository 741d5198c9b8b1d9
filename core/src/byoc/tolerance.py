"""How close an output is to onnxruntime's: the check of ``byoc compare`` and of placement."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class OutputReport:
    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""
    spread: float | None = None  # how far onnxruntime's unoptimized run is, when asked (below)
    quantum: float = 0.0  # the step of a dequantized output's values, when allowed (below)


def compare_arrays(
    name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float
) -> OutputReport:
    """Compare one output the way ORT's EP tests do: |got - want| <= atol + rtol * |want|."""
    got, want = np.asarray(got), np.asarray(want)
    for what, a, b in (("shape", got.shape, want.shape), ("dtype", got.dtype, want.dtype)):
        if a != b:
            return OutputReport(
                name, want.shape, float("inf"), float("inf"), False, f"{what} {a} != {b}"
            )
    if want.dtype.kind not in "fciub" or want.size == 0:
        same = bool(np.array_equal(got, want))
        return OutputReport(name, want.shape, 0.0 if same else float("inf"), 0.0, same)
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, judged below
        diff = np.where(both_nan, 0.0, np.abs(g - w))
    diff = np.where(np.isinf(w) & (g == w), 0.0, diff)
    bound = atol + rtol * np.abs(np.where(both_nan | np.isinf(w), 0.0, w))  # 0 * inf is NaN
    ok = bool(np.all(diff <= bound))
    max_abs = float(np.max(diff))
    max_rel = float(np.max(diff / np.maximum(np.abs(np.where(both_nan, 1.0, w)), 1e-12)))
    return OutputReport(name, want.shape, max_abs, max_rel, ok)


def within_spread(
    name: str,
    got: Any,
    want: Any,
    unoptimized: Any,
    rtol: float,
    atol: float,
    quantum: float = 0.0,
) -> OutputReport:
    """The comparison again, allowing ``got`` twice what onnxruntime's unoptimized output
    (graph optimizations off) differs from its optimized ``want`` by (the spread), and one
    ``quantum`` more. Fused kernels round differently: a quantized model's fused QLinearConv
    lands a value a quantum away from DequantizeLinear, Conv, QuantizeLinear in float32, and
    later layers carry that quantum on. And an output a DequantizeLinear writes holds multiples
    of its scale (the quantum): a sum taken in another order anywhere before it may tip a value
    on a rounding tie into the next step. The report's ``spread`` says how far onnxruntime is
    from itself; passed as the widened check says (an infinite or NaN spread widens nothing)."""
    spread = compare_arrays(name, unoptimized, want, 0.0, 0.0).max_abs
    usable = spread if math.isfinite(spread) else 0.0
    report = compare_arrays(name, got, want, rtol, atol + 2 * usable + quantum)
    report.spread, report.quantum = spread, quantum
    return report


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
