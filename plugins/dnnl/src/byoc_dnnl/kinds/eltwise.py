"""Eltwise kinds: ``eltwise`` (oneDNN's eltwise algorithms, ops.ELTWISE_ALGS), ``erf`` and
``lut`` (a lookup table the fusion pass makes of a quantized elementwise chain: byoc_dnnl.lut);
the activations spelled out in basic ops (HardSwish, Swish, GELU) as one eltwise each."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView
from byoc.patterns import Pattern, const, op, wildcard
from byoc.plan import Composite as Found

from byoc_dnnl.annotate import constant
from byoc_dnnl.kinds.base import (
    Call,
    Composite,
    Family,
    Kind,
    LowerComposite,
    Op,
    accept,
    alg_id,
    dst,
    f32,
    literal,
    number,
)
from byoc_dnnl.lowering import Lowering
from byoc_dnnl.ops import ELTWISE_ALGS

FLT_MAX = float(np.finfo(np.float32).max)
# The activations a convolution or a dense layer takes as a post-op in its composites.
ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu"}


def _pow(node: NodeView) -> str | None:
    """x ** e for one constant e: oneDNN's pow eltwise (squares and square roots by their own)."""
    e = constant(node, 1)
    if e is None or e.size != 1 or not np.isfinite(e).all():
        return "Pow with an exponent that is not one finite constant is not supported"
    return None


def _eltwise(
    low: Lowering, node: NodeView, alg: str, alpha: float = 0.0, beta: float = 0.0
) -> None:
    low.emit("eltwise", [node.inputs[0]], node.outputs[0], node, alg=alg, alpha=alpha, beta=beta)


def _relu(low: Lowering, node: NodeView) -> None:
    _eltwise(low, node, "relu")


def _leaky_relu(low: Lowering, node: NodeView) -> None:
    _eltwise(low, node, "relu", float(node.attrs.get("alpha", 0.01)))


def _sigmoid(low: Lowering, node: NodeView) -> None:
    _eltwise(low, node, "logistic")


def _tanh(low: Lowering, node: NodeView) -> None:
    _eltwise(low, node, "tanh")


def _elu(low: Lowering, node: NodeView) -> None:
    _eltwise(low, node, "elu", float(node.attrs.get("alpha", 1.0)))


def _hard_sigmoid(low: Lowering, node: NodeView) -> None:
    a = node.attrs
    _eltwise(low, node, "hardsigmoid", float(a.get("alpha", 0.2)), float(a.get("beta", 0.5)))


def _hard_swish(low: Lowering, node: NodeView) -> None:
    _eltwise(low, node, "hardswish", 1 / 6, 0.5)


def _clip(low: Lowering, node: NodeView) -> None:
    lo, hi = node.attrs.get("min", -FLT_MAX), node.attrs.get("max", FLT_MAX)
    if len(node.inputs) > 1 and node.inputs[1]:
        lo = float(low.const(node.inputs[1]))  # type: ignore[arg-type]
    if len(node.inputs) > 2 and node.inputs[2]:
        hi = float(low.const(node.inputs[2]))  # type: ignore[arg-type]
    _eltwise(low, node, "clip", max(float(lo), -FLT_MAX), min(float(hi), FLT_MAX))


def _sqrt(low: Lowering, node: NodeView) -> None:
    _eltwise(low, node, "sqrt")


def _abs(low: Lowering, node: NodeView) -> None:
    _eltwise(low, node, "abs")


def _neg(low: Lowering, node: NodeView) -> None:
    """-x: oneDNN's linear, alpha * x + beta (a rotary embedding's half-swap)."""
    _eltwise(low, node, "linear", -1.0, 0.0)


def _reciprocal(low: Lowering, node: NodeView) -> None:
    """1 / x: oneDNN's pow, alpha * x ** beta (RMSNorm's ``1 / sqrt``)."""
    _eltwise(low, node, "pow", 1.0, -1.0)


def _pow_lower(low: Lowering, node: NodeView) -> None:
    e = float(np.asarray(low.const(node.inputs[1])).reshape(-1)[0])
    if e in (2.0, 0.5):
        _eltwise(low, node, "square" if e == 2.0 else "sqrt")
    else:
        _eltwise(low, node, "pow", 1.0, e)


def _erf(low: Lowering, node: NodeView) -> None:
    low.emit("erf", [node.inputs[0]], node.outputs[0], node)


def hardswish_of(x: Pattern) -> Pattern:
    """``x * clip(x + 3, 0, 6) / 6``, where ``x`` binds the name "x" (read twice)."""
    plus3 = op("Add", wildcard("x"), const(value=3.0), commutative=True)
    clip = op("Clip", plus3, const(value=0.0), const(value=6.0))
    return op("Div", op("Mul", x, clip, commutative=True), const(value=6.0))


def swish_of(x: Pattern) -> Pattern:
    """``x * sigmoid(x)``, where ``x`` binds the name "x"."""
    return op("Mul", x, op("Sigmoid", wildcard("x")), commutative=True)


