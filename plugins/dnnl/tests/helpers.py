"""Shared helpers of the dnnl tests: random weights, a conv stem, claim and kernel checks,
the dnnl step of a compiled model, graph surgery on artifacts, int8 CPU features, thread safety."""

from __future__ import annotations

import json
import struct
import threading

import byoc
import numpy as np
import onnx
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node

DNNL = {"backends": ["dnnl"]}


RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def conv_stem(c_out: int = 8) -> tuple[list, dict]:
    """x[1,3,10,12] -> Conv 3x3 -> 'h' [1,c_out,10,12]: gives each case a compute-heavy op."""
    return [node("Conv", ["x", "w0", "b0"], "h", pads=[1, 1, 1, 1])], {
        "w0": rand(c_out, 3, 3, 3),
        "b0": rand(c_out),
    }


def claimed(report: byoc.CompareReport, op_type: str) -> None:
    plan = report.plan
    owners = [
        d.backend
        for name, d in plan.decisions.items()
        if plan.model.graph.node[_index(plan, name)].op_type == op_type
    ]
    assert owners and all(o == "dnnl" for o in owners), (op_type, owners, plan.table())


def _index(plan: byoc.Plan, name: str) -> int:
    return next(i for i, n in enumerate(plan.model.graph.node) if n.name == name)


MODES = [{}, {"backend": {"dnnl": {"codegen": "c"}}}]


def dnnl_kinds(compiled: byoc.CompiledModel) -> list[str]:
    """The kinds of the kernels in the JSON graphs of the dnnl partitions."""
    return [
        n["kind"]
        for s in compiled.steps
        if s.unit.backend == "dnnl"
        for n in s.artifact.graph["nodes"]
        if n["op"] == "kernel"
    ]


def dnnl_impls(compiled: byoc.CompiledModel) -> list[str]:
    return [
        i
        for s in compiled.steps
        if s.unit.backend == "dnnl"
        for _, i in s.runtime.implementations()
    ]


def dnnl_step(compiled: byoc.CompiledModel):  # type: ignore[no-untyped-def]
    return next(s for s in compiled.steps if s.unit.backend == "dnnl")


def replace_graph(data: bytes, graph: dict) -> bytes:
    """A serialized dnnl artifact with its JSON graph replaced."""
    glen = struct.unpack("<Q", data[12:20])[0]
    text = json.dumps(graph).encode()
    return data[:12] + struct.pack("<Q", len(text)) + text + data[20 + glen :]


def quantized_mlp(  # type: ignore[no-untyped-def]
    tmp_path, per_channel: bool = False, weights: str = "QInt8", reduce_range: bool = False
) -> onnx.ModelProto:
    """A transformer's feed-forward block (dense, bias, GELU spelled with Erf, dense, bias,
    residual) quantized by ``onnxruntime.quantization.quantize_dynamic``: each dense layer is
    DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the scales -> Add of the bias."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    c = {"w1": rand(32, 48) / 4, "b1": rand(48), "w2": rand(48, 32) / 4, "b2": rand(32)}
    c |= {"sq": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    nodes = [
        node("MatMul", ["x", "w1"], "m1"),
        node("Add", ["m1", "b1"], "a1"),
        node("Div", ["a1", "sq"], "d"),
        node("Erf", ["d"], "e"),
        node("Add", ["e", "one"], "e1"),
        node("Mul", ["a1", "e1"], "g0"),
        node("Mul", ["g0", "half"], "g"),
        node("MatMul", ["g", "w2"], "m2"),
        node("Add", ["b2", "m2"], "a2"),
        node("Add", ["a2", "x"], "y"),
    ]
    onnx.save(make_model(nodes, {"x": [1, 8, 32]}, ["y"], c), tmp_path / "f.onnx")
    quantize_dynamic(
        tmp_path / "f.onnx",
        tmp_path / "q.onnx",
        per_channel=per_channel,
        reduce_range=reduce_range,
        weight_type=getattr(QuantType, weights),
    )
    return onnx.load(tmp_path / "q.onnx")


def int8_vnni() -> bool:
    """Whether oneDNN's int8 kernels use VNNI here (read from the kernel it picks for a dense
    layer of int8 weights, which it claims on any CPU). Without VNNI the int8 layers whose
    16-bit pair sums could saturate differently from onnxruntime's are refused."""
    global _VNNI
    if _VNNI is None:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            step = dnnl_step(byoc.compile(quantized_mlp(Path(tmp)), DNNL))
        impls = [i for _, i in step.runtime.implementations() if i.startswith("convolution")]
        _VNNI = all("vnni" in i or "amx" in i for i in impls)
    return _VNNI


_VNNI: bool | None = None


def assert_refused_without_vnni(model: onnx.ModelProto, inputs: dict) -> None:
    """On a CPU without VNNI: the int8 layers are refused with the reason, and the model (on
    onnxruntime) matches onnxruntime."""
    report = assert_matches_onnxruntime(model, DNNL, inputs)
    reasons = [r for d in report.plan.decisions.values() for _, r in d.refusals]
    assert any("without VNNI" in r for r in reasons), reasons


def cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return f" {flag} " in f.read().replace("\n", " ")
    except OSError:
        return False


def avx2() -> bool:
    return cpu_has("avx2")


def run_as_written(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    """onnxruntime's run of ``model`` with its graph optimizations off: a QDQ graph's float
    work as written, without its fusions into int8 kernels."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    return session.run(None, inputs)


def softmax_between_convs(axis: int) -> object:
    nodes, consts = conv_stem()
    consts["w1"] = rand(8, 8, 1, 1)
    nodes += [node("Softmax", ["h"], "p", axis=axis), node("Conv", ["p", "w1"], "y")]
    return make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts)


def assert_thread_safe(compiled: byoc.CompiledModel, xs: list[np.ndarray]) -> None:
    """Runs of input "x" from one thread per array, 20 each at once, give output "y" as runs
    one at a time do."""
    want = [compiled.run({"x": x})["y"] for x in xs]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                np.testing.assert_array_equal(compiled.run({"x": xs[i]})["y"], want[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
