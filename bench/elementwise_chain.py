"""A chain of 8 elementwise ops over a 1x64x256x256 float32 tensor: ccompiler vs onnxruntime.

    python bench/elementwise_chain.py [--repeat 30]

Runs both in one process, interleaved, after a warm-up, and prints median times, their ratio
(target: <= 0.5), and the bandwidth each achieves next to this machine's memory-copy bandwidth.
"""

from __future__ import annotations

import argparse
import statistics
import time

import byoc
import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

SHAPE = [1, 64, 256, 256]
CHAIN = "Mul, Add, Sigmoid, Mul, Tanh, Sub, Relu, Div"


def model() -> onnx.ModelProto:
    """y = Relu(Tanh(Sigmoid(x * a + b) * x) - c) / d, a..d per-channel or scalar constants."""
    rng = np.random.default_rng(0)
    consts = {
        "a": rng.uniform(0.5, 1.5, (64, 1, 1)).astype(np.float32),
        "b": rng.uniform(-0.5, 0.5, (64, 1, 1)).astype(np.float32),
        "c": np.array(0.1, np.float32),
        "d": np.array(0.5, np.float32),
    }
    nodes = [
        helper.make_node("Mul", ["x", "a"], ["t0"], name="mul_a"),
        helper.make_node("Add", ["t0", "b"], ["t1"], name="add_b"),
        helper.make_node("Sigmoid", ["t1"], ["t2"], name="sigmoid"),
        helper.make_node("Mul", ["t2", "x"], ["t3"], name="mul_x"),
        helper.make_node("Tanh", ["t3"], ["t4"], name="tanh"),
        helper.make_node("Sub", ["t4", "c"], ["t5"], name="sub_c"),
        helper.make_node("Relu", ["t5"], ["t6"], name="relu"),
        helper.make_node("Div", ["t6", "d"], ["y"], name="div_d"),
    ]
    f32 = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "elementwise_chain",
        [helper.make_tensor_value_info("x", f32, SHAPE)],
        [helper.make_tensor_value_info("y", f32, SHAPE)],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def copy_bandwidth(x: np.ndarray, repeat: int) -> float:
    """Bytes moved per second (read + write) by a numpy copy of ``x``: GB/s."""
    out = np.empty_like(x)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        np.copyto(out, x)
        times.append(time.perf_counter() - t)
    return 2 * x.nbytes / statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    m = model()
    compiled = byoc.compile(m, {"backends": ["ccompiler"]})
    kinds = [step.unit.backend for step in compiled.steps]
    assert kinds == ["ccompiler"], f"expected one ccompiler partition, got {kinds}"
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    ours = compiled.run({"x": x})["y"]
    ref = session.run(None, {"x": x})[0]
    err = float(np.max(np.abs(ours - ref)))
    runs = {
        "byoc ccompiler": lambda: compiled.run({"x": x}),
        "onnxruntime": lambda: session.run(None, {"x": x}),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(3):  # warm-up
        for fn in runs.values():
            fn()
    for _ in range(args.repeat):  # interleaved
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    moved = 2 * x.nbytes  # the fused loop reads x once and writes y once
    print(f"chain: {CHAIN} over float32{SHAPE} ({x.nbytes / 1e6:.0f} MB); max |diff| {err:.2e}")
    for name, t in med.items():
        print(f"  {name:15s} median {t * 1e3:8.2f} ms   {moved / t / 1e9:6.2f} GB/s (in + out)")
    print(
        f"  numpy copy      {copy_bandwidth(x, args.repeat):6.2f} GB/s (read + write), "
        f"for comparison"
    )
    ratio = med["byoc ccompiler"] / med["onnxruntime"]
    print(f"ratio ccompiler / onnxruntime: {ratio:.3f} (target <= 0.5)")


if __name__ == "__main__":
    main()
