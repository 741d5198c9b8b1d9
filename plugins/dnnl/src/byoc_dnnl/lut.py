"""Lookup tables: elementwise work on one statically quantized tensor, as a table of its 256
values.

A QDQ model computes its activations between int8 layers in float32 on dequantized integers:
YOLOv8's SiLU is DequantizeLinear, Sigmoid, QuantizeLinear, DequantizeLinear, Mul,
QuantizeLinear. Everything such a chain computes is a function of one u8 (or s8) value, so
onnxruntime runs a QDQ Sigmoid as a 256-entry table; here the whole chain is one. ``tables``
finds, per QuantizeLinear's integers, the kernels computed from them alone (elementwise kernels
whose other operands are single constants), evaluates them on all 256 integers in float32 as
oneDNN computes them, and replaces each such kernel read from outside the chain by a ``lut``
kernel: the integers in, the table's entry out (u8 or s8 where it is a QuantizeLinear, else
float32). The kernels only the tables read are then dead.

Before that, ``quantize_first`` moves a QuantizeLinear in front of the slice or concat it reads
(quantizing commutes with moving values): the slice or concat then moves u8 integers, and the
quantizations join the tables (a concat's inputs: requantizations from their scales to its).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from byoc_dnnl.lowering import Kernel, Lowering, readers
from byoc_dnnl.ops import INT_RANGES

Values = dict[str, np.ndarray]
F32 = np.float32


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return F32(1) / (F32(1) + np.exp(-x))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.tolist()], F32)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = F32(math.sqrt(2 / math.pi)) * (x + F32(0.044715) * x * x * x)
    return F32(0.5) * x * (F32(1) + np.tanh(inner))


# oneDNN's eltwise algorithms (ops.ELTWISE_ALGS) as numpy functions of (x, alpha, beta).
ELTWISE: dict[str, Callable[[np.ndarray, Any, Any], np.ndarray]] = {
    "relu": lambda x, a, b: np.where(x > 0, x, a * x),
    "logistic": lambda x, a, b: _sigmoid(x),
    "tanh": lambda x, a, b: np.tanh(x),
    "clip": lambda x, a, b: np.minimum(np.maximum(x, a), b),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "hardswish": lambda x, a, b: x * np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x > 0, x, a * np.expm1(np.minimum(x, 0))),
    "gelu_erf": lambda x, a, b: F32(0.5) * x * (F32(1) + _erf(x / F32(math.sqrt(2)))),
    "swish": lambda x, a, b: x * _sigmoid(a * x),
    "linear": lambda x, a, b: a * x + b,
    "gelu_tanh": lambda x, a, b: _gelu_tanh(x),
    "sqrt": lambda x, a, b: np.sqrt(x),
    "abs": lambda x, a, b: np.abs(x),
    "square": lambda x, a, b: x * x,
    "pow": lambda x, a, b: a * np.power(x, b),
    "round": lambda x, a, b: np.rint(x),
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
}


def tables(low: Lowering, kernels: list[Kernel], outputs: set[str]) -> list[Kernel]:
    """``kernels`` with each chain of elementwise work on one quantized tensor that is read
    from outside the chain replaced by a ``lut`` kernel (see the module docstring). A bare
    DequantizeLinear stays: it fuses into what reads it."""
    origin: dict[str, str] = {}  # a kernel's output -> the quantized tensor it is computed from
    for k in kernels:
        q = _origin(low, k, origin)
        if q is not None:
            origin[k.output] = q
    reading = readers(kernels)
    by_out = {k.output: k for k in kernels}
    order = {id(k): i for i, k in enumerate(kernels)}
    values: dict[str, Values] = {}
    members: set[str] = set()
    renamed: dict[str, str] = {}  # an identity table's output -> its integers
    out = []
    for k in kernels:
        k.rename(renamed)
        q = origin.get(k.output)
        if q is None:
            out.append(k)
            continue
        chain = values.setdefault(q, {q: _integers(low.static[q][2])})
        with np.errstate(all="ignore"):
            chain[k.output] = _evaluate(low, k, chain)
        terminal = k.output in outputs or any(
            origin.get(r.output) != q for r in reading.get(k.output, [])
        )
        table = chain[k.output]
        dst = k.attrs.get("dst", "float32")
        if not terminal or q in k.inputs or (dst != "float32" and not np.all(np.isfinite(table))):
            out.append(k)
            continue
        if dst == low.static[q][2] and np.array_equal(table, chain[q]):
            renamed[k.output] = q  # the same integers (a QuantizeLinear undoing its dequantization)
            continue
        cone = [m for m in _cone(k, q, by_out, order) if m not in members]
        members.update(cone)
        name = low.new_const(f"{k.output}:table", table)
        out.append(Kernel("lut", [q, name], k.output, {"dst": dst}, [], cone, "dnnl.lut"))
    return out


def quantize_first(low: Lowering, kernels: list[Kernel], outputs: set[str]) -> list[Kernel]:
    """``kernels`` with each QuantizeLinear that is the one reader of a slice or a concat of
    computed values moved in front of it: the slice reads a QuantizeLinear of its source, the
    concat one of each of its inputs (new u8 or s8 tensors, of the QuantizeLinear's scale and
    zero point), and writes the QuantizeLinear's integers. YOLOv8's C2f blocks quantize each
    half of a Split, and a Concat of three tensors of other scales, so."""
    reading = readers(kernels)
    by_out = {k.output: k for k in kernels}
    moved: dict[int, Kernel] = {}  # id(slice or concat) -> the QuantizeLinear moved before it
    for k in kernels:
        move = by_out.get(k.inputs[0] or "") if k.kind == "binary" and "dst" in k.attrs else None
        if (
            move is None
            or move.kind not in ("slice", "concat")
            or [id(r) for r in reading.get(move.output, [])] != [id(k)]
            or move.output in outputs
            or any(not n or low.const(n) is not None for n in move.inputs)
            or id(move) in moved
        ):
            continue
        moved[id(move)] = k
    out = []
    for k in kernels:
        q = moved.get(id(k))
        if q is not None:
            inputs = []
            for n in k.inputs:
                assert n is not None
                name = low.fresh_name(f"{n}:quantized")
                low.shapes[name] = low.shape(n)
                low.static[name] = low.static[q.output]
                posts = [dict(p) for p in q.post_ops]
                out.append(Kernel(q.kind, [n, *q.inputs[1:]], name, dict(q.attrs), posts))
                out[-1].members, out[-1].name = list(q.members), q.name
                inputs.append(name)
            k.inputs, k.output = inputs, q.output
            k.members += q.members
        if not any(q is k for q in moved.values()):
            out.append(k)
    return out


def _origin(low: Lowering, k: Kernel, origin: dict[str, str]) -> str | None:
    """The one quantized tensor kernel ``k`` computes its output from, elementwise, or None."""
    if k.kind not in ("eltwise", "binary", "erf"):
        return None
    if k.kind == "eltwise" and k.attrs["alg"] not in ELTWISE:
        return None
    if any(p["kind"] == "sum" or p.get("alg") not in {**ELTWISE, **BINARY} for p in k.post_ops):
        return None
    sources = set()
    for n in k.reads():
        c = low.const(n)
        if c is not None:
            if c.size != 1:
                return None
            continue
        source = origin.get(n, n if n in low.static else None)
        if source is None or low.shape(n) != low.shape(k.output):
            return None
        sources.add(source)
    return sources.pop() if len(sources) == 1 else None


def _integers(dtype: str) -> np.ndarray:
    """The values of a u8 or s8 tensor in the order of a table's entries (s8: -128 first)."""
    lo, hi = INT_RANGES[dtype]
    return np.arange(lo, hi + 1, dtype=F32)


