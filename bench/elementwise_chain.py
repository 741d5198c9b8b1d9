"""Chains of elementwise ops over a 1x64x256x256 float32 tensor: ccompiler vs onnxruntime.

    python bench/elementwise_chain.py [--repeat 30] [--spinning-baseline]

Two chains, each built into one model: ``arithmetic`` (8 cheap ops: the memory traffic that
loop fusion removes is the whole cost; target <= 0.3) and ``transcendental`` (Sigmoid and Tanh
among 8 ops: the math dominates; target <= 0.5). Both run in one process, interleaved, after a
warm-up, with ``placement = "static"`` (the backend's own speed). The script prints the CPU, ISA,
compiler and flags, then median times, their ratio and the bandwidth each achieves next to this
machine's memory-copy bandwidth. Last, each math op alone (``op(x) + x``) against onnxruntime's
own vectorized kernel.

The onnxruntime baseline runs with ``session.intra_op.allow_spinning=0``: interleaved in one
process, a spinning baseline keeps the second core busy while the compiled loop runs, a cost no
deployment of either pays. ``--spinning-baseline`` measures onnxruntime's default instead.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import byoc
import numpy as np
import onnx
import onnxruntime as ort
from machine import print_machine
from onnx import helper, numpy_helper

SHAPE = [1, 64, 256, 256]
TARGETS = {"arithmetic": 0.3, "transcendental": 0.5}
MATH = ["Sigmoid", "Tanh", "Exp", "Erf", "Gelu", "Log"]
# (op, second operand or None); "x" is the chain's input, a..d per-channel or scalar constants
CHAINS = {
    "arithmetic": [
        ("Mul", "a"),
        ("Add", "b"),
        ("Relu", None),
        ("Mul", "x"),
        ("Sub", "c"),
        ("Abs", None),
        ("Min", "d"),
        ("Div", "d"),
    ],
    "transcendental": [
        ("Mul", "a"),
        ("Add", "b"),
        ("Sigmoid", None),
        ("Mul", "x"),
        ("Tanh", None),
        ("Sub", "c"),
        ("Relu", None),
        ("Div", "d"),
    ],
}


def model(chain: list[tuple[str, str | None]]) -> onnx.ModelProto:
    """One node per op of ``chain``, each reading the previous one's output."""
    rng = np.random.default_rng(0)
    consts = {
        "a": rng.uniform(0.5, 1.5, (64, 1, 1)).astype(np.float32),
        "b": rng.uniform(-0.5, 0.5, (64, 1, 1)).astype(np.float32),
        "c": np.array(0.1, np.float32),
        "d": np.array(0.5, np.float32),
    }
    nodes, prev = [], "x"
    for i, (op, other) in enumerate(chain):
        out = "y" if i == len(chain) - 1 else f"t{i}"
        nodes.append(
            helper.make_node(
                op, [prev] + ([other] if other else []), [out], name=f"{op.lower()}_{i}"
            )
        )
        prev = out
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


def side_by_side(
    m: onnx.ModelProto, x: np.ndarray, repeat: int, spinning: bool, keep_fusions: bool = True
) -> tuple[float, dict[str, float], dict[str, Any]]:
    """Max |diff|, median seconds of byoc (one ccompiler partition) and onnxruntime, toolchain."""
    compiled = byoc.compile(
        m,
        {
            "backends": ["ccompiler"],
            "compile": {"placement": "static"},
            "backend": {"ccompiler": {"keep_onnxruntime_fusions": keep_fusions}},
        },
    )
    kinds = [step.unit.backend for step in compiled.steps]
    assert kinds == ["ccompiler"], f"expected one ccompiler partition, got {kinds}"
    options = ort.SessionOptions()
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(
        m.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    err = float(np.max(np.abs(compiled.run({"x": x})["y"] - session.run(None, {"x": x})[0])))
    runs = {
        "byoc ccompiler": lambda: compiled.run({"x": x}),
        "onnxruntime": lambda: session.run(None, {"x": x}),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(3):  # warm-up
        for fn in runs.values():
            fn()
    for i in range(repeat):  # interleaved, alternating who goes first
        for label in list(runs) if i % 2 == 0 else list(runs)[::-1]:
            t = time.perf_counter()
            runs[label]()
            times[label].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    return err, med, compiled.steps[0].artifact.toolchain


def bench_chain(name: str, repeat: int, spinning: bool, x: np.ndarray) -> float:
    chain = CHAINS[name]
    err, med, toolchain = side_by_side(model(chain), x, repeat, spinning)
    moved = 2 * x.nbytes  # the fused loop reads x once and writes y once
    ops = ", ".join(op for op, _ in chain)
    print(f"{name} chain: {ops}; max |diff| {err:.2e}")
    print(f"  built with {toolchain['cc']} {' '.join(toolchain['cflags'])}")
    for label, t in med.items():
        print(f"  {label:15s} median {t * 1e3:8.2f} ms   {moved / t / 1e9:6.2f} GB/s (in + out)")
    ratio = med["byoc ccompiler"] / med["onnxruntime"]
    print(f"  ratio ccompiler / onnxruntime: {ratio:.3f} (target <= {TARGETS[name]})")
    return ratio


def bench_math(repeat: int, spinning: bool, x: np.ndarray) -> None:
    """Each math op alone (``y = op(x) + x``), against onnxruntime's vectorized kernel."""
    print("single math ops, y = op(x) + x:")
    for op in MATH:
        xi = np.abs(x) + 1e-3 if op == "Log" else x
        nodes = [helper.make_node(op, ["x"], ["t"]), helper.make_node("Add", ["t", "x"], ["y"])]
        f32 = onnx.TensorProto.FLOAT
        graph = helper.make_graph(
            nodes,
            op.lower(),
            [helper.make_tensor_value_info("x", f32, SHAPE)],
            [helper.make_tensor_value_info("y", f32, SHAPE)],
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
        err, med, _ = side_by_side(m, xi, repeat, spinning, keep_fusions=False)
        ours, theirs = med["byoc ccompiler"], med["onnxruntime"]
        print(
            f"  {op:8s} ccompiler {ours * 1e3:6.2f} ms   onnxruntime {theirs * 1e3:6.2f} ms   "
            f"ratio {ours / theirs:.2f}   max |diff| {err:.1e}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument(
        "--spinning-baseline",
        action="store_true",
        help="let the onnxruntime baseline's threads spin (its default)",
    )
    args = parser.parse_args()
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    print_machine()
    print(
        f"float32{SHAPE} ({x.nbytes / 1e6:.0f} MB); numpy copy "
        f"{copy_bandwidth(x, args.repeat):.2f} GB/s (read + write), for comparison"
    )
    for name in CHAINS:
        bench_chain(name, args.repeat, args.spinning_baseline, x)
    bench_math(args.repeat, args.spinning_baseline, x)


if __name__ == "__main__":
    main()
