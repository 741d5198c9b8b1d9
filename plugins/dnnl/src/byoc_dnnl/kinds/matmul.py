"""The ``matmul`` kind: MatMul and Gemm (a dense layer when one operand is constant weights,
TVM's ``dnnl.dense_*``), and scaled dot-product attention's two products. An int8 dense layer
is the ``qmatmul`` kind (byoc_dnnl.kinds.int8)."""

from __future__ import annotations

from typing import Any

import numpy as np
from byoc import NodeView
from byoc.patterns import Match, Pattern, const, op, wildcard

from byoc_dnnl.annotate import constant, rank_of
from byoc_dnnl.kinds.base import Call, Composite, Family, Kind, Op, dims, ints
from byoc_dnnl.kinds.eltwise import ACTIVATIONS
from byoc_dnnl.kinds.int8 import static_qmatmul
from byoc_dnnl.lowering import Lowering

PERMS = ("perm_a", "perm_b", "perm_out")


def _matmul(node: NodeView) -> str | None:
    if rank_of(node, 0) < 2 or rank_of(node, 1) < 2:
        return "MatMul of 1-D operands is not supported"
    return None


def _gemm(node: NodeView) -> str | None:
    a = node.attrs
    if constant(node, 1) is None and (a.get("transB", 0) or a.get("alpha", 1.0) != 1.0):
        return "Gemm with transB or alpha needs a constant B"
    if a.get("transA", 0):
        return "Gemm with transA is not supported"
    if len(node.inputs) > 2 and node.inputs[2] and constant(node, 2) is None:
        return "Gemm's C is not a constant"
    return None


def _lower_matmul(low: Lowering, node: NodeView) -> None:
    if static_qmatmul(low, node):
        return
    y = node.outputs[0]
    rank = len(low.shape(y))
    a = low.as_rank(node.inputs[0], rank, node)
    b = node.inputs[1]
    if low.const(b) is not None:
        b = low.new_const(b, low.const(b))  # type: ignore[arg-type]
    b = low.as_rank(b, rank, node)
    low.emit("matmul", [a, b, None], y, node)


def _lower_gemm(low: Lowering, node: NodeView) -> None:
    if static_qmatmul(low, node):
        return
    at = node.attrs
    y = node.outputs[0]
    m, n = low.shape(y)
    b = node.inputs[1]
    bc = low.const(b)
    if bc is not None:
        bc = bc.T if at.get("transB", 0) else bc
        b = low.new_const(b, bc * np.float32(at.get("alpha", 1.0)))
    bias = None
    if len(node.inputs) > 2 and node.inputs[2]:
        c = low.const(node.inputs[2]) * np.float32(at.get("beta", 1.0))  # type: ignore[operator]
        c = np.broadcast_to(
            c.reshape(1, -1) if c.ndim == 1 else c.reshape(c.shape or (1, 1)), (m, n)
        )
        c = c[:1] if (c == c[:1]).all() else c
        bias = low.new_const(node.inputs[2], c)
    low.emit("matmul", [node.inputs[0], b, bias], y, node)


def _attention() -> Pattern:
    """Scaled dot-product attention: ``softmax(q @ k * scale + mask) @ v``, the scale (a Div or
    Mul by a constant) and the mask (an Add) each optional."""
    scores = op("MatMul", wildcard(), wildcard())
    scaled = op("Div", scores, const()) | op("Mul", scores, const(), commutative=True) | scores
    masked = op("Add", scaled, wildcard("mask"), commutative=True) | scaled
    return op("MatMul", op("Softmax", masked).named("probs"), wildcard())


def _attention_check(match: Match) -> str | None:
    """Both products are of computed tensors, and the softmax is over the scores' last axis."""
    if any(
        m.op_type == "MatMul" and any(m.const(i) is not None for i in (0, 1)) for m in match.nodes
    ):
        return "a product by a constant is a dense layer, not attention"
    softmax = match.producer("probs")
    rank = rank_of(softmax)
    opsets = softmax.graph.model.opset_import
    opset = next((o.version for o in opsets if o.domain in ("", "ai.onnx")), 17)
    if int(softmax.attrs.get("axis", -1 if opset >= 13 else 1)) % max(rank, 1) != rank - 1:
        return "the softmax is not over the scores' last axis"
    return None


def _validate(i: int, node: dict[str, Any]) -> None:
    for key in PERMS:
        if key in node["attrs"]:  # a transpose read or written through (the shim checks it)
            ints(node["attrs"][key], f"node {i} {key}", len(node["shape"]))


def _params(i: int, node: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Operands read, and a destination written, through a transpose (checked by
    ``_validate``)."""
    a, ip = node["attrs"], []
    for key in PERMS:
        ip += [len(a.get(key, [])), *a.get(key, [])]
    return ip, []


def _write(c: Call) -> str:
    op, perms = c.operands, ", ".join(dims(c.attrs.get(k, [])) for k in PERMS)
    return f"matmul(c, {op[0]}, {op[1]}, {op[2]}, {c.shape}, {c.posts}, {perms})"


def _composites() -> list[Composite]:
    matmul = op("MatMul", wildcard(), const())
    matmul_bias = op("Add", matmul, const(), commutative=True)
    return [
        Composite("dnnl.dense_bias_relu", [op(ACTIVATIONS, matmul_bias)]),
        Composite("dnnl.dense_bias", [matmul_bias]),
        Composite("dnnl.attention", [_attention()], _attention_check),
    ]


FAMILY = Family(
    kinds=[Kind("matmul", 3, _params, _validate, _write, post_ops=True)],
    ops={"MatMul": Op(_matmul, _lower_matmul), "Gemm": Op(_gemm, _lower_gemm)},
    composites=_composites(),
)
