"""The partitioning cases of CASES.md (TVM's BYOC tests in ONNX), and more of the same kind.

Each case checks the plan a user sees (``byoc partition --json``) and that byoc's outputs equal
onnxruntime's. examplejson claims exactly the ops in ``claims``.
"""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import diamond, make_model, node
from onnx import helper

S = [10, 10]


def cfg(*claims: str) -> dict:
    return {"backends": ["examplejson"], "backend": {"examplejson": {"ops": list(claims)}}}


def plan_json(model, config) -> dict:
    plan = byoc.partition(model, config)
    assert_matches_onnxruntime(model, config)
    return plan.to_json()


def parts(plan: dict) -> list[tuple[list[str], list[str], list[str]]]:
    return [(p["nodes"], p["inputs"], p["outputs"]) for p in plan["partitions"]]


def test_diamond_does_not_make_a_cycle():
    plan = plan_json(diamond(), cfg("Abs", "Relu", "Add"))
    assert [p["nodes"] for p in plan["partitions"]] == [["abs1", "relu1"], ["add1"]]
    assert plan["fallback_nodes"] == ["tanh1"]
    assert [p["name"] for p in plan["partitions"]] == ["examplejson_0", "examplejson_1"]
    assert all(p["backend"] == "examplejson" for p in plan["partitions"])


def test_vetoes_keep_nodes_off_a_backend_and_unknown_names_are_an_error():
    plan = byoc.partition(
        diamond(), cfg("Abs", "Relu", "Add"), vetoes={"add1": {"examplejson": "no"}}
    )
    assert [p.nodes for p in plan.partitions] == [["abs1", "relu1"]]
    with pytest.raises(byoc.ConfigError, match=r"first 'add_1' \(near names: add1"):
        byoc.partition(diamond(), cfg("Abs"), vetoes={"add_1": {"examplejson": "no"}})


def _stops_spinning(compiled: byoc.CompiledModel) -> list[str]:
    """Each onnxruntime step's session.force_spinning_stop ("" when not set)."""
    found = []
    for step in compiled.steps:
        if step.unit.backend == "onnxruntime":
            opts = step.runtime.session.get_session_options()
            try:
                found.append(opts.get_session_config_entry("session.force_spinning_stop"))
            except RuntimeError:  # onnxruntime raises for a key never set
                found.append("")
    return found


def test_onnxruntime_segments_of_a_split_model_spin_inside_a_run_only():
    """Between a backend's partitions, onnxruntime's threads stop spinning when a run ends (so
    they never take the cores the backend needs) but still spin between the ops of a run (not
    spinning woke them at every op); a whole-model session spins as plain onnxruntime does,
    and the user's allow_spinning wins."""
    split = byoc.compile(
        diamond(), {**cfg("Abs", "Relu", "Add"), "compile": {"placement": "static"}}
    )
    assert _stops_spinning(split) == ["1"]
    whole = byoc.compile(diamond(), {**cfg(), "compile": {"placement": "static"}})
    assert _stops_spinning(whole) == [""]
    told = {**cfg("Abs", "Relu", "Add"), "fallback": {"allow_spinning": True}}
    assert _stops_spinning(
        byoc.compile(diamond(), {**told, "compile": {"placement": "static"}})
    ) == [""]


def test_rfc_example():
    ins = {f"in{i}": S for i in range(1, 11)}
    model = make_model(
        [
            node("Add", ["in1", "in2"], "n0"),
            node("Add", ["in3", "in4"], "n1"),
            node("Add", ["n0", "n1"], "n2"),
            node("Sub", ["in5", "in6"], "n3"),
            node("Sub", ["in7", "n3"], "n4"),
            node("Add", ["n2", "n4"], "n5"),
            node("Sub", ["in8", "n5"], "n6"),
            node("Add", ["in9", "n5"], "n7"),
            node("Add", ["n6", "n7"], "n8"),
            node("Add", ["in10", "n8"], "n9"),
        ],
        ins,
        ["n9"],
    )
    plan = plan_json(model, cfg("Add"))
    first, second = plan["partitions"]
    assert sorted(first["nodes"]) == ["n0", "n1", "n2", "n5", "n7"]
    assert sorted(first["outputs"]) == ["n5", "n7"]
    assert sorted(second["nodes"]) == ["n8", "n9"]
    assert sorted(plan["fallback_nodes"]) == ["n3", "n4", "n6"]


def test_multiple_use_of_a_fallback_value_is_one_input():
    model = make_model(
        [
            node("Add", ["x", "y"], "a"),
            node("Sub", ["a", "z"], "s"),
            node("Exp", ["a"], "l"),
            node("Mul", ["l", "s"], "m"),
        ],
        {"x": S, "y": S, "z": S},
        ["m"],
    )
    plan = plan_json(model, cfg("Sub", "Exp", "Mul"))
    assert parts(plan) == [(["s", "l", "m"], ["a", "z"], ["m"])]
    assert plan["fallback_nodes"] == ["a"]


