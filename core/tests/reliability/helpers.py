"""A model every backend claims part of, and which backends are available, for the tests."""

from __future__ import annotations

import byoc
import numpy as np
import onnx
from byoc.plugins import registry
from byoc.testing.build import make_model, node

FALLBACK = "onnxruntime"


def mixed_model(n: int | str = 3, matmul: bool = True) -> onnx.ModelProto:
    """[MatMul,] Add, Relu, Mul, Tanh on x[n, 4]: every backend claims some of it (ccompiler
    only without the MatMul: its cost model keeps small partitions that cut a segment off)."""
    w = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    first = node("MatMul", ["x", "w"], "mm") if matmul else node("Sub", ["x", "x"], "mm")
    return make_model(
        [
            first,
            node("Add", ["mm", "b"], "a"),
            node("Relu", ["a"], "r"),
            node("Mul", ["r", "x"], "m"),
            node("Tanh", ["m"], "t"),
        ],
        {"x": [n, 4]},
        ["t", "a"],
        {"w": w, "b": np.full(4, 0.25, np.float32)},
    )


def available_backends() -> list[str]:
    """Installed, available backend names (claimable ones), in default priority order."""
    return [b.name for b in registry().claimable() if b.unavailable_reason is None]


def config_for(backend: str) -> dict[str, object]:
    """A config that uses only ``backend`` (``onnxruntime``: no backend at all)."""
    return {"backends": [] if backend == FALLBACK else [backend]}


def compile_on(backend: str, model: onnx.ModelProto | None = None) -> byoc.CompiledModel:
    """Compile ``model`` (default ``mixed_model()``) with only ``backend``; it must claim some."""
    if model is None:
        model = mixed_model(matmul=backend != "ccompiler")
    compiled = byoc.compile(model, config_for(backend))
    used = {s.unit.backend for s in compiled.steps}
    assert backend in used, f"{backend} claimed nothing of the test model: {compiled.plan.table()}"
    return compiled
