"""Running a compiled model: the guard of finite-only backends, values that may overflow, the -inf
of attention masks and integers past a backend's limit (``Backend.finite_only``,
``max_magnitude``, ``softmax_masks``, ``int_limit``)."""

from __future__ import annotations

import math
from typing import Any

import byoc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from byoc import plugins
from byoc.testing.build import make_model, node


class Counting:
    """A finite-only backend claiming Add, Softmax and Relu, run by onnxruntime: it counts the
    runs the guard lets through to it."""

    def __init__(self, softmax_masks: bool, **declared: Any) -> None:
        self.softmax_masks, self.declared, self.runs = softmax_masks, declared, 0

    @byoc.hookimpl
    def byoc_register_backends(self, register: Any) -> None:
        register(
            byoc.BackendSpec(
                "counting", finite_only=True, softmax_masks=self.softmax_masks, **self.declared
            )
        )

    @byoc.hookimpl
    def byoc_supported_ops(self, backend: str, config: Any) -> dict[str, Any]:
        return {"Add": None, "Softmax": None, "Relu": None, "Reshape": None}

    @byoc.hookimpl
    def byoc_codegen(self, backend: str, partition: Any, config: Any) -> onnx.ModelProto:
        return partition.model

    @byoc.hookimpl
    def byoc_create_runtime(self, backend: str, artifact: onnx.ModelProto, config: Any) -> Any:
        session = ort.InferenceSession(artifact.SerializeToString())
        names = [i.name for i in session.get_inputs()]
        plugin = self

        class Runtime:
            def run(self, args: list[np.ndarray]) -> list[np.ndarray]:
                plugin.runs += 1
                return session.run(None, dict(zip(names, args, strict=True)))

        return Runtime()


MASKED = [node("Add", ["x", "m"], "s"), node("Softmax", ["s"], "y", axis=-1)]
RESHAPED = [node("Reshape", ["m", "shape"], "m2"), node("Add", ["x", "m2"], "s")]
MODELS = {
    "Add into Softmax": (MASKED, ["y"]),
    "through a Reshape": ([*RESHAPED, node("Softmax", ["s"], "y", axis=-1)], ["y"]),
    "through a Reshape into a Relu": ([*RESHAPED, node("Relu", ["s"], "y")], ["y"]),
    "the mask read by a Relu too": ([*MASKED, node("Relu", ["m"], "r")], ["y", "r"]),
    "the sum an output too": (MASKED, ["y", "s"]),
    "the sum read by a Relu": ([node("Add", ["x", "m"], "s"), node("Relu", ["s"], "y")], ["y"]),
}


def run_on(model: str, backend: Counting, mask: np.ndarray, nonfinite: str = "onnxruntime") -> int:
    """How many times ``backend`` ran the model's one partition on x and ``mask`` (checked
    against onnxruntime, NaN where it has NaN)."""
    nodes, outputs = MODELS[model]
    shape = {"shape": np.array([2, 4], np.int64)}
    dtype = mask.dtype.type
    onnx_model = make_model(nodes, {"x": (dtype, [2, 4]), "m": (dtype, [2, 4])}, outputs, shape)
    reg = plugins.Registry(only=[])
    reg.add(backend, "byoc-counting")
    config = {"backends": ["counting"], "fallback": {"nonfinite_inputs": nonfinite}}
    compiled = byoc.compile(onnx_model, config, registry=reg)
    assert [s.unit.backend for s in compiled.steps] == ["counting"]
    feeds = {"x": np.arange(8, dtype=mask.dtype).reshape(2, 4), "m": mask}
    want = ort.InferenceSession(onnx_model.SerializeToString()).run(outputs, feeds)
    before = backend.runs
    got = compiled.run(feeds)
    for name, value in zip(outputs, want, strict=True):
        np.testing.assert_allclose(got[name], value, 1e-6, 1e-6)
    return backend.runs - before


def mask(*values: float, dtype: type = np.float32) -> np.ndarray:
    """Row 0 masks its last key with values[0]; row 1 holds values[1:] (then 0)."""
    m = np.zeros((2, 4), dtype)
    m[0, 3] = values[0]
    m[1, : len(values) - 1] = values[1:]
    return m


def test_a_mask_of_minus_inf_into_softmax_stays_on_the_backend() -> None:
    """-inf in an input that only an Add into a Softmax reads (a padded, or a fully masked row:
    NaN as in onnxruntime) runs on a ``softmax_masks`` backend; NaN or +inf there, or -inf in
    any other input, run on onnxruntime."""
    backend = Counting(softmax_masks=True)
    inf = np.inf
    assert run_on("Add into Softmax", backend, mask(-inf)) == 1
    assert run_on("Add into Softmax", backend, mask(-inf, -inf, -inf, -inf, -inf)) == 1
    assert run_on("Add into Softmax", backend, mask(-inf, np.nan)) == 0
    assert run_on("Add into Softmax", backend, mask(-inf, inf)) == 0


def test_a_mask_may_be_moved_on_its_way() -> None:
    """Ops that only move values (Reshape, Unsqueeze, Expand, ...) between the input and the
    Add leave -inf as it is."""
    assert run_on("through a Reshape", Counting(softmax_masks=True), mask(-np.inf)) == 1


