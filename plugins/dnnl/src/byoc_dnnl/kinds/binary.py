"""The ``binary`` kind: Add, Sub, Mul, Div (and Sum of two), by oneDNN's binary algorithms
(ops.BINARY_ALGS); by a scalar constant, a linear eltwise instead."""

from __future__ import annotations

from typing import Any

from byoc import NodeView

from byoc_dnnl.kinds.base import Call, Family, Kind, Lower, Op, alg_id, dst, literal
from byoc_dnnl.lowering import Lowering, reciprocal
from byoc_dnnl.ops import BINARY_ALGS


def _binary(node: NodeView) -> str | None:
    ta, tb, to = node.input_type(0), node.input_type(1), node.output_type(0)
    assert ta is not None and tb is not None and to is not None
    a_full, b_full = ta.shape == to.shape, tb.shape == to.shape
    a_const, b_const = node.const(0) is not None, node.const(1) is not None
    if a_const and b_const:
        return "both operands are constants"
    if not (a_full or b_full):
        return "neither operand has the output's shape (two-sided broadcast)"
    if node.op_type == "Div" and not a_full:
        return "Div with a broadcast numerator is not supported"
    return None


def _sum(node: NodeView) -> str | None:
    """Sum of two tensors is Add (old opsets spell residual connections this way)."""
    if len([i for i in node.inputs if i]) != 2:
        return "only Sum of two inputs is supported"
    return _binary(node)


def _lower(low: Lowering, node: NodeView, alg: str) -> None:
    a, b = node.inputs[0], node.inputs[1]
    y = node.outputs[0]
    out = low.shape(y)
    ca, cb = low.const(a), low.const(b)
    # x op scalar constant: a linear eltwise (fuses as a post-op, folds into weights).
    for x, c, x_first in ((a, cb, True), (b, ca, False)):
        if c is not None and c.size == 1 and low.shape(x) == out:
            v = float(c.reshape(()))
            lin = {
                ("add", True): (1.0, v),
                ("add", False): (1.0, v),
                ("mul", True): (v, 0.0),
                ("mul", False): (v, 0.0),
                ("sub", True): (1.0, -v),
                ("sub", False): (-1.0, v),
            }.get((alg, x_first))
            inverse = reciprocal(c) if alg == "div" and x_first else None
            if inverse is not None:
                lin = (float(inverse.reshape(())), 0.0)
            if lin is not None:
                low.emit("eltwise", [x], y, node, alg="linear", alpha=lin[0], beta=lin[1])
                return
    negate = False
    if low.shape(a) != out:
        a, b = b, a
        negate = alg == "sub"
    rank = len(out)
    if low.const(b) is not None:
        b = low.new_const(b, low.const(b))  # type: ignore[arg-type]
    k = low.emit("binary", [a, low.as_rank(b, rank, node)], y, node, alg=alg)
    if negate:
        k.post_ops.append({"kind": "eltwise", "alg": "linear", "alpha": -1.0, "beta": 0.0})


def _lowering(alg: str) -> Lower:
    def lower(low: Lowering, node: NodeView) -> None:
        _lower(low, node, alg)

    return lower


def _params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    a = node["attrs"]
    return [alg_id(i, "binary", a), *([dst(i, a)] if "dst" in a else [])], []


def _write(c: Call) -> str:
    alg = literal(c.attrs["alg"], BINARY_ALGS, "binary algorithm")
    return f"binary(c, {alg}, {c.operands[0]}, {c.operands[1]}, {c.posts})"


FAMILY = Family(
    kinds=[Kind("binary", 4, _params, write=_write, post_ops=True)],
    ops={
        "Add": Op(_binary, _lowering("add")),
        "Sub": Op(_binary, _lowering("sub")),
        "Mul": Op(_binary, _lowering("mul")),
        "Div": Op(_binary, _lowering("div")),
        "Sum": Op(_sum, _lowering("add")),  # two inputs: the check made sure
    },
)
