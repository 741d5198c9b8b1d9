"""[compile] precision = "bf16": a partition computes in reduced precision only where the CPU
has it and its outputs stay within precision_tolerance of onnxruntime's fp32 ones; and
[backend.<name>] int8 = "own": a partition quantizing with its backend's own arithmetic is kept
within the same tolerance, else its quantizers alone go back to onnxruntime."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc import host, placement, plugins
from byoc.explain import explain_text
from byoc.testing.build import make_model, node
from byoc.tolerance import precision_error

X = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)


class Lossy:
    """A backend claiming Neg and Relu whose "rough" mode (its bf16) is ``error`` off."""

    def __init__(self, error: float, offers: bool = True) -> None:
        self.error, self.offers = error, offers

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        register(
            byoc.BackendSpec(
                "lossy",
                options={"mode": byoc.Option(str, "exact", "exact or rough", ("exact", "rough"))},
                precisions={"bf16": {"mode": "rough"}} if self.offers else {},
            )
        )

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        return {"Neg": None, "Relu": None}

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        return config["mode"].encode()

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        scale = 1 + self.error if bytes(artifact) == b"rough" else 1.0
        return Runtime(scale)

    @byoc.hookimpl
    def byoc_serialize(self, backend, artifact):
        return bytes(artifact)

    @byoc.hookimpl
    def byoc_deserialize(self, backend, data, trust_native):
        return bytes(data)


class Runtime:
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def run(self, inputs):
        return [(np.maximum(-inputs[0], 0) * self.scale).astype(np.float32)]


@pytest.fixture
def install(monkeypatch, tmp_path):
    monkeypatch.setattr(placement.cache, "cache_root", lambda: tmp_path / "placement")

    def install(error: float, bf16_cpu: bool = True, offers: bool = True) -> None:
        reg = plugins.Registry(only=[])
        reg._add(Lossy(error, offers), "byoc-lossy-test", "0.0")
        monkeypatch.setattr(plugins, "_cache", {k: reg for k in (None, *plugins._cache)})
        flags = ("avx2", "avx512_bf16") if bf16_cpu else ("avx2",)
        cpu = host.Cpu("x86_64", "test cpu", flags, 2)
        monkeypatch.setattr(host, "cpu", lambda: cpu)

    return install


def model():
    return make_model(
        [node("Neg", ["x"], ["n"]), node("Relu", ["n"], ["r"]), node("Sigmoid", ["r"], ["y"])],
        {"x": [2, 4]},
        ["y"],
    )


CONFIG = {
    "backends": ["lossy"],
    "compile": {"placement": "static", "precision": "bf16", "precision_tolerance": 0.01},
}


def test_a_partition_within_the_tolerance_runs_in_bf16_and_a_saved_file_keeps_it(install, tmp_path):
    install(error=0.004)
    compiled = byoc.compile(model(), CONFIG)
    (step, _) = compiled.steps
    assert step.unit.options == {"mode": "rough"}
    (m,) = compiled.plan.placement.measurements
    assert (m.precision, m.precision_note) == ("bf16", "in bf16: error 0.004 <= 0.01")
    assert "in bf16: error 0.004 <= 0.01" in explain_text(compiled.plan)
    want = 1 / (1 + np.exp(-np.maximum(-X, 0) * 1.004))
    np.testing.assert_allclose(compiled.run({"x": X})["y"], want, rtol=1e-6)
    loaded = byoc.load(compiled.save(tmp_path / "m.byoc"))
    assert loaded.steps[0].unit.options == {"mode": "rough"}
    np.testing.assert_allclose(loaded.run({"x": X})["y"], want, rtol=1e-6)


def test_a_partition_beyond_the_tolerance_runs_in_fp32_and_says_why(install):
    install(error=0.05)
    compiled = byoc.compile(model(), CONFIG)
    assert compiled.steps[0].unit.backend == "lossy" and compiled.steps[0].unit.options == {}
    (m,) = compiled.plan.placement.measurements
    assert m.precision == "fp32"
    assert m.precision_note == ("in fp32: bf16 error 0.05 > [compile] precision_tolerance 0.01")
    want = 1 / (1 + np.exp(-np.maximum(-X, 0)))
    np.testing.assert_allclose(compiled.run({"x": X})["y"], want, rtol=1e-6)


def test_a_cpu_without_bf16_says_so_and_computes_in_fp32(install):
    install(error=0.004, bf16_cpu=False)
    with pytest.warns(UserWarning, match="this CPU has neither AVX512_BF16 nor AMX"):
        compiled = byoc.compile(model(), CONFIG)
    assert compiled.steps[0].unit.options == {}


def test_a_backend_without_bf16_on_this_cpu_says_so_and_computes_in_fp32(install):
    install(error=0.004, offers=False)  # as dnnl where oneDNN has no bf16 path (no AMX)
    compiled = byoc.compile(model(), CONFIG)
    assert compiled.steps[0].unit.backend == "lossy" and compiled.steps[0].unit.options == {}
    (m,) = compiled.plan.placement.measurements
    assert (m.precision, m.precision_note) == ("fp32", "in fp32: lossy offers no bf16 on this CPU")
    assert "in fp32: lossy offers no bf16 on this CPU" in explain_text(compiled.plan)
    want = 1 / (1 + np.exp(-np.maximum(-X, 0)))
    np.testing.assert_allclose(compiled.run({"x": X})["y"], want, rtol=1e-6)


def test_precision_error_compares_to_the_output_range():
    want = [np.array([0.0, 10.0], np.float32), np.array([1, 2])]
    assert precision_error([want[0] + 0.05, want[1]], want) == pytest.approx(0.005, rel=1e-4)
    assert precision_error([want[0], np.array([1, 3])], want) == np.inf
    nan = [np.array([np.nan, 1.0], np.float32)]
    assert precision_error([np.array([0.0, 1.0], np.float32)], nan) == np.inf


# -- [backend.<name>] int8 = "own" -----------------------------------------------------------


class OwnInt8(Lossy):
    """A backend claiming Relu, and with ``int8 = "own"`` QuantizeLinear and DequantizeLinear
    too, whose partitions holding a QuantizeLinear come out ``error`` off onnxruntime's (its own
    rounding), the others exact."""

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        register(byoc.BackendSpec("own"))

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        own = config["int8"] == "own"
        return {"Relu": None, **({"QuantizeLinear": None, "DequantizeLinear": None} if own else {})}

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        return partition.model.SerializeToString()

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        import onnx
        import onnxruntime as ort

        model = onnx.load_from_string(bytes(artifact))
        rounds = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
        session = ort.InferenceSession(bytes(artifact), providers=["CPUExecutionProvider"])
        return Rounding(session, 1 + self.error if rounds else 1.0)


class Rounding:
    """onnxruntime's outputs of the partition times ``scale``."""

    def __init__(self, session, scale: float) -> None:
        self.session, self.scale = session, scale

    def run(self, inputs):
        names = [i.name for i in self.session.get_inputs()]
        feeds = dict(zip(names, inputs, strict=True))
        return [o * self.scale for o in self.session.run(None, feeds)]


