"""Shape computations fold into constants once [shapes] fixes every dim they read."""

from __future__ import annotations

import byoc
import numpy as np
import onnx
import pytest
from byoc.graph import Graph
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from onnx import numpy_helper

CFG = {"backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Relu", "Reshape"]}}}
SHAPE_CHAIN = ["shape", "dim0", "dim0_1d", "new_shape"]


def with_dim0(nodes, constants):
    """x: [N, 4] -> r = Relu(x), dim0 = Shape(r)[0], then ``nodes``; output y."""
    head = [
        node("Relu", ["x"], "r"),
        node("Shape", ["r"], "shape"),
        node("Gather", ["shape", "zero"], "dim0", axis=0),
    ]
    const = {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64), **constants}
    return make_model(head + nodes, {"x": ["N", 4]}, ["y"], constants=const)


def model():
    # y = Relu(x).reshape(N, 2, 2): the new shape is computed from x's shape, as exporters write
    return with_dim0(
        [
            node("Unsqueeze", ["dim0", "axes"], "dim0_1d"),
            node("Concat", ["dim0_1d", "two_two"], "new_shape", axis=0),
            node("Reshape", ["r", "new_shape"], "y"),
        ],
        {"two_two": np.array([2, 2], np.int64)},
    )


def test_shape_chain_is_constant_once_shapes_are_fixed():
    plan = byoc.partition(model(), {**CFG, "shapes": {"x": [3, 4]}})
    graph = Graph(plan.model)
    assert graph.constant("new_shape").tolist() == [3, 2, 2]
    for name in SHAPE_CHAIN:
        assert "a constant" in str(plan.decisions[name].refusals)
    # the Reshape's shape is now a constant, so the backend claims it with the Relu; the folded
    # nodes are bound inside that partition and onnxruntime runs nothing
    assert [(p.backend, p.nodes) for p in plan.partitions] == [
        ("examplejson", ["r", *SHAPE_CHAIN, "y"])
    ]
    assert plan.segments == []


def test_symbolic_dims_keep_the_shape_chain():
    plan = byoc.partition(model(), CFG)
    graph = Graph(plan.model)
    assert graph.constant("new_shape") is None
    assert plan.decisions["shape"].backend == "onnxruntime"


def all_but_last_row():
    # y = Relu(x)[: N - 1]: run with a baked N on other shapes, it would be silently wrong
    return with_dim0(
        [
            node("Sub", ["dim0", "one"], "end"),
            node("Unsqueeze", ["end", "axes"], "ends"),
            node("Slice", ["r", "starts", "ends", "axes"], "y"),
        ],
        {"one": np.array(1, np.int64), "starts": np.array([0], np.int64)},
    )


@pytest.mark.parametrize("backends", [["examplejson"], []], ids=["partitioned", "one-session"])
def test_folded_model_runs_other_shapes_on_a_variant(backends):
    cfg = {**CFG, "backends": backends, "shapes": {"x": [3, 4]}}
    x3 = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    assert_matches_onnxruntime(model(), cfg, {"x": x3})
    x5 = np.arange(20, dtype=np.float32).reshape(5, 4) - 9
    compiled = byoc.compile(model(), cfg)
    np.testing.assert_array_equal(compiled.run({"x": x5})["y"], np.maximum(x5, 0).reshape(5, 2, 2))
    compiled = byoc.compile(all_but_last_row(), cfg)
    assert Graph(compiled.plan.model).constant("ends").tolist() == [2]
    for x in (x5, x3, x5):
        np.testing.assert_array_equal(compiled.run({"x": x})["y"], np.maximum(x, 0)[:-1])


def test_an_attention_scale_computed_from_a_dim_folds():
    """sqrt(1 / sqrt(D)) from the last dim of x, as the TorchScript exporter writes
    scaled_dot_product_attention: a constant, equal to what onnxruntime computes."""
    m = with_dim0(
        [
            node("Cast", ["dim0"], "d", to=onnx.TensorProto.FLOAT),
            node("Sqrt", ["d"], "root"),
            node("Reciprocal", ["root"], "inverse"),
            node("Sqrt", ["inverse"], "half"),
            node("Mul", ["r", "half"], "y"),
        ],
        {},
    )
    plan = byoc.partition(m, {**CFG, "shapes": {"x": [3, 4]}})
    assert Graph(plan.model).constant("half") == np.sqrt(np.float32(1) / np.sqrt(np.float32(3)))
    assert_matches_onnxruntime(
        m, {**CFG, "shapes": {"x": [3, 4]}}, {"x": np.ones((3, 4), np.float32)}
    )