def test_duplicate_outputs_become_one():
    model = make_model(
        [
            node("Abs", ["data"], "abs1"),
            node("Relu", ["abs1"], "r"),
            node("Tanh", ["abs1"], "t"),
            node("Exp", ["abs1"], "e"),
        ],
        {"data": S},
        ["r", "t", "e"],
    )
    plan = plan_json(model, cfg("Abs"))
    assert parts(plan) == [(["abs1"], ["data"], ["abs1"])]


def test_inputs_are_deduplicated():
    model = make_model(
        [
            node("Add", ["x", "x"], "add1"),
            node("Mul", ["y", "y"], "mul1"),
            node("Sub", ["mul1", "add1"], "sub1"),
        ],
        {"x": S, "y": S},
        ["sub1"],
    )
    plan = plan_json(model, cfg("Add", "Sub", "Mul"))
    assert len(plan["partitions"]) == 1
    assert sorted(plan["partitions"][0]["inputs"]) == ["x", "y"]
    assert plan["partitions"][0]["outputs"] == ["sub1"]


def test_default_ops_stay_on_the_fallback():
    model = make_model(
        [
            node("Add", ["x", "y"], "add1"),
            node("Sigmoid", ["add1"], "sig"),
            node("Exp", ["add1"], "exp"),
            node("Concat", ["sig", "exp"], "cat", axis=0),
        ],
        {"x": S, "y": S},
        ["cat"],
    )
    plan = plan_json(model, cfg("Add", "Sub", "Mul"))
    assert parts(plan) == [(["add1"], ["x", "y"], ["add1"])]
    assert plan["fallback_nodes"] == ["sig", "exp", "cat"]


def test_multiple_ends_give_one_output():
    model = make_model(
        [
            node("Relu", ["x"], "relu1"),
            node("Abs", ["relu1"], "a1"),
            node("Abs", ["relu1"], "a2"),
            node("Add", ["a1", "a2"], "out"),
        ],
        {"x": S},
        ["out"],
    )
    plan = plan_json(model, cfg("Relu"))
    assert parts(plan) == [(["relu1"], ["x"], ["relu1"])]


def test_nothing_claimed_runs_everything_on_onnxruntime():
    model = make_model(
        [node("Add", ["x", "y"], "a"), node("Tanh", ["a"], "t")], {"x": S, "y": S}, ["t"]
    )
    plan = plan_json(model, cfg())
    assert plan == {"partitions": [], "fallback_nodes": ["a", "t"]}
    assert len(byoc.partition(model, cfg()).segments) == 1


def test_unnamed_nodes_get_op_type_and_index():
    model = make_model(
        [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["b"])],
        {"x": S},
        ["b"],
    )
    plan = plan_json(model, cfg("Exp"))
    assert plan["partitions"][0]["nodes"] == ["Exp_1"]
    assert plan["fallback_nodes"] == ["Abs_0"]


def test_multi_output_op_inside_a_partition():
    model = make_model(
        [
            node("Split", ["x"], ["s0", "s1"], name="split", axis=0, num_outputs=2),
            node("Abs", ["s0"], "a"),
            node("Tanh", ["s1"], "t"),
            node("Add", ["a", "t"], "out"),
        ],
        {"x": S},
        ["out"],
        opset=18,
    )
    plan = plan_json(model, cfg("Split", "Abs", "Add"))
    assert parts(plan) == [(["split", "a"], ["x"], ["s1", "a"]), (["out"], ["a", "t"], ["out"])]


def test_constants_are_bound_inside():
    w = np.arange(100, dtype=np.float32).reshape(10, 10) / 100
    model = make_model(
        [
            node("Constant", [], "c", value=helper.make_tensor("c", 1, S, np.ones(100).tolist())),
            node("MatMul", ["x", "w"], "mm"),
            node("Add", ["mm", "c"], "out"),
        ],
        {"x": S},
        ["out"],
        constants={"w": w},
    )
    plan = plan_json(model, cfg("MatMul", "Add"))
    # Constant nodes are listed in the one partition that uses them, and are no input.
    assert parts(plan) == [(["c", "mm", "out"], ["x"], ["out"])]
    assert plan["fallback_nodes"] == []


def test_constant_used_by_fallback_and_partition_stays_on_fallback():
    model = make_model(
        [
            node("Constant", [], "c", value=helper.make_tensor("c", 1, S, np.ones(100).tolist())),
            node("Add", ["x", "c"], "a"),
            node("Mul", ["a", "c"], "m"),
        ],
        {"x": S},
        ["m"],
    )
    plan = plan_json(model, cfg("Add"))
    assert parts(plan) == [(["a"], ["x"], ["a"])]
    assert plan["fallback_nodes"] == ["c", "m"]


def test_int8_weights_behind_cast_count_as_constants():
    w8 = (np.arange(100) % 7 - 3).astype(np.int8).reshape(10, 10)
    model = make_model(
        [node("Cast", ["w8"], "w", to=1), node("MatMul", ["x", "w"], "out")],
        {"x": S},
        ["out"],
        constants={"w8": w8},
    )
    plan = plan_json(model, cfg("MatMul"))
    assert parts(plan) == [(["w", "out"], ["x"], ["out"])]