def qdq_model():
    return make_model(
        [
            node("Relu", ["x"], ["r"]),
            node("QuantizeLinear", ["r", "s", "z"], ["q"]),
            node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ],
        {"x": [2, 4]},
        ["y"],
        constants={"s": np.float32(0.01), "z": np.uint8(0)},
    )


@pytest.fixture
def install_own(monkeypatch, tmp_path):
    monkeypatch.setattr(placement.cache, "cache_root", lambda: tmp_path / "placement")

    def install(error: float) -> None:
        reg = plugins.Registry(only=[])
        reg._add(OwnInt8(error), "byoc-own-test", "0.0")
        monkeypatch.setattr(plugins, "_cache", {k: reg for k in (None, *plugins._cache)})

    return install


def own_config(**table: str) -> dict:
    return {
        "backends": ["own"],
        "backend": {"own": table},
        "compile": {"placement": "static", "precision_tolerance": 0.01},
    }


def test_int8_exact_is_the_default_and_claims_no_quantizer(install_own):
    install_own(error=0.004)
    plan = byoc.compile(qdq_model(), own_config(), inputs={"x": X}).plan
    assert [p.nodes for p in plan.partitions] == [["r"]]
    assert plan.placement.measurements == []  # nothing to note: no guard, no error


def test_own_int8_within_the_tolerance_is_kept_and_shows_its_error(install_own):
    install_own(error=0.004)
    compiled = byoc.compile(qdq_model(), own_config(int8="own"), inputs={"x": X})
    (part,) = compiled.plan.partitions
    assert part.nodes == ["r", "q", "y"]
    (m,) = compiled.plan.placement.measurements
    assert (m.precision, m.precision_note) == ("int8", "own int8 arithmetic: error 0.004 <= 0.01")
    assert "own int8 arithmetic: error 0.004 <= 0.01" in explain_text(compiled.plan)
    want = np.round(np.maximum(X, 0) / 0.01) * np.float32(0.01)
    np.testing.assert_allclose(compiled.run({"x": X})["y"], want * 1.004, rtol=1e-6)


def test_own_int8_beyond_the_tolerance_sends_back_its_quantizer_alone(install_own):
    install_own(error=0.05)
    with pytest.warns(UserWarning, match=r"error 0.05 > \[compile\] precision_tolerance 0.01"):
        compiled = byoc.compile(qdq_model(), own_config(int8="own"), inputs={"x": X})
    plan = compiled.plan
    owners = {n: d.backend for n, d in plan.decisions.items() if not d.constant}
    assert owners == {"r": "own", "q": "onnxruntime", "y": "own"}
    assert "precision_tolerance 0.01" in dict(plan.decisions["q"].refusals)["own"]
    want = np.round(np.maximum(X, 0) / 0.01) * np.float32(0.01)
    np.testing.assert_allclose(compiled.run({"x": X})["y"], want, rtol=1e-6)
