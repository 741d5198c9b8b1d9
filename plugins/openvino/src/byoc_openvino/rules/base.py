"""A rule: one way OpenVINO's CPU plugin computes a node otherwise than onnxruntime."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from byoc import NodeView

from byoc_openvino.handles import DEVICE
from byoc_openvino.rules.widths import Widths


@dataclass(frozen=True)
class Rule:
    """``ops``: the op types the rule concerns (None: every op). ``check(node, widths)``: false
    where the node is fine, else true or a mapping of the fields ``reason`` names. ``reason``:
    why the node stays on onnxruntime, formatted with ``node``, ``device`` (OpenVINO's device)
    and the check's fields. ``own_int8``: the node quantizes with OpenVINO's own arithmetic (a
    step otherwise than onnxruntime at rounding ties), which ``[backend.openvino] int8 =
    "own"`` accepts: byoc's placement then holds its partition to ``[compile]
    precision_tolerance``."""

    ops: Collection[str] | None
    check: Callable[[NodeView, Widths], Any]
    reason: str
    own_int8: bool = False

    def refusal(self, node: NodeView, widths: Widths) -> str | None:
        if self.ops is not None and node.op_type not in self.ops:
            return None
        found = self.check(node, widths)
        if not found:
            return None
        fields = found if isinstance(found, Mapping) else {}
        return self.reason.format(node=node, device=DEVICE, **fields)


def always(node: NodeView, widths: Widths) -> bool:
    """Every node of the rule's op types."""
    return True
