"""Each partitioning pass on its own: a PassState built by hand in, a new one out."""

from __future__ import annotations

import numpy as np
import pytest
from byoc.errors import ModelError
from byoc.graph import Graph
from byoc.passes import CompositeMatch, PassError, PassState, run_pass
from byoc.passes.annotate import Candidate, annotate_target
from byoc.passes.merge_composite import merge_composite
from byoc.passes.merge_regions import merge_compiler_regions
from byoc.passes.prune import PruneRule, prune_regions
from byoc.patterns import const, op, wildcard
from byoc.testing.build import make_model, node


def chain() -> Graph:
    """x -> MatMul(w) 'mm' -> Add(b) 'bias' -> Relu 'r' -> Exp 'e' -> Neg 'n'."""
    model = make_model(
        [
            node("MatMul", ["x", "w"], "mm"),
            node("Add", ["mm", "b"], "bias"),
            node("Relu", ["bias"], "r"),
            node("Exp", ["r"], "e"),
            node("Neg", ["e"], "n"),
        ],
        {"x": [2, 4]},
        ["n"],
        constants={"w": np.ones((4, 4), np.float32), "b": np.ones(4, np.float32)},
    )
    return Graph(model)


def names(state: PassState, labels: tuple[str | None, ...] | None = None) -> dict[str, str | None]:
    g = state.graph
    return {g.nodes[i].name: lab for i, lab in enumerate(labels or state.labels)}


def ok(*args: object) -> None:
    return None


DENSE = op("Relu", op("Add", op("MatMul", wildcard(), const()), const("b"), commutative=True))


def test_merge_composite_labels_members_and_leaves_its_input_alone():
    before = PassState.start(chain())
    after = merge_composite(before, [("A", [("A.dense", DENSE, None)])], ok)
    assert before.labels == (None,) * 5  # the state given is not changed
    assert names(after) == {"mm": "A", "bias": "A", "r": "A", "e": None, "n": None}
    (match,) = after.matches
    assert (match.backend, match.name, match.members) == ("A", "A.dense", (0, 1, 2))
    assert match.bound == {"b": "b"}


def test_merge_composite_first_backend_wins_and_refusals_name_the_pattern():
    state = PassState.start(chain())
    refuse = lambda match: "no thanks"  # noqa: E731
    tables = [("A", [("A.dense", DENSE, refuse)]), ("B", [("B.dense", DENSE, None)])]
    after = merge_composite(state, tables, ok)
    assert names(after)["r"] == "B"
    assert after.refusals[2] == (("A", "pattern A.dense: no thanks"),)
    vetoed = merge_composite(state, [("B", [("B.dense", DENSE, None)])], lambda b, i: "vetoed")
    assert vetoed.matches == ()
    assert vetoed.refusals[2] == (("B", "pattern B.dense: vetoed"),)


def test_merge_composite_keeps_matches_made_before():
    state = PassState.start(chain())
    first = merge_composite(state, [("A", [("A.relu", op("Relu", wildcard()), None)])], ok)
    second = merge_composite(first, [("B", [("B.dense", DENSE, None)])], ok)
    assert [m.name for m in second.matches] == ["A.relu"]
    assert names(second) == {"mm": None, "bias": None, "r": "A", "e": None, "n": None}


def test_annotate_target_offers_nodes_in_backend_order_and_records_why_not():
    state = PassState.start(chain())
    a = Candidate("A", {"Exp": None, "Neg": lambda view: "Neg is too small"})
    b = Candidate("B", {"Neg": None, "Relu": None}, exclude_ops=["Relu"])
    after = annotate_target(state, [a, b], vetoed={4: {"B": "measured slower"}})
    assert names(after) == {"mm": None, "bias": None, "r": None, "e": "A", "n": None}
    assert after.refusals[2] == (
        ("A", "Relu is not supported"),
        ("B", "Relu is in [backend.B] exclude_ops"),
    )
    assert after.refusals[4] == (("A", "Neg is too small"), ("B", "measured slower"))
    assert state.refusals == {}


