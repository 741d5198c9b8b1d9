"""MergeCompilerRegions' cycle check on regions whose nodes are far apart in the order."""

from __future__ import annotations

from byoc.graph import Graph
from byoc.passes.merge_regions import Regions
from byoc.testing.build import make_model, node


def test_a_path_through_a_late_node_back_into_an_early_region_blocks_the_merge():
    # order: d1 s p1 d2 late p2; regions {d1, d2} (A) and {p1, p2} (B) are already merged.
    # s -> late -> p2 ~ p1 -> d2: merging s into {d1, d2} would make A -> B -> A a cycle,
    # and the path leaves through 'late', which comes after every node of {d1, d2}.
    model = make_model(
        [
            node("Relu", ["x"], "d1"),
            node("Relu", ["x"], "s"),
            node("Relu", ["x"], "p1"),
            node("Add", ["d1", "p1"], "d2"),
            node("Neg", ["s"], "late"),
            node("Exp", ["late"], "p2"),
        ],
        {"x": [2]},
        ["d2", "p2"],
    )
    graph = Graph(model)
    assert [n.name for n in graph.nodes] == ["d1", "s", "p1", "d2", "late", "p2"]
    regions = Regions(graph, ["A", "A", "B", "A", None, "B"], [[0, 3], [2, 5]])
    assert not regions.try_merge(1, 0)
    assert regions.blocked[(1, 0)] in (4, 5, 2)
    assert sorted(map(sorted, regions.regions())) == [[0, 3], [1], [2, 5]]
