"""The fallback segments never form a cycle with the partitions between them."""

from __future__ import annotations

import byoc
import numpy as np
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node


def test_fallback_nodes_on_both_sides_of_a_partition_are_separate_segments():
    # shape_b feeds the partition {xu, half, r}; shape_a reads from it. One onnxruntime segment
    # holding both Shape nodes would have to run both before and after that partition.
    model = make_model(
        [
            node("Cast", ["x"], "xu", to=1),
            node("Shape", ["xu"], "shape_a"),
            node("Shape", ["x"], "shape_b"),
            node("Div", ["shape_b", "one"], "half"),
            node("Reshape", ["xu", "half"], "r"),
            node("Reshape", ["r", "shape_a"], "y"),
        ],
        {"x": ["N", 4]},  # symbolic: the Shape nodes are not folded
        ["y"],
        constants={"one": np.array([1, 1], np.int64)},
    )
    config = {
        "backends": ["examplejson"],
        "backend": {"examplejson": {"ops": ["Cast", "Div", "Reshape"]}},
    }
    plan = byoc.partition(model, config)
    segment_of = {n: s.name for s in plan.segments for n in s.nodes}
    assert segment_of["shape_a"] != segment_of["shape_b"]
    assert_matches_onnxruntime(model, config, {"x": np.arange(8, dtype=np.float32).reshape(2, 4)})