def test_annotate_target_leaves_labelled_nodes_and_reports_a_check_that_raises():
    state = PassState(chain(), ("Z", None, None, None, None))
    boom = Candidate("A", {"MatMul": lambda v: 1 / 0, "Add": None, "Relu": lambda v: 1 / 0})
    after = annotate_target(state, [boom])
    assert names(after)["mm"] == "Z" and names(after)["bias"] == "A"
    assert 0 not in after.refusals  # a labelled node is not offered: its check never ran
    assert names(after)["r"] is None
    assert after.refusals[2] == (("A", "check raised ZeroDivisionError: division by zero"),)


def test_merge_compiler_regions_groups_a_label_and_starts_from_composites():
    graph = chain()
    state = PassState(
        graph,
        ("A", "A", "B", "A", "A"),
        matches=(CompositeMatch("A", "A.mm_bias", (0, 1)),),
    )
    after = merge_compiler_regions(state)
    assert after.regions == ((0, 1), (2,), (3, 4))  # Relu on B splits the A nodes
    assert after.labels == state.labels


def test_prune_regions_unlabels_small_regions_and_says_why():
    graph = chain()
    state = PassState(graph, ("A", "A", None, "B", "B"), regions=((0, 1), (3, 4)))
    rules = {"A": PruneRule(min_nodes=3), "B": PruneRule(check=lambda nodes: None)}
    after = prune_regions(state, rules)
    assert after.regions == ((3, 4),)
    assert names(after) == {"mm": None, "bias": None, "r": None, "e": "B", "n": "B"}
    assert after.refusals[0] == (
        ("A", "pruned: its partition has 2 node(s), fewer than min_partition_nodes = 3"),
    )
    by_check = prune_regions(state, {"A": PruneRule(), "B": PruneRule(check=lambda n: "dull")})
    assert by_check.regions == ((0, 1),) and by_check.refusals[3] == (("B", "pruned: dull"),)


def test_a_region_reading_only_constants_is_pruned_whatever_the_rule():
    """A DequantizeLinear of a weight whose reader another backend (or onnxruntime) took is a
    region of its own that computes a constant: it goes back to onnxruntime, which folds it
    once (dnnl could not even build it; random quantized graphs found it). A random draw
    reads nothing either, and stays."""
    model = make_model(
        [
            node("DequantizeLinear", ["wq", "scale", "zero"], "w"),
            node("Add", ["x", "w"], "y"),
            node("RandomUniform", [], "u", shape=[4]),
            node("Add", ["y", "u"], "z"),
        ],
        {"x": [2, 4]},
        ["z"],
        constants={
            "wq": np.arange(4, dtype=np.int8),
            "scale": np.float32(0.5),
            "zero": np.int8(0),
        },
    )
    graph = Graph(model)
    state = PassState(graph, ("A", None, "A", None), regions=((0,), (2,)))
    after = prune_regions(state, {"A": PruneRule()})
    assert after.regions == ((2,),)
    assert after.refusals[0] == (
        ("A", "pruned: it computes only constants, which onnxruntime folds once"),
    )


def test_an_internal_failure_names_the_pass_and_byoc_errors_pass_through():
    def broken(state: PassState) -> PassState:
        raise KeyError("x")

    with pytest.raises(PassError, match=r"internal error in pass MergeComposite: KeyError: 'x'"):
        run_pass("MergeComposite", broken, PassState.start(chain()))

    def refusing(state: PassState) -> PassState:
        raise ModelError("the model is bad")

    with pytest.raises(ModelError, match="the model is bad"):
        run_pass("AnnotateTarget", refusing, PassState.start(chain()))


def test_an_untyped_partition_input_says_where_shape_inference_stops():
    """Input shapes the model cannot run at (a TorchScript export's Reshape baked for others)
    leave values untyped; the error names the node where strict inference stops."""
    from byoc.passes.partition import _value_info
    from onnx import TensorProto, helper

    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, d])
        for n, d in (("x", 4), ("y", 3))
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["x", "y"], ["c"], axis=1),
            helper.make_node("Abs", ["c"], ["z"]),
        ],
        "g",
        inputs,
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError) as caught:
        _value_info({}, "c", "examplejson_0", required=True, src=model)
    assert "stops at (op_type:Concat" in str(caught.value)
    assert "may not run at these input shapes" in str(caught.value)
