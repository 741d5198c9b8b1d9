"""AnnotateTarget: offer every node that is not in a composite to the backends, in order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from byoc.graph import SUBGRAPH_OPS
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
    default ONNX domain are never claimed; a backend claims a node when the op type is allowed
    by its config, no veto (``vetoed[node][backend]``, a reason) forbids it, and its check
    returns None. Nodes nobody claims keep the label None (the fallback). Every refusal is
    recorded with its reason.
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
