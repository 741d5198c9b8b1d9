"""The whole-model check's rules (``byoc.placement.whole``): when a checked model runs as plain
onnxruntime (``lost``), and the second chance one backend's whole region gets
(``second_chance``). Each returns its finding and changes nothing it is given."""

from __future__ import annotations

import warnings

import byoc
import onnx
import pytest
from byoc.placement import whole
from byoc.plan import Measurement
from byoc.testing.build import make_model, node

LOSS = Measurement("the compiled model", "byoc", ["a"], 1.1, 1.0, False, interval=(1.05, 1.15))


def test_lost_sends_a_slower_model_to_onnxruntime_unless_told_to_keep_it():
    with pytest.warns(UserWarning, match=r"not faster than plain onnxruntime .*one onnxruntime"):
        why = whole.lost(LOSS, None, fallback=True)
    assert why is not None and "1.1 ms vs 1 ms" in why
    with pytest.warns(UserWarning, match=r"whole_model_fallback = false\)$"):
        assert whole.lost(LOSS, None, fallback=False) is None


def test_lost_always_sends_a_failing_model_to_onnxruntime():
    failed = Measurement("the compiled model", "byoc", ["a"], 0, 0, False, failure="it failed")
    with pytest.warns(UserWarning, match="^it failed: running it as one onnxruntime session"):
        assert whole.lost(failed, None, fallback=False) == "it failed"


def test_lost_doubts_an_unexplained_win():
    won = Measurement("the compiled model", "byoc", ["a"], 0.7, 1.0, True)
    with pytest.warns(UserWarning, match="^partitions save too little"):
        assert whole.lost(won, "partitions save too little", fallback=True)


def plan_of_two_pieces():
    """a -> Add -> Relu -> Mul: examplejson claims Add and Mul, onnxruntime runs Relu."""
    model = make_model(
        [node("Add", ["x", "x"], "a"), node("Relu", ["a"], "r"), node("Mul", ["r", "x"], "y")],
        {"x": [2, 2]},
        ["y"],
    )
    config = {"backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Add", "Mul"]}}}
    plan = byoc.partition(model, config)
    assert [p.nodes for p in plan.partitions] == [["a"], ["y"]]
    return plan


def test_second_chance_gives_one_backend_its_whole_region_and_vetoes_the_rest():
    plan = plan_of_two_pieces()
    region = Measurement("other_0", "other", ["a", "r", "y"], 0.5, 1.0, True)
    small = Measurement("other_1", "other", ["a"], 0.1, 1.0, True)  # not the plan's every node
    given = {"r": {"other": "lost alone"}}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        vetoes = whole.second_chance(
            plan, {"1": region, "2": small}, LOSS, {"examplejson": {}, "other": {}}, given
        )
    assert [str(w.message) for w in said] == [
        "measured placement: the plan lost the whole-model check (1.1 ms vs 1 ms); trying "
        "other on its 3 nodes instead"
    ]
    assert vetoes is not None
    assert {node: sorted(by) for node, by in vetoes.items()} == {
        "a": ["examplejson"],
        "r": ["examplejson"],
        "y": ["examplejson"],
    }
    assert given == {"r": {"other": "lost alone"}}  # the vetoes it was given stay as they were


def test_second_chance_needs_a_kept_candidate_that_holds_every_node_of_the_plan():
    plan = plan_of_two_pieces()
    lost = Measurement("other_0", "other", ["a", "r", "y"], 1.5, 1.0, False)
    part = Measurement("other_1", "other", ["a", "r"], 0.5, 1.0, True)
    verdicts = {"1": lost, "2": part}
    assert whole.second_chance(plan, verdicts, LOSS, {"examplejson": {}}, {}) is None


def test_draws_random_finds_random_ops_in_subgraphs_too():
    model = make_model([node("Relu", ["x"], "y")], {"x": [2]}, ["y"])
    assert not whole.draws_random(model.graph)
    drawn = onnx.helper.make_tensor_value_info("u", onnx.TensorProto.FLOAT, [2])
    branch = onnx.helper.make_graph([node("RandomUniform", [], "u", shape=[2])], "b", [], [drawn])
    model.graph.node.append(node("If", ["c"], "v", then_branch=branch, else_branch=branch))
    assert whole.draws_random(model.graph)
