"""AnnotateTarget: offer every node that is not in a composite to the backends, in order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import helper

from byoc.graph import SUBGRAPH_OPS, NodeView
from byoc.passes import PassState


@dataclass
class Candidate:
    """A backend as AnnotateTarget sees it: its single-op checks and its allow-list."""

    name: str
    checks: dict[str, Callable[[Any], str | None] | None]
    ops: list[str] | None = None
    exclude_ops: list[str] = field(default_factory=list)

    def allowed(self, op_type: str) -> str | None:
        """Why the config forbids this op type for this backend, or None."""
        if self.ops is not None and op_type not in self.ops:
            return f"{op_type} is not in [backend.{self.name}] ops"
        if op_type in self.exclude_ops:
            return f"{op_type} is in [backend.{self.name}] exclude_ops"
        return None


def annotate_target(
    state: PassState,
    candidates: list[Candidate],
    vetoed: Mapping[int, Mapping[str, str]] | None = None,
) -> PassState:
    """Label each unlabelled node with the first backend whose check accepts it.

    Rules: composite members are already labelled; constants (initializers, Constant, Cast of a
    constant) and nodes with subgraphs (If, Loop, Scan) are never claimed; ops outside the
    default ONNX domain are never claimed, nor are nodes whose types the ONNX schema refuses
    (``schema_refusal``: onnxruntime refuses the model and says why); a backend claims a node
    when the op type is allowed by its config, no veto (``vetoed[node][backend]``, a reason)
    forbids it, and its check returns None. Nodes nobody claims keep the label None (the
    fallback). Every refusal is recorded with its reason.
    """
    graph = state.graph
    labels = list(state.labels)
    refusals: list[tuple[int, str, str]] = []
    for i, node in enumerate(graph.nodes):
        if labels[i] is not None or i in graph.const_nodes:
            continue
        if node.op_type in SUBGRAPH_OPS:
            refusals.append((i, "*", "nodes with subgraphs stay on onnxruntime"))
            continue
        if node.domain not in ("", "ai.onnx"):
            refusals.append((i, "*", f"op domain '{node.domain}' is not claimed"))
            continue
        view = graph.view(i)
        refused = schema_refusal(view)
        if refused:
            refusals.append((i, "*", f"onnxruntime refuses it: {refused}"))
            continue
        for cand in candidates:
            reason = (vetoed or {}).get(i, {}).get(cand.name) or cand.allowed(node.op_type)
            if reason is None and node.op_type not in cand.checks:
                reason = f"{node.op_type} is not supported"
            if reason is None:
                check = cand.checks[node.op_type]
                try:
                    reason = check(view) if check is not None else None
                except Exception as exc:
                    reason = f"check raised {type(exc).__name__}: {exc}"
            if reason is None:
                labels[i] = cand.name
                break
            refusals.append((i, cand.name, reason))
    return dataclasses.replace(state, labels=tuple(labels), refusals=state.refused(refusals))


def schema_refusal(node: NodeView) -> str | None:
    """Why the ONNX schema, at the model's opset, refuses the node's types, or None: the
    checks onnxruntime makes when it loads a model (inputs of one type parameter share a
    type, each type is allowed, outputs are declared with the types the op makes)."""
    opset = next(
        (o.version for o in node.graph.model.opset_import if o.domain in ("", "ai.onnx")), 1
    )
    if opset > onnx.defs.onnx_opset_version():
        return f"opset {opset} is newer than any ONNX release ({onnx.defs.onnx_opset_version()})"
    types = {}
    for i, name in enumerate(node.inputs):
        t = node.input_type(i)
        if name and t is not None and t.dtype is not None:
            types[name] = helper.make_tensor_type_proto(
                helper.np_dtype_to_tensor_dtype(t.dtype), None
            )
        elif name:
            return None  # a type not known here: nothing to check it against
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        inferred = onnx.shape_inference.infer_node_outputs(schema, node.proto, types)
    except Exception as exc:  # onnx's SchemaError, ValidationError, InferenceError
        return f"ONNX {node.op_type} at opset {opset} refuses these inputs: {exc}"
    for i, name in enumerate(node.outputs):
        declared, made = node.output_type(i), inferred.get(name)
        if declared is None or declared.dtype is None or not (made and made.tensor_type.elem_type):
            continue
        dtype = helper.tensor_dtype_to_np_dtype(made.tensor_type.elem_type)
        if dtype != declared.dtype:
            return f"output '{name}' is declared {declared.dtype}, but {node.op_type} makes {dtype}"
    return None
