"""ONNX ops that run as host steps (byoc_dnnl.host), not kernels: work on integer tensors
before the first kernel (Cast and Gather; integer views and Expand are their entries in
byoc_dnnl.kinds.shape), and ArgMax or ArgMin after the last."""

from __future__ import annotations

import numpy as np
from byoc import NodesRefused, NodeView

from byoc_dnnl.annotate import host_check
from byoc_dnnl.kinds.base import Family, Op
from byoc_dnnl.lowering import Lowering


def _arg(node: NodeView) -> str | None:
    """ArgMax or ArgMin of a float32 result (a CTC recogniser's best class per step): a host
    step after the kernels (byoc_dnnl.host), so it needs a kernel of its partition to read."""
    t, out = node.input_type(0), node.output_type(0)
    if t is None or t.dtype != np.float32 or not t.is_static or not t.shape or 0 in t.shape:
        return f"input '{node.inputs[0]}' must be float32 of a static, non-empty shape"
    if out is None or not out.is_static or not out.shape:
        return "its output must have a static shape of rank >= 1 (keepdims=0 of a 1-D input)"
    axis = int(node.attrs.get("axis", 0))
    if not -len(t.shape) <= axis < len(t.shape):
        return f"axis {axis} is not an axis of its rank-{len(t.shape)} input"
    return None


def _lower_cast(low: Lowering, node: NodeView) -> None:
    low.emit("cast", [node.inputs[0]], node.outputs[0], node)


def _lower_arg(low: Lowering, node: NodeView) -> None:
    """A host step after the kernels (byoc_dnnl.host); of a value the partition computes."""
    x, y = node.inputs[0], node.outputs[0]
    if x in low.partition.inputs or low.const(x) is not None:
        raise NodesRefused({node.name: "no kernel of its partition computes its input"})
    rank = len(low.shape(x))
    attrs = {
        "axis": int(node.attrs.get("axis", 0)) % rank,
        "keepdims": int(node.attrs.get("keepdims", 1) != 0),
        "last": int(node.attrs.get("select_last_index", 0) != 0),
    }
    low.emit(node.op_type.lower(), [x], y, node, **attrs)


def _lower_gather(low: Lowering, node: NodeView) -> None:
    rank = len(low.shape(node.inputs[0]))
    axis = int(node.attrs.get("axis", 0)) % rank
    low.emit("gather", [node.inputs[0], node.inputs[1]], node.outputs[0], node, axis=axis)


FAMILY = Family(
    ops={
        "Cast": Op(host_check, _lower_cast, typed=False),
        "Gather": Op(host_check, _lower_gather, typed=False),
        "ArgMax": Op(_arg, _lower_arg, typed=False),
        "ArgMin": Op(_arg, _lower_arg, typed=False),
    },
)
