"""Checks a backend author runs in their own tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from byoc.compare import compare, random_inputs
from byoc.config import load_config
from byoc.context import ConfigLike
from byoc.pipeline import ModelLike

__all__ = ["assert_matches_onnxruntime", "random_inputs"]


def assert_matches_onnxruntime(
    model: ModelLike,
    config: ConfigLike = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> Any:
    """Compile ``model`` with ``config``, run it and onnxruntime, and fail with the per-output
    table unless every output is within tolerance. Returns the report (its ``plan`` too).

    Placement is static: every partition the backends claim runs on them, so their kernels
    are what is checked (measured placement could return a partition to onnxruntime).
    """
    cfg = load_config(config)
    cfg = dataclasses.replace(cfg, compile={**cfg.compile, "placement": "static"})
    report = compare(model, cfg, inputs, rtol=rtol, atol=atol)
    if not report.passed:
        raise AssertionError("byoc does not match onnxruntime:\n" + report.table())
    return report