@pytest.mark.parametrize(
    "model", [m for m in MODELS if m not in ("Add into Softmax", "through a Reshape")]
)
def test_minus_inf_anywhere_else_runs_on_onnxruntime(model: str) -> None:
    """A mask another op reads too, or a sum that is more than a Softmax's input, may carry
    -inf where the backend is not exact: the partition runs on onnxruntime."""
    assert run_on(model, Counting(softmax_masks=True), mask(-np.inf)) == 0
    assert run_on(model, Counting(softmax_masks=True), mask(0.0)) == 1


def test_without_softmax_masks_minus_inf_runs_on_onnxruntime() -> None:
    assert run_on("Add into Softmax", Counting(softmax_masks=False), mask(-np.inf)) == 0


BIG = float(np.finfo(np.float32).max)  # 3.4e38: the dynamo exporter's masks hold -BIG


@pytest.mark.parametrize(
    "values, runs",
    [
        ((1e14,), 1),
        ((-1e9, -1e4), 1),
        ((9e14, 9e14, -9e14, 9e14, 9e14), 1),  # their squares sum past 1e30, each below 1e15
        ((2e15,), 0),
        ((1e30,), 0),
        ((-BIG,), 0),
        ((3e38, 3e38), 0),
    ],
)
def test_values_that_may_overflow_inside_run_on_onnxruntime(
    values: tuple[float, ...], runs: int
) -> None:
    """A finite input of magnitude ``max_magnitude`` (1e15 by default) or more may overflow to
    inf inside the partition, where the backend's kernels differ from onnxruntime's: the
    partition runs on onnxruntime, as for NaN; smaller values, large masks among them, stay."""
    assert run_on("the sum read by a Relu", Counting(softmax_masks=True), mask(*values)) == runs


def test_an_attention_mask_may_be_hugely_negative_not_hugely_positive() -> None:
    """In an attention mask (``softmax_masks``) only the maximum is bounded: -3.4e38 stays on
    the backend like -inf; a positive value past the bound does not."""
    backend = Counting(softmax_masks=True)
    assert run_on("Add into Softmax", backend, mask(-BIG, -BIG, -BIG, -BIG, -BIG)) == 1
    assert run_on("Add into Softmax", backend, mask(-1e9, 3e38)) == 0


def test_a_backend_may_declare_another_bound() -> None:
    """``max_magnitude = math.inf`` bounds nothing but NaN and +-inf; a lower bound sends
    smaller values to onnxruntime; ``nonfinite_inputs = "backend"`` checks nothing."""
    assert (
        run_on("the sum read by a Relu", Counting(False, max_magnitude=math.inf), mask(3e38)) == 1
    )
    assert (
        run_on("the sum read by a Relu", Counting(False, max_magnitude=math.inf), mask(np.inf)) == 0
    )
    assert run_on("the sum read by a Relu", Counting(False, max_magnitude=100.0), mask(99.0)) == 1
    assert run_on("the sum read by a Relu", Counting(False, max_magnitude=100.0), mask(-100.0)) == 0
    assert run_on("the sum read by a Relu", Counting(False), mask(3e38), "backend") == 1


def test_float16_inputs_are_checked_without_warnings(recwarn: pytest.WarningsRecorder) -> None:
    """The bound, 1e15, is past float16's range: such inputs are checked for NaN and +-inf
    alone, and comparing them with it does not warn of an overflow."""
    backend = Counting(softmax_masks=True)
    assert run_on("the sum read by a Relu", backend, mask(6e4, dtype=np.float16)) == 1
    assert run_on("the sum read by a Relu", backend, mask(np.inf, dtype=np.float16)) == 0
    assert run_on("Add into Softmax", backend, mask(-np.inf, dtype=np.float16)) == 1
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


class Narrow(Counting):
    """Exact on integers of magnitude below 2**24 only (``int_limit``), like OpenVINO's CPU
    plugin; claims Add and Cast."""

    def __init__(self) -> None:
        super().__init__(softmax_masks=False)

    @byoc.hookimpl
    def byoc_register_backends(self, register: Any) -> None:
        register(byoc.BackendSpec("counting", int_limit=1 << 24))

    @byoc.hookimpl
    def byoc_supported_ops(self, backend: str, config: Any) -> dict[str, Any]:
        return {"Add": None, "Cast": None}


@pytest.mark.parametrize(
    "ids, runs",
    [([1, 2, (1 << 24) - 2], 1), ([1, -(1 << 24), 3], 0), ([1 << 40, 0, 0], 0)],
)
def test_integers_past_a_backends_int_limit_run_on_onnxruntime(ids: list[int], runs: int) -> None:
    """A model's int64 input reaches the backend only while every value is below its
    ``int_limit`` (whatever ``[fallback] nonfinite_inputs`` says); else onnxruntime runs the
    partition, exactly."""
    model = make_model(
        [node("Add", ["ids", "one"], "s"), node("Cast", ["s"], "y", to=onnx.TensorProto.FLOAT)],
        {"ids": (np.int64, [3])},
        ["y"],
        {"one": np.array(1, np.int64)},
    )
    backend = Narrow()
    reg = plugins.Registry(only=[])
    reg.add(backend, "byoc-counting")
    config = {"backends": ["counting"], "fallback": {"nonfinite_inputs": "backend"}}
    compiled = byoc.compile(model, config, registry=reg)
    feeds = {"ids": np.array(ids, np.int64)}
    (want,) = ort.InferenceSession(model.SerializeToString()).run(["y"], feeds)
    before = backend.runs
    np.testing.assert_array_equal(compiled.run(feeds)["y"], want)
    assert backend.runs - before == runs
