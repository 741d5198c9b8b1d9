"""Pruning: regions too small, computing only constants, or refused by their backend's prune go
back to the fallback."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from byoc.passes import PassState


@dataclass(frozen=True)
class PruneRule:
    """A backend's pruning: its minimum partition size, and its own check over a region's
    nodes (None keeps the region, a string is why it goes)."""

    min_nodes: int = 1
    check: Callable[[list[Any]], str | None] | None = None


def prune_regions(state: PassState, rules: Mapping[str, PruneRule]) -> PassState:
    """Keep the regions their backend's rule accepts; unlabel the others' nodes, saying why,
    but for a DequantizeLinear of constants that a kept region of the same backend reads too:
    it stays, a region of its own, which PartitionGraph copies into each region reading it."""
    labels = list(state.labels)
    kept: list[tuple[int, ...]] = []
    refusals: list[tuple[int, str, str]] = []
    dropped: list[tuple[tuple[int, ...], str, str]] = []
    for nodes in state.regions:
        backend = labels[nodes[0]]
        assert backend is not None, "a region of unlabelled nodes"
        rule = rules[backend]
        reason = None
        if _from_constants(state.graph, nodes):
            reason = "pruned: it computes only constants, which onnxruntime folds once"
        elif len(nodes) < rule.min_nodes:
            reason = (
                f"pruned: its partition has {len(nodes)} node(s), fewer than "
                f"min_partition_nodes = {rule.min_nodes}"
            )
        elif rule.check is not None:
            pruned = rule.check([state.graph.view(i) for i in nodes])
            reason = f"pruned: {pruned}" if pruned else None
        if reason is None:
            kept.append(nodes)
        else:
            dropped.append((nodes, backend, reason))
    graph = state.graph
    held = {i for nodes in kept for i in nodes}
    for nodes, backend, reason in dropped:
        for i in nodes:
            readers = graph.consumers.get(graph.nodes[i].output[0], [])
            if _dequantized_constant(graph, i) and any(
                r in held and labels[r] == backend for r in readers
            ):
                kept.append((i,))
                continue
            labels[i] = None
            refusals.append((i, backend, reason))
    return dataclasses.replace(
        state, labels=tuple(labels), regions=tuple(kept), refusals=state.refused(refusals)
    )


def _from_constants(graph: Any, nodes: tuple[int, ...]) -> bool:
    """Whether the region reads nothing but constants (a DequantizeLinear of a weight whose
    reader went to another backend): its outputs are constants too. A node that reads nothing
    and is no Constant (a random draw) is not."""
    made = {o for i in nodes for o in graph.nodes[i].output}
    for i in nodes:
        node = graph.nodes[i]
        if not any(node.input) and node.op_type != "Constant":
            return False
        if any(n and n not in made and not graph.is_constant(n) for n in node.input):
            return False
    return True


def _dequantized_constant(graph: Any, i: int) -> bool:
    node = graph.nodes[i]
    return node.op_type == "DequantizeLinear" and all(graph.is_constant(n) for n in node.input if n)