def _evaluate(low: Lowering, k: Kernel, values: Values) -> np.ndarray:
    """Kernel ``k`` on the 256 integers' chain ``values``, in float32 as oneDNN computes it."""

    def value(name: str | None) -> np.ndarray:
        c = low.const(name)
        return values[name or ""] if c is None else F32(c.reshape(-1)[0])

    if k.kind == "eltwise":
        a = k.attrs
        y = ELTWISE[a["alg"]](value(k.inputs[0]), F32(a["alpha"]), F32(a["beta"]))
    elif k.kind == "erf":
        y = _erf(value(k.inputs[0]))
    else:
        y = BINARY[k.attrs["alg"]](value(k.inputs[0]), value(k.inputs[1]))
    for p in k.post_ops:
        if p["kind"] == "eltwise":
            y = ELTWISE[p["alg"]](y, F32(p["alpha"]), F32(p["beta"]))
        else:
            y = BINARY[p["alg"]](y, value(p["input"]))
    y = np.asarray(y, F32)
    if "dst" in k.attrs:  # oneDNN rounds to the nearest integer and saturates
        y = np.clip(np.rint(y), *INT_RANGES[k.attrs["dst"]]).astype(F32)
    return y


def _cone(k: Kernel, q: str, by_out: dict[str, Kernel], order: dict[int, int]) -> list[str]:
    """The members of ``k`` and of the kernels between it and quantized tensor ``q``, in kernel
    ``order``."""
    seen: dict[str, Kernel] = {}
    todo = [k]
    while todo:
        m = todo.pop()
        if m.output in seen:
            continue
        seen[m.output] = m
        todo += [by_out[n] for n in m.reads() if n != q and n in by_out]
    return [x for m in sorted(seen.values(), key=lambda m: order[id(m)]) for x in m.members]
