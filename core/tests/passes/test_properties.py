"""Property: any DAG with any claims gives an acyclic plan that covers every node once and
computes what onnxruntime computes."""

from __future__ import annotations

import byoc
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

UNARY = ["Relu", "Abs", "Tanh", "Neg", "Sigmoid"]
BINARY = ["Add", "Sub", "Mul", "Max"]
SHAPE = [4, 5]


@st.composite
def dags(draw):
    n = draw(st.integers(2, 14))
    values = ["x", "y"]
    nodes = []
    for i in range(n):
        op = draw(st.sampled_from(UNARY + BINARY))
        arity = 1 if op in UNARY else 2
        ins = [draw(st.sampled_from(values)) for _ in range(arity)]
        nodes.append(node(op, ins, f"v{i}", name=f"n{i}"))
        values.append(f"v{i}")
    used = {i for nd in nodes for i in nd.input}
    outputs = [v for v in values[2:] if v not in used]
    outputs += [v for v in values[2:] if v in used and draw(st.booleans()) and draw(st.booleans())]
    claims = draw(st.lists(st.sampled_from(UNARY + BINARY), unique=True))
    model = make_model(nodes, {"x": SHAPE, "y": SHAPE}, list(dict.fromkeys(outputs)))
    return model, claims


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(dags())
def test_random_dags_partition_acyclically_and_match_onnxruntime(case):
    model, claims = case
    config = {"backends": ["examplejson"], "backend": {"examplejson": {"ops": claims}}}
    plan = byoc.partition(model, config)
    names = [n.name for n in model.graph.node]
    listed = [n for p in plan.partitions for n in p.nodes] + plan.fallback_nodes
    assert sorted(listed) == sorted(names)  # every node exactly once
    for p in plan.partitions:
        ops = {nd.op_type for nd in model.graph.node if nd.name in p.nodes}
        assert ops <= set(claims)
    available = {"x", "y"}
    for unit in plan.schedule:  # the run order is topological: no cycle between units
        assert set(unit.inputs) <= available, unit.name
        produced = {o for nd in unit.model.graph.node for o in nd.output}
        assert not set(unit.inputs) & produced
        assert len(set(unit.outputs)) == len(unit.outputs)
        available |= set(unit.outputs)
    assert {o.name for o in model.graph.output} <= available
    assert_matches_onnxruntime(model, config)