def _gelu(x: Pattern) -> Pattern:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` in its three usual spellings (TorchScript's
    ``x * 0.5 * (...)`` or ``(x * (...)) * 0.5``, the dynamo exporter's ``x * (0.5 * (...))``);
    x is a named wildcard."""
    root2 = float(np.sqrt(2.0))
    inner = op("Div", x, const(value=root2)) | op(
        "Mul", x, const(value=1 / root2), commutative=True
    )
    erf1 = op("Add", op("Erf", inner), const(value=1.0), commutative=True)
    half = const(value=0.5)
    form_a = op("Mul", op("Mul", x, erf1, commutative=True), half, commutative=True)
    form_b = op("Mul", op("Mul", x, half, commutative=True), erf1, commutative=True)
    form_c = op("Mul", x, op("Mul", erf1, half, commutative=True), commutative=True)
    return form_a | form_b | form_c


def _gelu_tanh(x: Pattern) -> Pattern:
    """``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``, GELU's tanh approximation
    (GPT-2's ``gelu_new``; PyTorch's ``approximate="tanh"``), the cube a Pow or two Muls; x is a
    named wildcard."""
    cube = (
        op("Pow", x, const(value=3.0))
        | op("Mul", x, op("Mul", x, x), commutative=True)
        | op("Mul", op("Mul", x, x), x, commutative=True)
    )
    inner = op("Add", x, op("Mul", cube, const(value=0.044715), commutative=True), commutative=True)
    scaled = op("Mul", inner, const(value=float(np.sqrt(2 / np.pi))), commutative=True)
    tanh1 = op("Add", op("Tanh", scaled), const(value=1.0), commutative=True)
    half = const(value=0.5)
    form_a = op("Mul", op("Mul", x, tanh1, commutative=True), half, commutative=True)
    form_b = op("Mul", op("Mul", x, half, commutative=True), tanh1, commutative=True)
    return form_a | form_b


def _ancestors(x: str, by_out: dict[str, NodeView]) -> set[str]:
    found: set[str] = set()
    stack = [x]
    while stack:
        m = by_out.get(stack.pop())
        if m is not None and m.name not in found:
            found.add(m.name)
            stack.extend(n for n in m.inputs if n)
    return found


def idiom(alg: str, alpha: float = 0.0, beta: float = 0.0) -> LowerComposite:
    """The lowering of a composite ending in an activation spelled out in basic ops: the
    members that compute its input ``x`` (every idiom pattern names the value it reads "x"),
    then one eltwise of ``alg`` over ``x`` writing the composite's output."""

    def lower(low: Lowering, comp: Found, members: list[NodeView]) -> None:
        root = members[-1]
        x = comp.bound["x"]
        by_out = {o: m for m in members for o in m.outputs}
        inner = _ancestors(x, by_out)
        for m in members:
            if m.name in inner:
                low.node(m)
        k = low.emit("eltwise", [x], root.outputs[0], root, alg=alg, alpha=alpha, beta=beta)
        k.members = [m.name for m in members if m.name not in inner]

    return lower


HARDSWISH = idiom("hardswish", 1 / 6, 0.5)
SWISH = idiom("swish", 1.0, 0.0)


def _eltwise_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    a = node["attrs"]
    return [alg_id(i, "eltwise", a)], [number(a["alpha"], "alpha"), number(a["beta"], "beta")]


def _lut_params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    return [dst(i, node["attrs"])], []


def _write_eltwise(c: Call) -> str:
    a = c.attrs
    alg = literal(a["alg"], ELTWISE_ALGS, "eltwise algorithm")
    return f"eltwise(c, {alg}, {f32(a['alpha'])}, {f32(a['beta'])}, {c.operands[0]})"


def _write_erf(c: Call) -> str:
    return f"erf(c, {c.operands[0]})"


x = wildcard("x")
FAMILY = Family(
    kinds=[
        Kind("eltwise", 5, _eltwise_params, write=_write_eltwise),
        Kind("erf", 11, write=_write_erf),
        Kind("lut", 22, _lut_params),
    ],
    ops={
        "Relu": Op(accept, _relu),
        "LeakyRelu": Op(accept, _leaky_relu),
        "Sigmoid": Op(accept, _sigmoid),
        "Tanh": Op(accept, _tanh),
        "Clip": Op(accept, _clip),
        "HardSigmoid": Op(accept, _hard_sigmoid),
        "HardSwish": Op(accept, _hard_swish),
        "Elu": Op(accept, _elu),
        "Erf": Op(accept, _erf),
        "Sqrt": Op(accept, _sqrt),
        "Abs": Op(accept, _abs),
        "Neg": Op(accept, _neg),
        "Reciprocal": Op(accept, _reciprocal),
        "Pow": Op(_pow, _pow_lower),
    },
    composites=[
        Composite("dnnl.gelu", [_gelu(x)], lower=idiom("gelu_erf")),
        Composite("dnnl.gelu_tanh", [_gelu_tanh(x)], lower=idiom("gelu_tanh")),
        Composite("dnnl.hardswish", [hardswish_of(x)], lower=HARDSWISH),
        Composite("dnnl.swish", [swish_of(x)], lower=SWISH),
    ],
)
