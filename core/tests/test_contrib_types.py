"""Values whose type only onnxruntime knows (outputs of contrib ops) can cross between units."""

from __future__ import annotations

from byoc.testing import assert_matches_onnxruntime
from onnx import TensorProto, helper


def test_a_contrib_op_output_read_by_a_partition():
    # ONNX shape inference does not know com.microsoft's Gelu: the type of 'g' comes from
    # onnxruntime, so Abs can be claimed and 'g' passed into its partition.
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="r"),
            helper.make_node("Gelu", ["r"], ["g"], name="g", domain="com.microsoft"),
            helper.make_node("Abs", ["g"], ["y"], name="y"),
        ],
        "contrib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=10,
    )
    report = assert_matches_onnxruntime(model, {"backends": ["examplejson"]})
    parts = [(p.nodes, p.inputs) for p in report.plan.partitions]
    assert parts == [(["r"], ["x"]), (["y"], ["g"])]


def test_shapes_downstream_of_a_shape_preserving_contrib_op_are_probed():
    # ONNX inference leaves the shape after Gelu (com.microsoft) unknown, and a Shape ->
    # Reshape chain after it stays symbolic; Gelu's output shape follows from its input's,
    # so the probe records the shapes onnxruntime observes and the Reshape's output is static.
    shape = helper.make_tensor("two", TensorProto.INT64, [1], [2])
    graph = helper.make_graph(
        [
            helper.make_node("Gelu", ["x"], ["g"], name="g", domain="com.microsoft"),
            helper.make_node("Shape", ["g"], ["s"], name="s"),
            helper.make_node("Slice", ["s", "zero", "two"], ["s2"], name="s2"),
            helper.make_node("Reshape", ["g", "s2"], ["r"], name="r"),
            helper.make_node("Abs", ["r"], ["y"], name="y"),
        ],
        "contrib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "m"])],
        [helper.make_tensor("zero", TensorProto.INT64, [1], [0]), shape],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=10,
    )
    report = assert_matches_onnxruntime(model, {"backends": ["examplejson"]})
    graph_types = {v.name: v for v in report.plan.model.graph.value_info}
    dims = [d.dim_value for d in graph_types["r"].type.tensor_type.shape.dim]
    assert dims == [2, 3]