def test_siblings_that_share_an_input_are_merged():
    model = make_model(
        [
            node("Relu", ["x"], "r"),
            node("Abs", ["x"], "a"),
            node("Tanh", ["r"], "t1"),
            node("Tanh", ["a"], "t2"),
        ],
        {"x": S},
        ["t1", "t2"],
    )
    plan = plan_json(model, cfg("Relu", "Abs"))
    assert parts(plan) == [(["r", "a"], ["x"], ["r", "a"])]


def test_siblings_are_not_merged_through_a_cycle():
    # r -> t (fallback) -> m ; a is a sibling of r reading x, but m also reads a:
    # merging {r} with {m, a} would pass through t.
    model = make_model(
        [
            node("Relu", ["x"], "r"),
            node("Tanh", ["r"], "t"),
            node("Abs", ["x"], "a"),
            node("Mul", ["t", "a"], "m"),
        ],
        {"x": S},
        ["m"],
    )
    plan = byoc.partition(model, cfg("Relu", "Abs", "Mul"))
    for p in plan.partitions:
        assert not {"r", "m"} <= set(p.nodes)
    assert_matches_onnxruntime(model, cfg("Relu", "Abs", "Mul"))


def test_would_be_cycle_through_two_fallback_nodes():
    model = make_model(
        [
            node("Add", ["x", "y"], "a"),
            node("Tanh", ["a"], "t"),
            node("Sigmoid", ["t"], "s"),
            node("Add", ["s", "a"], "b"),
            node("Add", ["b", "y"], "c"),
        ],
        {"x": S, "y": S},
        ["c"],
    )
    plan = plan_json(model, cfg("Add"))
    assert parts(plan) == [(["a"], ["x", "y"], ["a"]), (["b", "c"], ["s", "a", "y"], ["c"])]


def _if_model(claims_outer: bool):
    then_g = helper.make_graph(
        [node("Add", ["h", "x"], "ty")], "then", [], [helper.make_tensor_value_info("ty", 1, S)]
    )
    else_g = helper.make_graph(
        [node("Sub", ["h", "x"], "ey")], "else", [], [helper.make_tensor_value_info("ey", 1, S)]
    )
    return make_model(
        [
            node("Abs", ["x"], "h"),
            node("ReduceSum", ["h"], "sum", keepdims=0),
            node("Greater", ["sum", "zero"], "cond"),
            node("If", ["cond"], "iff", then_branch=then_g, else_branch=else_g),
            node("Relu", ["iff"], "out"),
        ],
        {"x": S},
        ["out"],
        constants={"zero": np.array(0, np.float32)},
    )


def test_if_node_stays_and_its_outer_reads_are_wired():
    model = _if_model(True)
    plan = plan_json(model, cfg("Abs", "Relu", "Add", "Sub", "ReduceSum", "Greater"))
    assert "iff" in plan["fallback_nodes"]
    first = plan["partitions"][0]
    # the If body reads h from the outer scope: h must leave the partition
    assert "h" in first["outputs"]
    assert plan["partitions"][-1]["nodes"] == ["out"]


def test_unsupported_dtype_is_refused_with_a_reason():
    model = make_model(
        [node("Add", ["x", "y"], "z")], {"x": (np.complex64, S), "y": (np.complex64, S)}, ["z"]
    )
    plan = byoc.partition(model, cfg("Add"))
    assert plan.partitions == []
    assert any("complex64" in reason for _, reason in plan.decisions["z"].refusals)


def test_min_partition_nodes_prunes_small_partitions():
    model = make_model(
        [
            node("Abs", ["x"], "a"),
            node("Tanh", ["a"], "t"),
            node("Relu", ["t"], "r"),
            node("Exp", ["r"], "e"),
        ],
        {"x": S},
        ["e"],
    )
    config = cfg("Abs", "Relu", "Exp")
    config["backend"]["examplejson"]["min_partition_nodes"] = 2
    plan = plan_json(model, config)
    assert parts(plan) == [(["r", "e"], ["t"], ["e"])]
    assert any("pruned" in r for _, r in byoc.partition(model, config).decisions["a"].refusals)


def test_exclude_ops_and_disabled_backend():
    model = make_model([node("Abs", ["x"], "a"), node("Exp", ["a"], "e")], {"x": S}, ["e"])
    config = {"backends": ["examplejson"], "backend": {"examplejson": {"exclude_ops": ["Exp"]}}}
    assert parts(plan_json(model, config)) == [(["a"], ["x"], ["a"])]
    config = {"backends": ["examplejson"], "backend": {"examplejson": {"enabled": False}}}
    assert plan_json(model, config)["partitions"] == []


@pytest.mark.parametrize("shape", [[1], [3, 1, 10], [10]])
def test_broadcasting_inputs(shape):
    model = make_model(
        [node("Add", ["x", "y"], "a"), node("Mul", ["a", "y"], "m")],
        {"x": [3, 10, 10], "y": shape},
        ["m"],
    )
    assert len(plan_json(model, cfg("Add", "Mul"))["partitions"]) == 1
