"""A backend failing: at compile, its partition goes back to onnxruntime; at run time, a
BackendError naming partition and backend, or, with ``[fallback] on_backend_error =
"onnxruntime"``, that partition rerun on onnxruntime."""

from __future__ import annotations

import threading

import byoc
import numpy as np
import pytest
from byoc import plugins
from byoc.testing.build import make_model, node

X = np.array([-1.0, 0.5, 2.0], np.float32)


class Runtime:
    """Neg then Relu, or a fault chosen by the test from call ``fail_from`` on (the first
    call is compile's check run)."""

    def __init__(self, fault: str, fail_from: int) -> None:
        self.fault, self.fail_from = fault, fail_from
        self.calls = 0
        self.lock = threading.Lock()

    def run(self, inputs):
        with self.lock:
            self.calls += 1
        out = np.maximum(-inputs[0], 0)
        if self.calls < self.fail_from:
            return [out]
        if self.fault == "raise":
            raise RuntimeError("device lost")
        if self.fault == "none":
            return None
        if self.fault == "count":
            return [out, out]
        if self.fault == "list":
            return [out.tolist()]
        if self.fault == "byoc":
            raise byoc.InputError("kernel refused its input")
        return [out]


class Faulty:
    """A test-only plugin, registered on the registry's pluggy manager."""

    def __init__(self, fault: str, fail_from: int) -> None:
        self.runtime = Runtime(fault, fail_from)

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        register(byoc.BackendSpec("faulty", description="fails on purpose"))

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        return {"Neg": None, "Relu": None} if backend == "faulty" else None

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        return "neg-relu" if backend == "faulty" else None

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        return self.runtime if backend == "faulty" else None


@pytest.fixture
def faulty(monkeypatch):
    """A fresh registry with the faulty plugin; the process-wide one is restored after."""

    def install(fault: str, fail_from: int = 2) -> Faulty:
        reg = plugins.Registry()
        plugin = Faulty(fault, fail_from)
        reg._add(plugin, "byoc-faulty-test", "0.0")
        monkeypatch.setattr(plugins, "_cache", {k: reg for k in (None, *plugins._cache)})
        return plugin

    return install


def model():
    return make_model(
        [node("Neg", ["x"], "n"), node("Relu", ["n"], "r"), node("Exp", ["r"], "e")],
        {"x": [3]},
        ["e"],
    )


WANT = np.exp(np.maximum(-X, 0))
STATIC = {"backends": ["faulty"], "compile": {"placement": "static"}}


@pytest.mark.parametrize("mode", ["static", "measured"])
@pytest.mark.parametrize("fault", ["raise", "none", "count", "list", "byoc"])
def test_a_partition_failing_its_check_run_at_compile_ends_on_onnxruntime(faulty, fault, mode):
    plugin = faulty(fault, fail_from=1)
    config = {**STATIC, "compile": {"placement": mode}}
    with pytest.warns(UserWarning, match="faulty_0 .faulty. failed on the measurement inputs"):
        compiled = byoc.compile(model(), config)
    assert [s.unit.backend for s in compiled.steps] == ["onnxruntime"]
    np.testing.assert_allclose(compiled.run({"x": X})["e"], WANT, rtol=1e-6)
    assert plugin.runtime.calls == 1  # the check run; never again
    reasons = compiled.plan.decisions["n"].refusals
    assert any(b == "faulty" and "failed on the measurement inputs" in r for b, r in reasons)
    (failed,) = compiled.plan.to_json()["placement"]["measurements"]
    assert failed["verdict"] == "returned" and "failed on the measurement" in failed["failure"]


class Wrong:
    """A runtime that runs but computes Neg alone (Relu forgotten)."""

    def run(self, inputs):
        return [-inputs[0]]


def test_a_partition_whose_outputs_differ_from_onnxruntime_ends_on_onnxruntime(faulty):
    faulty("ok").runtime = Wrong()
    with pytest.warns(UserWarning, match="output 'r' differs from onnxruntime's"):
        compiled = byoc.compile(model(), {**STATIC, "compile": {"placement": "measured"}})
    assert [s.unit.backend for s in compiled.steps] == ["onnxruntime"]
    reasons = compiled.plan.decisions["r"].refusals
    assert any(b == "faulty" and "differs from onnxruntime's" in r for b, r in reasons)


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("raise", "failed at run time: RuntimeError: device lost"),
        ("none", "returned None, expected a list of 1 arrays"),
        ("count", "returned 2 values, expected a list of 1 arrays"),
        ("list", "returned a list for output 'r', not a numpy array"),
        ("byoc", "kernel refused its input"),
    ],
)
def test_a_fault_is_a_backend_error_naming_partition_and_backend(faulty, fault, words):
    faulty(fault)
    compiled = byoc.compile(model(), STATIC)
    assert compiled.steps[0].unit.name == "faulty_0"
    with pytest.raises(byoc.ByocError) as err:
        compiled.run({"x": X})
    assert words in str(err.value)
    if fault != "byoc":  # a plugin's own ByocError passes through as it is
        assert isinstance(err.value, byoc.BackendError)
        assert "partition faulty_0 (backend faulty)" in str(err.value)


@pytest.mark.parametrize("fault", ["raise", "none", "count", "list", "byoc"])
def test_on_backend_error_onnxruntime_reruns_the_partition(faulty, fault):
    plugin = faulty(fault)
    cfg = {**STATIC, "fallback": {"on_backend_error": "onnxruntime"}}
    compiled = byoc.compile(model(), cfg)
    with pytest.warns(UserWarning, match="partition faulty_0 .backend faulty. failed"):
        out = compiled.run({"x": X})
    np.testing.assert_allclose(out["e"], WANT, rtol=1e-6)
    assert plugin.runtime.calls == 2  # the check run at compile, then the run that failed


def test_the_healthy_plugin_runs_and_fallback_is_not_used(faulty):
    plugin = faulty("ok")
    cfg = {**STATIC, "fallback": {"on_backend_error": "onnxruntime"}}
    compiled = byoc.compile(model(), cfg)
    np.testing.assert_allclose(compiled.run({"x": X})["e"], WANT, rtol=1e-6)
    assert plugin.runtime.calls == 2  # the check run at compile, then this run
    assert compiled.steps[0]._fallback is None


def test_reruns_from_many_threads_build_one_onnxruntime_session(faulty):
    faulty("raise")
    cfg = {**STATIC, "fallback": {"on_backend_error": "onnxruntime"}}
    compiled = byoc.compile(model(), cfg)
    errors = []

    def work():
        try:
            for _ in range(20):
                np.testing.assert_allclose(compiled.run({"x": X})["e"], WANT, rtol=1e-6)
        except Exception as exc:
            errors.append(exc)

    with pytest.warns(UserWarning):
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert compiled.steps[0]._fallback is not None


def test_a_backend_without_a_serialize_hook_cannot_save(faulty, tmp_path):
    faulty("ok")
    cfg = {**STATIC, "fallback": {"on_backend_error": "onnxruntime"}}
    compiled = byoc.compile(model(), cfg)
    with pytest.raises(byoc.ArtifactError, match="cannot serialize"):
        compiled.save(tmp_path / "m.byoc")  # the test plugin has no byoc_serialize hook
