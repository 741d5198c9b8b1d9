"""How byoc decides that an output is close to onnxruntime's (compare, and placement's check)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from byoc.graph import Graph
from byoc.testing.build import make_model, node
from byoc.tolerance import compare_arrays, float32_outputs, within_spread


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


def test_the_integers_a_quantize_linear_writes_may_move_a_step_at_a_tie() -> None:
    """At a partition's end between a QuantizeLinear and its DequantizeLinear (or at the
    model's), the integers move by one step where a tie rounds the other way, plus the quantum
    the QuantizeLinear's input carries, in its steps: a mnasnet QDQ model cut there was
    returned to onnxruntime for a one-step difference, where OpenVINO ran it in 0.53 of its
    time. A DynamicQuantizeLinear's integers likewise (its scale and zero point not)."""
    graph = Graph(_requantized("MaxPool"))
    assert graph.quantum("xq") == pytest.approx(1.0)
    assert graph.quantum("rq") == pytest.approx(1 + 0.07 / 0.07)  # xq's tie, carried
    assert graph.quantum("cq") == pytest.approx(1 + (0.07 + 0.07) / 0.035)
    dynamic = make_model(
        [node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])], {"x": [4]}, ["q", "s", "z"]
    )
    assert [Graph(dynamic).quantum(n) for n in ("q", "s", "z")] == [1.0, 0.0, 0.0]
    got = within_spread("q", np.uint8([3, 5]), np.uint8([4, 5]), [], 1e-4, 1e-4, 1.0)
    assert got.passed
    assert not within_spread("q", np.uint8([2, 5]), np.uint8([4, 5]), [], 1e-4, 1e-4, 1.0).passed


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


def test_a_float16_output_is_compared_to_one_ulp_at_least():
    """rtol 1e-4 is below one ulp of float16 (2^-10 relative): a value one ulp off passes, two
    ulps off fail; float32 keeps the rtol it is given."""
    want = np.array([1.0, 1000.0], np.float16)
    one_ulp = np.nextafter(want, np.float16(np.inf))
    assert compare_arrays("y", one_ulp, want, rtol=1e-4, atol=0.0).passed
    assert not compare_arrays("y", np.nextafter(one_ulp, np.inf), want, 1e-4, 0.0).passed
    wide = want.astype(np.float32)
    assert not compare_arrays("y", one_ulp.astype(np.float32), wide, 1e-4, 0.0).passed


def test_a_float16_models_float32_twin_computes_in_float32_and_rounds_when_asked():
    """x (float32) -> Cast to float16 -> Mul by a float16 constant -> Add -> y (float16): the
    twin casts to float32 instead and keeps the constant's value; rounded, each value a node
    writes is rounded to float16 again, as ONNX has it. A float32 model has no twin."""
    nodes = [
        node("Cast", ["x"], "h", to=onnx.TensorProto.FLOAT16),
        node("Mul", ["h", "k"], "m"),
        node("Add", ["m", "h"], "y"),
    ]
    k = np.array(1.1, np.float16)
    model = make_model(nodes, {"x": [1, 64]}, ["y"], {"k": k})
    x = np.random.default_rng(0).uniform(1, 2, (1, 64)).astype(np.float32)
    exact = x * np.float32(k) + x
    (wide,) = float32_outputs(model, {"x": x}, ["y"], rounded=False)
    assert wide.dtype == np.float32 and np.allclose(wide, exact, rtol=1e-6)
    (rounded,) = float32_outputs(model, {"x": x}, ["y"], rounded=True)
    h = x.astype(np.float16).astype(np.float32)
    m = (h * np.float32(k)).astype(np.float16).astype(np.float32)
    assert np.array_equal(rounded, (m + h).astype(np.float16).astype(np.float32))
    float_model = make_model([node("Relu", ["x"], "y")], {"x": [1, 64]}, ["y"])
    assert float32_outputs(float_model, {"x": x}, ["y"], rounded=True) is None


def test_sequences_and_maps_are_compared_item_by_item():
    """Ragged sequences (numpy cannot make one array of them) and ZipMap's maps: equal items
    pass; an item beyond tolerance, another length or other keys fail, and say which."""
    seq = [np.ones((2, 1), np.float32), np.ones((2, 3), np.float32)]
    assert compare_arrays("s", [a.copy() for a in seq], seq, 1e-4, 1e-4).passed
    off = [seq[0], seq[1] + 0.5]
    report = compare_arrays("s", off, seq, 1e-4, 1e-4)
    assert not report.passed and report.max_abs == 0.5 and report.shape == (2,)
    assert compare_arrays("s", seq[:1], seq, 1e-4, 1e-4).note == "1 items != 2"
    maps = [{7: 0.25, 8: 0.75}]
    assert compare_arrays("p", [{7: 0.25, 8: 0.75}], maps, 1e-4, 1e-4).passed
    assert not compare_arrays("p", [{7: 0.25, 9: 0.75}], maps, 1e-4, 1e-4).passed
    assert compare_arrays("p", [{7: 0.25, 9: 0.75}], maps, 1e-4, 1e-4).note == "item 0: keys differ"
