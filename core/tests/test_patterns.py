"""byoc.patterns on small graphs, and pattern tables as backends write them (TVM's two-tuples)."""

from __future__ import annotations

import numpy as np
import pytest
from byoc.errors import PluginError
from byoc.graph import Graph
from byoc.patterns import const, match_at, op, wildcard
from byoc.plugins import _pattern_entry
from byoc.testing.build import make_model, node


def graph():
    """x -> Exp(e) -> Relu(r1); x, y -> Add(a) -> Relu(r2); Mul(x, 2)(m) -> Relu(r3)."""
    model = make_model(
        [
            node("Exp", ["x"], "e"),
            node("Relu", ["e"], "r1"),
            node("Add", ["x", "y"], "a"),
            node("Relu", ["a"], "r2"),
            node("Mul", ["two", "x"], "m"),
            node("Relu", ["m"], "r3"),
        ],
        {"x": [3], "y": [3]},
        ["r1", "r2", "r3"],
        constants={"two": np.float32(2.0)},
    )
    return Graph(model)


def matches(pattern, g, root):
    return [[g.nodes[i].name for i in m.members] for m in match_at(pattern, g, g.index[root])]


def test_a_wildcard_op_matches_any_op_type_with_matching_inputs():
    g = graph()
    unary_relu = op("Relu", wildcard()(wildcard()))
    assert matches(unary_relu, g, "r1") == [["e", "r1"]]
    assert matches(unary_relu, g, "r2") == []  # Add has two inputs
    assert matches(op("Relu", wildcard()(wildcard(), wildcard())), g, "r2") == [["a", "r2"]]
    assert matches(op("Relu", wildcard()()), g, "r3") == [["m", "r3"]]  # any inputs


def test_named_wildcards_commutative_ops_and_alternatives():
    g = graph()
    x = wildcard("x")
    assert matches(op("Mul", x, const()), g, "m") == []
    assert matches(op("Mul", x, const(), commutative=True), g, "m") == [["m"]]
    assert matches(op("Add", x, x), g, "a") == []  # a named wildcard is one value
    either = op("Relu", op("Exp", wildcard())) | op("Relu", op("Add", x, wildcard()))
    assert matches(either, g, "r1") == [["e", "r1"]]
    assert matches(either, g, "r2") == [["a", "r2"]]


def test_bindings_name_the_values_a_check_reads():
    g = graph()
    pattern = op("Relu", op("Mul", const("k"), wildcard("v"), commutative=True).named("scaled"))
    (match,) = match_at(pattern, g, g.index["r3"], "b.scaled_relu")
    assert match.bound == {"k": "two", "v": "x", "scaled": "m"}
    assert float(match.constant("k")) == 2.0
    assert match.constant("v") is None  # a graph input, not a constant
    assert match.producer("scaled").name == "m"
    with pytest.raises(KeyError, match=r"'b\.scaled_relu' binds no 'bias'"):
        match.constant("bias")
    with pytest.raises(KeyError, match="'v' is not produced inside the match"):
        match.producer("v")


def test_a_named_root_binds_the_root_output():
    g = graph()
    (match,) = match_at(op("Exp", wildcard()).named("e_out"), g, g.index["e"])
    assert match.bound == {"e_out": "e"}
    assert list(match_at(op("Exp", wildcard()).named("e_out"), g, g.index["r1"])) == []


def test_a_name_used_twice_is_one_value():
    """x * sigmoid(x) matches; x * sigmoid(y) does not, in either operand order."""
    model = make_model(
        [
            node("Exp", ["x"], "ex"),
            node("Sigmoid", ["ex"], "s1"),
            node("Mul", ["ex", "s1"], "same"),
            node("Sigmoid", ["y"], "s2"),
            node("Mul", ["s2", "ex"], "other"),
        ],
        {"x": [3], "y": [3]},
        ["same", "other"],
    )
    g = Graph(model)
    swish = op(
        "Mul", op("Exp", wildcard()).named("x"), op("Sigmoid", wildcard("x")), commutative=True
    )
    (match,) = match_at(swish, g, g.index["same"])
    assert match.bound == {"x": "ex"}
    assert [g.nodes[i].name for i in match.members] == ["ex", "s1", "same"]
    assert list(match_at(swish, g, g.index["other"])) == []


def test_trailing_absent_optional_inputs_are_ignored():
    model = make_model(
        [node("Clip", ["x", "", ""], "c1"), node("Clip", ["x", "lo", "hi"], "c2")],
        {"x": [3]},
        ["c1", "c2"],
        constants={"lo": np.float32(0), "hi": np.float32(6)},
    )
    g = Graph(model)
    bare = op("Clip", wildcard())
    bounded = op("Clip", wildcard(), const("lo"), const("hi"))
    assert matches(bare, g, "c1") == [["c1"]]
    assert matches(bounded, g, "c1") == []
    assert matches(bounded, g, "c2") == [["c2"]]
    assert matches(bare, g, "c2") == []  # present inputs must all be matched
    assert matches(op("Clip"), g, "c2") == [["c2"]]  # no inputs given: any inputs


def test_a_constant_with_a_value_matches_that_number_only():
    g = graph()
    assert matches(op("Mul", const(value=2.0), wildcard()), g, "m") == [["m"]]
    assert matches(op("Mul", const(value=2.0 + 1e-5), wildcard()), g, "m") == []
    assert matches(op("Mul", const(value=3.0), wildcard()), g, "m") == []


def test_alternatives_yield_every_match_in_order():
    g = graph()
    x = wildcard("x")
    both = op("Relu", op("Add", x, wildcard())) | op("Relu", op("Add", wildcard(), x))
    assert [m.bound for m in match_at(both, g, g.index["r2"])] == [{"x": "x"}, {"x": "y"}]


def test_a_named_wildcard_is_not_an_op():
    with pytest.raises(TypeError, match="named wildcard stands for a value"):
        wildcard("x")(wildcard())


def test_pattern_tables_take_tvm_two_tuples_and_refuse_anything_else():
    pattern = op("Relu", wildcard())
    assert _pattern_entry("b", ("b.relu", pattern)) == ("b.relu", pattern, None)
    check = lambda match: None  # noqa: E731
    assert _pattern_entry("b", ("b.relu", pattern, check)) == ("b.relu", pattern, check)
    for bad in [("b.relu",), ("b.relu", "Relu"), ["b.relu", pattern], ("b.relu", pattern, 3)]:
        with pytest.raises(PluginError, match="backend 'b': a pattern table entry must be"):
            _pattern_entry("b", bad)


@pytest.mark.parametrize(
    "pattern",
    [
        op("Relu", wildcard()(wildcard())),
        op("Relu", wildcard()(wildcard(), wildcard())),
        op("Add", op("MatMul", wildcard(), const()), const(), commutative=True),
        op("Mul", op("Exp", wildcard()).named("x"), op("Sigmoid", wildcard("x"))),
        op("Div", op("Relu", wildcard()), const("six", 6.0)),
    ],
)
def test_the_conformance_suite_builds_a_model_each_pattern_matches(pattern):
    from byoc.testing.ops import pattern_model

    model, _ = pattern_model(pattern)
    g = Graph(model)
    assert len(list(match_at(pattern, g, len(g.nodes) - 1))) == 1
