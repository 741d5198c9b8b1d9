"""Nodes OpenVINO's CPU plugin would take but computes otherwise than onnxruntime: the rules
table, one entry per rule (``base.Rule``: the op types it concerns, its check, its reason), in
one module per family:

* ``ops``: ops and settings computed otherwise (LRN, QuantizeLinear but the one only
  DequantizeLinears read, QLinearConv, DynamicQuantizeLinear, Softmax before opset 13 off the
  last axis, TopK's and Hardmax's ties, Resize's antialias...), and inputs OpenVINO needs
  constant (a Reshape's shape, a Reduce's axes...);
* ``fusions``: pairs of nodes OpenVINO's own rewrites compute wrongly or crash on (a zero Pad
  before a strided ConvTranspose, a step of a dequantized value...);
* ``values``: indices computed from a model input, 8-bit overflow, divisors, float64, dtypes
  it does not take, non-static shapes, empty tensors, integers past 2**24 (``widths``).

``reason`` tries the rules in ``RULES`` order (the families in that order, each in its own):
the first that refuses a node gives its reason; with ``own_int8`` (``[backend.openvino] int8
= "own"``) the rules about OpenVINO's own quantization arithmetic (``Rule.own_int8``) refuse
nothing. OpenVINO 2026.4; byoc's conformance suite found most of them.
"""

from __future__ import annotations

from byoc import NodeView

from byoc_openvino.rules import fusions, ops, values
from byoc_openvino.rules.base import Rule
from byoc_openvino.rules.widths import INT_LIMIT, Widths

__all__ = ["INT_LIMIT", "RULES", "Rule", "Widths", "reason"]

RULES: tuple[Rule, ...] = (*ops.RULES, *fusions.RULES, *values.RULES)


def reason(node: NodeView, widths: Widths, own_int8: bool = False) -> str | None:
    """Why the CPU plugin would compute this node otherwise than onnxruntime, or None
    (``own_int8``: its own quantization arithmetic is accepted)."""
    for rule in RULES:
        if own_int8 and rule.own_int8:
            continue
        found = rule.refusal(node, widths)
        if found:
            return found
    return None
