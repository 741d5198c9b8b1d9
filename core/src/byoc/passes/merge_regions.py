"""MergeCompilerRegions: grow same-backend regions as far as acyclicity allows."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from byoc.graph import Graph
from byoc.passes import PassState

_MAX_ANY_PAIR = 64  # the any-pair pass is quadratic: try it on the first regions only


class Regions:
    """Disjoint sets of nodes, each with one label, over a graph's dependency edges.

    Rules: a merge joins two regions of the same label and is made only when no path leaves one
    region, passes through any other region or node, and comes back into the other: the
    contracted graph stays acyclic. Each merge refused for that reason is recorded in
    ``blocked``: ``(a, b) -> a node on the path``, for ``byoc explain``.
    """

    def __init__(
        self, graph: Graph, labels: Sequence[str | None], groups: Iterable[Sequence[int]]
    ) -> None:
        self.graph = graph
        self.labels = labels
        self.parent = list(range(len(graph.nodes)))
        self.members: dict[int, list[int]] = {
            i: [i] for i, label in enumerate(labels) if label is not None
        }
        self.succ = [sorted(set(graph.succ(i))) for i in range(len(graph.nodes))]
        self.blocked: dict[tuple[int, int], int] = {}
        for group in groups:
            for m in group[1:]:
                self._union(group[0], m)

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def _union(self, a: int, b: int) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        if len(self.members[ra]) < len(self.members[rb]):
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.members[ra].extend(self.members.pop(rb))
        return ra

    def try_merge(self, a: int, b: int) -> bool:
        """Merge the regions of nodes a and b if they share a label and stay acyclic."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self.labels[ra] is None or self.labels[ra] != self.labels[rb]:
            return False
        via = self._reaches_through_other(ra, rb)
        if via is None:
            via = self._reaches_through_other(rb, ra)
        if via is not None:
            self.blocked.setdefault((a, b), via)
            return False
        self._union(ra, rb)
        return True

    def _reaches_through_other(self, src: int, dst: int) -> int | None:
        """A node on a path src -> (other regions or nodes) -> dst, or None if there is none.

        No shortcut by topological position: a merged region holds nodes from anywhere in the
        order, so a path may leave a late node of it from an early one.
        """
        first = {self.find(s) for m in self.members[src] for s in self.succ[m]}
        stack = [r for r in first if r not in (src, dst)]
        seen: set[int] = set()
        while stack:
            region = stack.pop()
            if region in seen:
                continue
            seen.add(region)
            for m in self.members.get(region, [region]):  # unlabelled nodes stay single
                for s in self.succ[m]:
                    r = self.find(s)
                    if r == dst:
                        return m
                    if r != src and r not in seen:
                        stack.append(r)
        return None

    def regions(self) -> list[list[int]]:
        """Every region's node list (sorted), ordered by first node."""
        return sorted((sorted(m) for m in self.members.values()), key=lambda m: m[0])


def merge_compiler_regions(state: PassState) -> PassState:
    """MergeCompilerRegions: the labelled nodes, each composite starting as one region, grown
    by ``grow`` into ``state.regions``; merges a cycle stopped go to ``state.blocked``."""
    regions = Regions(state.graph, state.labels, [m.members for m in state.matches])
    grow(regions)
    return dataclasses.replace(
        state,
        regions=tuple(tuple(r) for r in regions.regions()),
        blocked={**state.blocked, **regions.blocked},
    )


def grow(regions: Regions, any_pair: bool = False) -> None:
    """Merge regions greedily: producers first, then siblings.

    Rules: in topological order, each labelled node tries to join the region of each producer
    of the same label, in input order (TVM's producer-first merge). Then regions of one label
    that read a common value are merged when that stays acyclic (TVM leaves such siblings
    apart). With ``any_pair`` (the fallback), any two regions of one label are tried, so the
    leftover graph becomes as few onnxruntime sessions as the greedy order finds.
    """
    graph, labels = regions.graph, regions.labels
    for node in range(len(graph.nodes)):
        if labels[node] is None:
            continue
        for producer in graph.pred(node):
            regions.try_merge(producer, node)
    readers: dict[tuple[str, str], list[int]] = {}
    for node in range(len(graph.nodes)):
        label = labels[node]
        if label is not None:
            for value in graph.reads[node]:
                readers.setdefault((value, label), []).append(node)
    for users in readers.values():
        for other in users[1:]:
            regions.try_merge(users[0], other)
    if any_pair:
        heads = [r[0] for r in regions.regions()][:_MAX_ANY_PAIR]
        for i, a in enumerate(heads):
            for b in heads[i + 1 :]:
                regions.try_merge(a, b)