def test_large_constant_arithmetic_is_not_folded():
    big = np.ones(1 << 13, np.float32)
    m = make_model(
        [node("Add", ["a", "b"], "c"), node("Mul", ["x", "c"], "y")],
        {"x": [1 << 13]},
        ["y"],
        constants={"a": big, "b": big},
    )
    graph = Graph(byoc.partition(m, {"backends": []}).model)
    assert not graph.is_constant("c")


def embeddings():
    """BERT's embeddings as exporters write them: word rows at the input ids, position rows at
    a slice of a constant buffer, token-type rows at zeros shaped like the ids."""
    rng = np.random.default_rng(0)
    nodes = [
        node("Shape", ["ids"], "ids_shape"),
        node("Gather", ["ids_shape", "one"], "seq", axis=0),
        node("Unsqueeze", ["seq", "axes"], "end"),
        node("Slice", ["positions", "zero1", "end", "axes1"], "pos_ids"),
        node(
            "ConstantOfShape",
            ["ids_shape"],
            "type_ids",
            value=numpy_helper.from_array(np.zeros(1, np.int64)),
        ),
        node("Gather", ["words", "ids"], "w"),
        node("Gather", ["pos_table", "pos_ids"], "p"),
        node("Gather", ["type_table", "type_ids"], "t"),
        node("Add", ["w", "p"], "wp"),
        node("Add", ["wp", "t"], "y"),
    ]
    consts = {
        "one": np.array(1, np.int64),
        "axes": np.array([0], np.int64),
        "axes1": np.array([1], np.int64),
        "zero1": np.array([0], np.int64),
        "positions": np.arange(64, dtype=np.int64)[None],
        "words": rng.standard_normal((100, 8)).astype(np.float32),
        "pos_table": rng.standard_normal((64, 8)).astype(np.float32),
        "type_table": rng.standard_normal((2, 8)).astype(np.float32),
    }
    return make_model(nodes, {"ids": (np.int64, [1, "T"])}, ["y"], constants=consts)


def test_position_and_token_type_rows_of_constant_tables_fold():
    cfg = {**CFG, "backends": [], "shapes": {"ids": [1, 6]}}
    graph = Graph(byoc.partition(embeddings(), cfg).model)
    assert graph.constant("type_ids").tolist() == [[0] * 6]
    tables = {n: graph.constant(n) for n in ("pos_table", "type_table")}
    np.testing.assert_array_equal(graph.constant("p"), tables["pos_table"][None, :6])
    np.testing.assert_array_equal(graph.constant("t"), tables["type_table"][[[0] * 6]])
    assert not graph.is_constant("w")
    ids = np.array([[5, 0, 99, 3, 3, 42]], np.int64)
    adds = {**cfg, "backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Add"]}}}
    report = assert_matches_onnxruntime(embeddings(), adds, {"ids": ids})  # reads p and t
    assert [p.backend for p in report.plan.partitions] == ["examplejson"]


def test_a_gather_of_too_many_constant_rows_is_not_folded():
    m = make_model(
        [node("Gather", ["table", "at"], "rows"), node("Mul", ["x", "rows"], "y")],
        {"x": [4096, 512]},
        ["y"],
        constants={"table": np.ones((8, 512), np.float32), "at": np.zeros(4096, np.int64)},
    )
    assert not Graph(byoc.partition(m, {"backends": []}).model).is_constant("rows")


def test_large_constants_only_rearranged_fold():
    """Concat, Slice, Transpose and Tile of constants fold at any size up to 2^24 elements,
    as onnxruntime folds them (Paddle builds an LSTM's weights so); arithmetic does not."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 512)).astype(np.float32) for _ in range(2))
    nodes = [
        node("Concat", ["a", "b"], "ab", axis=0),
        node("Slice", ["ab", "start", "end", "axis0"], "window"),
        node("Transpose", ["window"], "t", perm=[1, 0]),
        node("Tile", ["zero", "reps"], "zeros"),
        node("Add", ["t", "zeros"], "sum"),
        node("MatMul", ["x", "sum"], "y"),
    ]
    consts = {
        "a": a,
        "b": b,
        "start": np.array([32], np.int64),
        "end": np.array([96], np.int64),
        "axis0": np.array([0], np.int64),
        "zero": np.zeros((1, 1), np.float32),
        "reps": np.array([512, 64], np.int64),
    }
    m = make_model(nodes, {"x": [2, 512]}, ["y"], constants=consts)
    graph = Graph(byoc.partition(m, {"backends": []}).model)
    np.testing.assert_array_equal(graph.constant("t"), np.concatenate([a, b])[32:96].T)
    np.testing.assert_array_equal(graph.constant("zeros"), np.zeros((512, 64), np.float32))
    assert not graph.is_constant("sum")  # 32768 elements of arithmetic: not folded
