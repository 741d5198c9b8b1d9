"""How byoc decides that an output is close to onnxruntime's (compare, and placement's check)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from byoc.graph import Graph
from byoc.testing.build import make_model, node
from byoc.tolerance import compare_arrays


def test_special_values_match_themselves_at_any_tolerance():
    """Silently: inf - inf is NaN on the way, which numpy would warn of (an attention mask's
    -inf printed 'invalid value encountered in subtract' at every placement check)."""
    want = np.array([np.nan, np.inf, -np.inf, -0.0, 1.0], np.float32)
    got = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compare_arrays("y", got, want, rtol=0.0, atol=0.0).passed


def test_a_number_where_onnxruntime_has_nan_or_inf_is_a_mismatch():
    for special in (np.nan, np.inf, -np.inf):
        want = np.array([special, 1.0], np.float32)
        got = np.array([0.0, 1.0], np.float32)
        assert not compare_arrays("y", got, want, rtol=1e-4, atol=1e-4).passed


def test_differences_within_atol_plus_rtol_pass_and_beyond_fail():
    want = np.array([100.0, 0.0], np.float32)
    assert compare_arrays("y", want + np.float32([0.01, 0.0]), want, 1e-4, 1e-5).passed
    assert not compare_arrays("y", want + np.float32([0.02, 0.0]), want, 1e-4, 1e-5).passed


def _requantized(op: str) -> onnx.ModelProto:
    """x quantized (step 0.07), ``op`` of it quantized again (0.07), concatenated with x's
    integers and quantized at half that step (0.035): seed 103 of the quantized random graphs."""
    between = {
        "Resize": node("Resize", ["xd", "", "sizes_scales"], "r", mode="linear"),
        "Resize cubic": node("Resize", ["xd", "", "sizes_scales"], "r", mode="cubic"),
        "MaxPool": node("MaxPool", ["xd"], "r", kernel_shape=[1, 1]),
        "Conv": node("Conv", ["xd", "w"], "r"),
        "Sigmoid": node("Sigmoid", ["xd"], "r"),
    }[op]
    nodes = [
        node("QuantizeLinear", ["x", "s", "z"], "xq"),
        node("DequantizeLinear", ["xq", "s", "z"], "xd"),
        between,
        node("QuantizeLinear", ["r", "s", "z"], "rq"),
        node("DequantizeLinear", ["rq", "s", "z"], "rd"),
        node("Concat", ["rd", "rd"], "c", axis=1),
        node("QuantizeLinear", ["c", "half", "z"], "cq"),
        node("DequantizeLinear", ["cq", "half", "z"], "cd"),
        node("Transpose", ["cd"], "y", perm=[0, 1, 3, 2]),
    ]
    constants = {
        "s": np.float32(0.07),
        "half": np.float32(0.035),
        "z": np.uint8(128),
        "sizes_scales": np.float32([1, 1, 1, 1]),
        "w": np.ones((2, 2, 1, 1), np.float32),
    }
    return make_model(nodes, {"x": [1, 2, 4, 4]}, ["y"], constants)


@pytest.mark.parametrize(
    ("op", "quantum"),
    [
        ("Resize", 0.035 + 0.07 + 0.07),  # ties at all three QuantizeLinears add up
        ("MaxPool", 0.035 + 0.07 + 0.07),
        ("Resize cubic", 0.035 + 0.07),  # cubic weights leave [0, 1]: x's tie stops there
        ("Conv", 0.035 + 0.07),  # a product scales x's tie: the spread speaks for it
        ("Sigmoid", 0.035 + 0.07),
    ],
)
def test_rounding_ties_carry_through_ops_that_do_not_amplify(op: str, quantum: float) -> None:
    """The quantum allowed on an output a DequantizeLinear writes (through a Transpose): its
    own step, plus what a tie at each QuantizeLinear before it moves a value through ops that
    copy, take a maximum of or average their inputs (a Concat requantized at half the step of
    a Resize's: two of its steps)."""
    assert Graph(_requantized(op)).quantum("y") == pytest.approx(quantum)
    assert Graph(_requantized(op)).quantum("c") == 0.0  # no DequantizeLinear writes it


def test_a_long_chain_before_a_quantization_is_not_a_recursion_error() -> None:
    """3000 Relus between two QuantizeLinears: the quantum stops looking back (the output's
    own step), where Python's recursion would have ended with an error."""
    nodes = [node("Relu", ["x" if i == 0 else f"r{i - 1}"], f"r{i}") for i in range(3000)]
    nodes += [
        node("QuantizeLinear", ["r2999", "s", "z"], "q"),
        node("DequantizeLinear", ["q", "s", "z"], "y"),
    ]
    constants = {"s": np.float32(0.05), "z": np.uint8(128)}
    model = make_model(nodes, {"x": [1, 4]}, ["y"], constants)
    assert Graph(model).quantum("y") == pytest.approx(0.05)
