"""Special values and integer edges: NaN, infinities, -0.0 and subnormals in a model's float
inputs (``special_feeds``), a case made integer (``integer_case``) and fed its dtype's limits
(``edge_feeds``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from byoc.testing.ops.cases import OP_CASES, Case, In
from byoc.testing.ops.graphs import single_op_model

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
