"""MergeComposite: group nodes that match a backend's patterns into composite kernels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from byoc.graph import Graph
from byoc.patterns import Match, match_at


@dataclass
class CompositeMatch:
    backend: str
    name: str
    members: list[int]  # topological order; the root is last


def merge_composite(
    graph: Graph,
    tables: list[tuple[str, list[tuple[str, object, Callable[[Match], str | None] | None]]]],
    allowed: Callable[[str, int], str | None],
    refusals: dict[int, list[tuple[str, str]]],
) -> list[CompositeMatch]:
    """Find composite matches, backends in priority order and each table in its order.

    Rules: the first pattern (of the first backend) to match a node wins; a match is rejected
    when one of its interior (non-root) values is used outside it or is a graph output, when it
    overlaps an earlier match, when a member is not allowed for the backend
    (``allowed(backend, node index)`` gives the reason), or when the pattern's check refuses.
    Refusals are recorded per root node for ``byoc explain``.
    """
    taken: set[int] = set()
    found: list[CompositeMatch] = []
    outputs = set(graph.outputs)
    for backend, table in tables:
        for name, pattern, check in table:
            for root in range(len(graph.nodes)):
                if root in taken or root in graph.const_nodes:
                    continue
                for members in match_at(pattern, graph, root):  # type: ignore[arg-type]
                    reason = _refuse(graph, members, root, taken, outputs)
                    if reason is None:
                        reason = next(filter(None, (allowed(backend, m) for m in members)), None)
                    if reason is None and check is not None:
                        try:
                            reason = check(Match(name, graph, members))
                        except Exception as exc:
                            reason = f"check raised {type(exc).__name__}: {exc}"
                    if reason is not None:
                        refusals.setdefault(root, []).append((backend, f"pattern {name}: {reason}"))
                        continue
                    found.append(CompositeMatch(backend, name, members))
                    taken.update(members)
                    break
    return found


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
