"""bench/roofline.py's FLOP counter, on small graphs whose FLOPs are counted here by hand."""

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
from roofline import achieved, count_flops


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=[numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_conv_relu_counts_multiply_adds_bias_and_one_per_element():
    # x [1, 3, 8, 8], w [4, 3, 3, 3], pads 1: y [1, 4, 8, 8] = 256 outputs, each 27 MACs
    model = _model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["y"], ["z"]),
        ],
        [("x", [1, 3, 8, 8])],
        ["z"],
        [("w", [4, 3, 3, 3]), ("b", [4])],
    )
    flops = count_flops(model)
    assert flops.dense == 2 * 256 * 27 + 256  # 14080
    assert flops.elementwise == 256
    assert flops.total == 14336
    assert flops.by_op == {"Conv": 14080, "Relu": 256}
    assert not flops.unknown


def test_grouped_and_depthwise_conv():
    # depthwise: 8 channels, 3x3, stride 2 on 16x16 -> [1, 8, 8, 8]: 512 outputs, 9 MACs each
    model = _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], group=8, strides=[2, 2], pads=[1, 1, 1, 1])],
        [("x", [1, 8, 16, 16])],
        ["y"],
        [("w", [8, 1, 3, 3])],
    )
    assert count_flops(model).total == 2 * 512 * 9


def test_batched_matmul_and_gemm():
    # a [2, 4, 16, 32] @ b [32, 8]: 2*4*16*8 = 1024 outputs, K = 32
    # Gemm transB: m [5, 6] x n [7, 6]^T + c: 35 outputs, K = 6, plus 35 bias adds
    model = _model(
        [
            helper.make_node("MatMul", ["a", "b"], ["y"]),
            helper.make_node("Gemm", ["m", "n", "c"], ["g"], transB=1),
        ],
        [("a", [2, 4, 16, 32]), ("m", [5, 6])],
        ["y", "g"],
        [("b", [32, 8]), ("n", [7, 6]), ("c", [7])],
    )
    flops = count_flops(model)
    assert flops.by_op == {"MatMul": 2 * 1024 * 32, "Gemm": 2 * 35 * 6 + 35}
    assert flops.elementwise == 0


def test_symbolic_input_dims_take_the_given_shapes():
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"]), helper.make_node("Add", ["y", "y"], ["z"])],
        "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", "seq", 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.zeros((64, 10), np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    unfixed = count_flops(model)
    assert unfixed.total == 0 and len(unfixed.unknown) == 2  # said, not guessed
    flops = count_flops(model, {"a": [1, 128, 64]})
    assert flops.dense == 2 * 128 * 10 * 64
    assert flops.elementwise == 128 * 10
    with pytest.raises(ValueError, match="no inputs"):
        count_flops(model, {"x": [1]})


def test_achieved_share_of_peak():
    gflops, share = achieved(2e9, 10.0, 400.0)  # 2 GFLOP in 10 ms: 200 GFLOP/s
    assert gflops == pytest.approx(200.0)
    assert share == pytest.approx(0.5)
