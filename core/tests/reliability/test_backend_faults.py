"""A backend failing at run time: a BackendError naming partition and backend, or, with
``[fallback] on_backend_error = "onnxruntime"``, that partition rerun on onnxruntime."""

from __future__ import annotations

import threading

import byoc
import numpy as np
import pytest
from byoc import plugins
from byoc.testing.build import make_model, node

X = np.array([-1.0, 0.5, 2.0], np.float32)


class Runtime:
    """Neg then Relu, or a fault chosen by the test."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.calls = 0
        self.lock = threading.Lock()

    def run(self, inputs):
        with self.lock:
            self.calls += 1
        out = np.maximum(-inputs[0], 0)
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

    def __init__(self, fault: str) -> None:
        self.runtime = Runtime(fault)

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        register("faulty", description="fails on purpose")

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

    def install(fault: str) -> Faulty:
        reg = plugins.Registry()
        plugin = Faulty(fault)
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
    compiled = byoc.compile(model(), {"backends": ["faulty"]})
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
    cfg = {"backends": ["faulty"], "fallback": {"on_backend_error": "onnxruntime"}}
    compiled = byoc.compile(model(), cfg)
    with pytest.warns(UserWarning, match="partition faulty_0 .backend faulty. failed"):
        out = compiled.run({"x": X})
    np.testing.assert_allclose(out["e"], WANT, rtol=1e-6)
    assert plugin.runtime.calls == 1


def test_the_healthy_plugin_runs_and_fallback_is_not_used(faulty):
    plugin = faulty("ok")
    cfg = {"backends": ["faulty"], "fallback": {"on_backend_error": "onnxruntime"}}
    compiled = byoc.compile(model(), cfg)
    np.testing.assert_allclose(compiled.run({"x": X})["e"], WANT, rtol=1e-6)
    assert plugin.runtime.calls == 1
    assert compiled.steps[0]._fallback is None


def test_reruns_from_many_threads_build_one_onnxruntime_session(faulty):
    faulty("raise")
    cfg = {"backends": ["faulty"], "fallback": {"on_backend_error": "onnxruntime"}}
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
    cfg = {"backends": ["faulty"], "fallback": {"on_backend_error": "onnxruntime"}}
    compiled = byoc.compile(model(), cfg)
    with pytest.raises(byoc.ArtifactError, match="cannot serialize"):
        compiled.save(tmp_path / "m.byoc")  # the test plugin has no byoc_serialize hook
