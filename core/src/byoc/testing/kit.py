"""Checks a backend author runs in their own tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from byoc.compare import compare, random_inputs
from byoc.pipeline import ConfigLike, ModelLike

__all__ = ["assert_matches_onnxruntime", "random_inputs"]


def assert_matches_onnxruntime(
    model: ModelLike,
    config: ConfigLike = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> Any:
    """Compile ``model`` with ``config``, run it and onnxruntime, and fail with the per-output
    table unless every output is within tolerance. Returns the report (its ``plan`` too)."""
    report = compare(model, config, inputs, rtol=rtol, atol=atol)
    if not report.passed:
        raise AssertionError("byoc does not match onnxruntime:\n" + report.table())
    return report
