"""How byoc decides that an output is close to onnxruntime's (compare, and placement's check)."""

from __future__ import annotations

import warnings

import numpy as np
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
