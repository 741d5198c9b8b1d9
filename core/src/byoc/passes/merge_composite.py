"""MergeComposite: group nodes that match a backend's patterns into composite kernels."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from byoc.graph import Graph
from byoc.passes import CompositeMatch, PassState
from byoc.patterns import Match, Pattern, match_at

Table = list[tuple[str, Pattern, Callable[[Match], str | None] | None]]


def merge_composite(
    state: PassState,
    tables: list[tuple[str, Table]],
    allowed: Callable[[str, int], str | None],
) -> PassState:
    """Find composite matches, backends in priority order and each table in its order; label
    their members with the backend.

    Rules: the first pattern (of the first backend) to match a node wins; a match is rejected
    when one of its interior (non-root) values is used outside it or is a graph output, when it
    overlaps an earlier match, when a member is not allowed for the backend
    (``allowed(backend, node index)`` gives the reason), or when the pattern's check refuses.
    Refusals are recorded per root node for ``byoc explain``.
    """
    graph = state.graph
    taken = {m for c in state.matches for m in c.members}  # matches made before stay
    found: list[CompositeMatch] = []
    refusals: list[tuple[int, str, str]] = []
    outputs = set(graph.outputs)
    for backend, table in tables:
        for name, pattern, check in table:
            for root in range(len(graph.nodes)):
                if root in taken or root in graph.const_nodes:
                    continue
                for match in match_at(pattern, graph, root, name):
                    reason = _refuse(graph, match.members, root, taken, outputs)
                    if reason is None:
                        vetoes = (allowed(backend, m) for m in match.members)
                        reason = next(filter(None, vetoes), None)
                    if reason is None and check is not None:
                        try:
                            reason = check(match)
                        except Exception as exc:
                            reason = f"check raised {type(exc).__name__}: {exc}"
                    if reason is not None:
                        refusals.append((root, backend, f"pattern {name}: {reason}"))
                        continue
                    found.append(CompositeMatch(backend, name, tuple(match.members), match.bound))
                    taken.update(match.members)
                    break
    labels = list(state.labels)
    for m in found:
        for member in m.members:
            labels[member] = m.backend
    return dataclasses.replace(
        state,
        labels=tuple(labels),
        refusals=state.refused(refusals),
        matches=(*state.matches, *found),
    )


def _refuse(
    graph: Graph, members: list[int], root: int, taken: set[int], outputs: set[str]
) -> str | None:
    if members[-1] != root:  # members are sorted; the root must come last
        return "the root does not come last in topological order"
    overlap = [graph.nodes[m].name for m in members if m in taken]
    if overlap:
        return f"overlaps an earlier match at {', '.join(overlap)}"
    inside = set(members)
    for m in members[:-1]:
        for value in graph.nodes[m].output:
            users = graph.consumers.get(value, [])
            if value in outputs or any(u not in inside for u in users):
                return (
                    f"the value '{value}' of interior node '{graph.nodes[m].name}' is used outside"
                )
    return None
