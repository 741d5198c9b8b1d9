"""Normalization kinds: ``softmax``, ``safe_softmax`` (a softmax whose NaN become 0, as
PyTorch's exporters guard attention's), ``layernorm`` (LayerNormalization, and as exporters
before opset 17 spell it in basic ops; also InstanceNormalization and GroupNormalization, each
group's values a row of it), ``batchnorm`` (standalone; after a convolution the
fusion pass folds it into the weights) and ``lrn``. RMSNorm as exporters spell it
(``dnnl.rmsnorm``) is kernels of other families: an eltwise, a matmul and a binary."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView
from byoc.patterns import Match, Pattern, const, op, wildcard
from byoc.plan import Composite as Found

from byoc_dnnl.annotate import constant, in_qdq_group, rank_of, static_f32
from byoc_dnnl.kinds.base import (
    Call,
    Composite,
    Family,
    Kind,
    Op,
    accept,
    f32,
    integer,
    ints,
    number,
)
from byoc_dnnl.kinds.pool import reduce_axes
from byoc_dnnl.lowering import Lowering


def _batchnorm(node: NodeView) -> str | None:
    if node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        return "only inference-mode BatchNormalization (one output) is supported"
    consts = [node.const(i) for i in range(1, 5)]
    if any(c is None for c in consts):
        return "scale, bias, mean and var must be constants"
    if any(c.ndim != 1 for c in consts if c is not None):  # opset 7-8's spatial = 0
        return "scale, bias, mean and var must be per channel (1-D), not per activation"
    if rank_of(node) < 2:
        return "BatchNormalization needs rank >= 2"
    return None


def _layernorm_rank(rank: int) -> str | None:
    return None if 2 <= rank <= 5 else "oneDNN's layer normalization needs rank 2 to 5"


def _layernorm(node: NodeView) -> str | None:
    rank = rank_of(node)
    if reason := _layernorm_rank(rank):
        return reason
    axis = node.attrs.get("axis", -1)
    if axis not in (-1, rank - 1):
        return f"LayerNormalization over axis {axis} is not supported (only the last axis)"
    if len([o for o in node.outputs if o]) > 1:
        return "LayerNormalization with Mean/InvStdDev outputs is not supported"
    for i in (1, 2):
        if i < len(node.inputs) and node.inputs[i] and constant(node, i) is None:
            return "scale and bias must be constants"
    return None


def _groupnorm(node: NodeView) -> str | None:
    """InstanceNormalization, or GroupNormalization (opset 21: scale and bias per channel; the
    checker refuses opset 18's per-group form): each group's values layer-normalized, then the
    affine."""
    rank = rank_of(node)
    if not 3 <= rank <= 5:
        return f"{node.op_type} needs rank 3 to 5"
    channels = node.input_type(0).shape[1]  # type: ignore[union-attr,index]
    if not isinstance(channels, int):
        return "the channel count is not static"
    if any(constant(node, i) is None for i in (1, 2)):
        return "scale and bias must be constants"
    if any(np.size(constant(node, i)) != channels for i in (1, 2)):
        return f"scale and bias must hold one value per channel ({channels})"
    if node.op_type == "GroupNormalization":
        groups = int(node.attrs.get("num_groups", 0))
        if groups < 1 or channels % groups:
            return f"{groups} groups do not divide {channels} channels"
        if node.attrs.get("stash_type", 1) != 1:
            return "only float32 statistics (stash_type 1)"
    return None


def _lrn(node: NodeView) -> str | None:
    if not 3 <= rank_of(node) <= 5:
        return "LRN needs rank 3 to 5"
    size = node.attrs.get("size", 0)
    if size < 1 or size % 2 == 0:
        return f"LRN of size {size}: oneDNN's window is centred, so only odd sizes"
    return None


def _layernorm_spelled(x: Pattern) -> tuple[Pattern, Pattern, Pattern]:
    """LayerNormalization in basic ops, as exporters before opset 17 write it: ``d = x -
    mean(x)``, ``d / sqrt(mean(d^2) + eps)``, then ``* gamma + beta``; most specific first:
    with beta (and gamma, or not), with gamma only, bare. The means are ReduceMeans (axes an
    attribute, or an input from opset 18)."""

    def mean(v: Pattern) -> Pattern:
        return op("ReduceMean", v) | op("ReduceMean", v, const())

    d = op("Sub", x, mean(x)).named("d")
    square = op("Pow", wildcard("d"), const(value=2.0)) | op("Mul", wildcard("d"), wildcard("d"))
    std = op("Sqrt", op("Add", mean(square), const("eps"), commutative=True))
    norm = op("Div", d, std)
    scaled = op("Mul", norm, const("gamma"), commutative=True)
    return op("Add", scaled | norm, const("beta"), commutative=True), scaled, norm


def _layernorm_check(match: Match) -> str | None:
    """Both means are over the last axis alone, keeping it; epsilon is one number; gamma and
    beta vary along the last axis only (oneDNN's layer_normalization, per-channel scale and
    shift)."""
    sub = match.producer("d")  # reads x
    reason = static_f32(sub) or in_qdq_group(sub) or static_f32(match.root)
    rank = rank_of(sub)
    if reason := reason or _layernorm_rank(rank):
        return reason
    channels = int(sub.input_type(0).shape[-1])  # type: ignore[union-attr,index]
    for m in match.nodes:
        if m.op_type != "ReduceMean":
            continue
        if reduce_axes(m) != [rank - 1]:
            return "a mean over other axes than the last"
        if m.attrs.get("keepdims", 1) != 1:
            return "a mean that drops the axis"
    if np.asarray(match.constant("eps")).size != 1:
        return "epsilon is not one number"
    for name in ("gamma", "beta"):
        c = match.constant(name) if name in match.bound else None
        along_last = c is not None and (c.size == 1 or c.shape[-1:] == (c.size,) == (channels,))
        if c is not None and (c.ndim > rank or not along_last):
            return f"{name} varies along other axes than the last"
    return None


def _rmsnorm_spelled(x: Pattern) -> tuple[Pattern, Pattern]:
    """RMSNorm (Llama's, T5's) as the PyTorch exporters write ``x * rsqrt(mean(x^2) + eps) *
    weight``: ``Pow(x, 2)`` or ``x * x``, ``ReduceMean``, ``Add`` eps, ``Sqrt``, then
    ``Reciprocal`` and a ``Mul`` by x, ``Div(1, .)`` and a ``Mul``, or ``Div(x, .)``; then a
    ``Mul`` by the weight, or not (most specific first)."""
    square = op("Pow", x, const(value=2.0)) | op("Mul", x, x)
    mean = op("ReduceMean", square) | op("ReduceMean", square, const())
    std = op("Sqrt", op("Add", mean, const("eps"), commutative=True))
    inverse = op("Reciprocal", std) | op("Div", const(value=1.0), std)
    normed = op("Mul", x, inverse, commutative=True) | op("Div", x, std)
    return op("Mul", normed, const("gamma"), commutative=True), normed


def _rmsnorm_check(match: Match) -> str | None:
    """The mean is over the last axis alone, keeping it; epsilon is one number; the weight
    varies along the last axis only; x is float32 of a static shape of rank 2 to 6."""
    mean = next(m for m in match.nodes if m.op_type == "ReduceMean")
    qdq = next((r for m in match.nodes if (r := in_qdq_group(m))), None)
    reason = static_f32(mean) or qdq or static_f32(match.root)
    rank = rank_of(mean)
    if reason := reason or (None if 2 <= rank <= 6 else "RMSNorm of rank 2 to 6 only"):
        return reason
    if reduce_axes(mean) != [rank - 1] or mean.attrs.get("keepdims", 1) != 1:
        return "the mean is not over the last axis alone, kept"
    if np.asarray(match.constant("eps")).size != 1:
        return "epsilon is not one number"
    if "gamma" in match.bound:
        c, t = match.constant("gamma"), mean.input_type(0)
        channels = t.shape[-1] if t is not None and t.shape else None
        along_last = c is not None and (c.size == 1 or c.shape[-1:] == (c.size,) == (channels,))
        if c is None or c.ndim > rank or not along_last:
            return "the weight varies along other axes than the last"
    return None


def _lower_rmsnorm(low: Lowering, comp: Found, members: list[NodeView]) -> None:
    """``x * (1 / sqrt(mean(x^2) + eps)) * weight`` in three kernels: the square (an
    eltwise); the mean as a product by a column of 1 / n (a matmul: oneDNN's pooling over one
    row of the last axis, as a decode step's is, is its slow reference loop), + eps, sqrt and
    1 / x as its post-ops; the product of x by the weight, then by that (a binary, the second
    product its post-op where the fusion pass takes it: rank 3 and more)."""
    start = len(low.kernels)
    b, root = comp.bound, members[-1]
    x, y = b["x"], root.outputs[0]
    shape = low.shape(x)
    eps = float(np.asarray(low.const(b["eps"])).reshape(-1)[0])
    n = low.counter()
    square, mean = f"{y}:square{n}", f"{y}:rms{n}"
    low.shapes[square], low.shapes[mean] = shape, (*shape[:-1], 1)
    low.emit("eltwise", [x], square, root, alg="square", alpha=0.0, beta=0.0)
    column = low.new_const(f"{y}:mean", np.full((shape[-1], 1), 1.0 / shape[-1]))
    k = low.emit("matmul", [square, low.as_rank(column, len(shape), root), None], mean, root)
    k.post_ops = [
        {"kind": "eltwise", "alg": "linear", "alpha": 1.0, "beta": eps},
        {"kind": "eltwise", "alg": "sqrt", "alpha": 0.0, "beta": 0.0},
        {"kind": "eltwise", "alg": "pow", "alpha": 1.0, "beta": -1.0},
    ]
    if "gamma" in b:  # (x * weight) * mean: a mean of (1, rows, 1) fuses as a post-op
        value = low.const(b["gamma"])
        assert value is not None  # the pattern matched a constant
        gamma = np.broadcast_to(value.reshape(-1), shape[-1:])
        weight = low.as_rank(low.new_const(f"{y}:weight", gamma), len(shape), root)
        scaled = f"{y}:scaled{n}"
        low.shapes[scaled] = shape
        low.emit("binary", [x, weight], scaled, root, alg="mul")
        x = scaled
    low.emit("binary", [x, mean], y, root, alg="mul")
    for kernel in low.kernels[start:]:
        kernel.members = [m.name for m in members]


def _safe_softmax() -> Pattern:
    """PyTorch's ``_safe_softmax`` as its exporters write it (TorchScript and dynamo alike):
    ``Where(IsNaN(s), 0, s)`` for ``s = Softmax(x)``, so that a row of scores masked entirely
    with -inf weighs nothing instead of NaN. The zero is one value (a scalar or a shape (1,)
    constant; the first option is also what the conformance suite builds) or any constant
    the check finds all zeros."""
    s = op("Softmax", wildcard()).named("s")
    zero = const("zero", value=0.0) | const("zero")
    return op("Where", op("IsNaN", s), zero, wildcard("s"))


def _safe_softmax_check(match: Match) -> str | None:
    """The constant is +0.0 everywhere (a NaN becomes exactly the Where's value) and only
    broadcasts into the softmax's output: the Where writes the softmax's shape and type."""
    softmax, where = match.producer("s"), match.root
    if reason := static_f32(softmax) or in_qdq_group(softmax):
        return reason
    zero = np.asarray(match.constant("zero"))
    if zero.dtype.kind != "f" or np.any(zero != 0) or np.any(np.signbit(zero)):
        return "the Where's constant is not 0.0: only NaN -> 0 is a safe softmax"
    s, w = softmax.output_type(0), where.output_type(0)
    if w is None or s is None or (w.dtype, w.shape) != (s.dtype, s.shape):
        return "the Where's output is not of the softmax's shape and type"
    return None


def _lower_softmax(low: Lowering, node: NodeView) -> None:
    _softmax_kernel(low, "softmax", node, node.outputs[0])


def _lower_safe_softmax(low: Lowering, comp: Found, members: list[NodeView]) -> None:
    start = len(low.kernels)
    softmax = next(m for m in members if m.op_type == "Softmax")
    _softmax_kernel(low, "safe_softmax", softmax, members[-1].outputs[0])
    for k in low.kernels[start:]:
        k.members = [m.name for m in members]


def _softmax_kernel(low: Lowering, kind: str, node: NodeView, y: str) -> None:
    """Softmax ``node`` written to ``y``; before opset 13 over the input flattened to 2-D
    at the axis (a view each side)."""
    x = node.inputs[0]
    shape = low.shape(x)
    axis = int(node.attrs.get("axis", -1 if low.opset >= 13 else 1)) % len(shape)
    if low.opset >= 13 or axis == len(shape) - 1:
        low.emit(kind, [x], y, node, axis=axis)
        return
    flat = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
    n = low.counter()
    x2, y2 = f"{x}:2d{n}", f"{y}:2d{n}"
    low.shapes[x2] = low.shapes[y2] = flat
    low.emit("view", [x], x2, node)
    low.emit(kind, [x2], y2, node, axis=1)
    low.emit("view", [y2], y, node)


def _lower_layernorm(low: Lowering, node: NodeView) -> None:
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    eps = float(node.attrs.get("epsilon", 1e-5))
    _layernorm_kernel(low, node.inputs[0], node.outputs[0], node.inputs[1], bias, eps, node)


def _layernorm_kernel(
    low: Lowering, x: str, y: str, scale: str | None, shift: str | None, eps: float, node: NodeView
) -> None:
    """y = (x - mean) / sqrt(var + eps) * scale + shift over the last axis; the constant
    scale and shift (ones and zeros when absent) as vectors along it."""
    c = low.shape(x)[-1]
    vectors = [
        low.new_const(f"{y}:{what}", np.broadcast_to(np.reshape(low.const(v), -1), c))
        if v
        else low.new_const(f"{y}:{what}", np.full(c, fill))
        for v, what, fill in ((scale, "scale", 1.0), (shift, "shift", 0.0))
    ]
    low.emit("layernorm", [x, *vectors], y, node, epsilon=eps)


def _lower_spelled(low: Lowering, comp: Found, members: list[NodeView]) -> None:
    b = comp.bound
    eps = float(np.asarray(low.const(b["eps"])).reshape(-1)[0])
    x, root = b["x"], members[-1]
    _layernorm_kernel(low, x, root.outputs[0], b.get("gamma"), b.get("beta"), eps, root)
    low.kernels[-1].members = [m.name for m in members]


def _lower_groupnorm(low: Lowering, node: NodeView) -> None:
    """Rows of (N * groups, the rest), layer-normalized without an affine of their own; then
    ``* scale + bias`` per channel, unless they are ones and zeros (TorchScript's GroupNorm:
    Reshape, InstanceNormalization of ones and zeros, Reshape, Mul, Add)."""
    x, y = node.inputs[0], node.outputs[0]
    shape = low.shape(x)
    channels = shape[1]
    groups = int(node.attrs.get("num_groups", channels))  # InstanceNormalization: a channel each
    scale, bias = (np.reshape(low.const(v), -1) for v in node.inputs[1:3])  # type: ignore[arg-type]
    n = low.counter()
    rows, normed = f"{x}:groups{n}", f"{y}:groups{n}"
    low.shapes[rows] = low.shapes[normed] = (
        shape[0] * groups,
        int(np.prod(shape)) // shape[0] // groups,
    )
    low.emit("view", [x], rows, node)
    low.emit(
        "layernorm",
        [rows, None, None],
        normed,
        node,
        epsilon=float(node.attrs.get("epsilon", 1e-5)),
    )
    if np.all(scale == 1) and np.all(bias == 0):
        low.emit("view", [normed], y, node)
        return
    z, scaled = f"{y}:normed{n}", f"{y}:scaled{n}"
    low.shapes[z] = low.shapes[scaled] = shape
    low.emit("view", [normed], z, node)
    per_channel = (1, channels) + (1,) * (len(shape) - 2)
    for alg, src, value, out in (("mul", z, scale, scaled), ("add", scaled, bias, y)):
        low.emit(
            "binary",
            [src, low.new_const(f"{y}:{alg}", value.reshape(per_channel))],
            out,
            node,
            alg=alg,
        )


def _lower_batchnorm(low: Lowering, node: NodeView) -> None:
    x, scale, shift, mean, var = node.inputs[:5]
    names = [low.new_const(n, low.const(n).reshape(-1)) for n in (mean, var, scale, shift)]  # type: ignore[union-attr]
    low.emit(
        "batchnorm",
        [x, *names],
        node.outputs[0],
        node,
        epsilon=float(node.attrs.get("epsilon", 1e-5)),
    )


def _lower_lrn(low: Lowering, node: NodeView) -> None:
    a = node.attrs
    low.emit(
        "lrn",
        [node.inputs[0]],
        node.outputs[0],
        node,
        size=int(a["size"]),
        alpha=float(a.get("alpha", 1e-4)),
        beta=float(a.get("beta", 0.75)),
        bias=float(a.get("bias", 1.0)),
    )


def _softmax_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return ints([node["attrs"]["axis"]], "axis"), []


def _epsilon(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return [], [number(node["attrs"]["epsilon"], "epsilon")]


def _lrn_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    a = node["attrs"]
    return ints([a["size"]], "size", lo=1), [number(a[k], k) for k in ("alpha", "beta", "bias")]


def _write_softmax(c: Call) -> str:
    return f"softmax(c, {integer(c.attrs['axis'], 'axis')}, {c.operands[0]})"


def _write_safe_softmax(c: Call) -> str:
    return f"safe_softmax(c, {integer(c.attrs['axis'], 'axis')}, {c.operands[0]})"


def _write_layernorm(c: Call) -> str:
    op = c.operands
    return f"layernorm(c, {f32(c.attrs['epsilon'], 'epsilon')}, {op[0]}, {op[1]}, {op[2]})"


def _write_batchnorm(c: Call) -> str:
    return f"batchnorm(c, {f32(c.attrs['epsilon'], 'epsilon')}, {', '.join(c.operands)})"


def _write_lrn(c: Call) -> str:
    params = ", ".join(f32(c.attrs[k], k) for k in ("alpha", "beta", "bias"))
    return f"lrn(c, {integer(c.attrs['size'], 'size')}, {params}, {c.operands[0]})"


FAMILY = Family(
    kinds=[
        Kind("softmax", 7, _softmax_params, write=_write_softmax),
        Kind("layernorm", 8, _epsilon, write=_write_layernorm),
        Kind("batchnorm", 9, _epsilon, write=_write_batchnorm),
        Kind("lrn", 14, _lrn_params, write=_write_lrn),
        Kind("safe_softmax", 23, _softmax_params, write=_write_safe_softmax),
    ],
    ops={
        "BatchNormalization": Op(_batchnorm, _lower_batchnorm),
        "Softmax": Op(accept, _lower_softmax),
        "LRN": Op(_lrn, _lower_lrn),
        "LayerNormalization": Op(_layernorm, _lower_layernorm),
        "InstanceNormalization": Op(_groupnorm, _lower_groupnorm),
        "GroupNormalization": Op(_groupnorm, _lower_groupnorm),
    },
    composites=[
        Composite(
            "dnnl.layernorm",
            _layernorm_spelled(wildcard("x")),
            _layernorm_check,
            _lower_spelled,
            members=False,
        ),
        Composite(
            "dnnl.rmsnorm",
            _rmsnorm_spelled(wildcard("x")),
            _rmsnorm_check,
            _lower_rmsnorm,
            members=False,
        ),
        Composite(
            "dnnl.safe_softmax",
            [_safe_softmax()],
            _safe_softmax_check,
            _lower_safe_softmax,
            members=False,
        ),
    ],
)
