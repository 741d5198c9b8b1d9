"""Roofline numbers: a model's FLOPs from its ONNX graph, and this machine's measured fp32 peak.

    .venv/bin/python bench/roofline.py MODEL.onnx [--shapes x=1,3,224,224] [--by-op]
    .venv/bin/python bench/zoo.py --flops --models vit-tiny-dynamo  # a bench/zoo_models.py model
    .venv/bin/python bench/roofline.py --peak [--remeasure]  # only the peak

What is counted (``count_flops``), on shapes from ONNX shape inference (with data propagation)
after the given input shapes are fixed; a multiply-add is 2 FLOPs:

* ``MatMul``, ``MatMulInteger``, ``QLinearMatMul``: 2 * (output elements) * K.
* ``Gemm``: 2 * M * N * K, plus M * N for the bias C.
* ``Conv``, ``ConvInteger``, ``QLinearConv``: 2 * (output elements) * (C_in / group) * (kernel
  elements), plus the output elements for a bias. ``ConvTranspose``: 2 * (input elements) *
  (C_out / group) * (kernel elements), plus a bias.
* Elementwise ops (arithmetic, activations, normalizations, Softmax, Where, (de)quantization):
  a rough 1 FLOP per output element, whatever the op costs in fact (Erf, Exp, Softmax and
  LayerNormalization take several). Pooling and reductions: 1 per input element.
* Nothing for data movement (Reshape, Transpose, Gather, Concat, Slice, Split, Cast, Pad,
  Resize, Shape, ...), nor inside the subgraphs of If, Loop and Scan. Local functions are
  inlined first. Where shape inference leaves a counted node's shapes unknown, the model runs
  once in onnxruntime on zero inputs to read them; a node whose shapes stay unknown is counted
  as 0 and listed in ``Flops.unknown``.

The integer ops are counted like their float twins (integer operations, not FLOPs, but the
same work); ``Flops.dense`` is the MatMul/Gemm/Conv part, ``Flops.elementwise`` the rest.

The peak (``peak``): the best of a large single-precision GEMM (``PEAK_N`` square) timed
through onnxruntime (one MatMul node, ``intra_op_num_threads`` = the cores this process may
use, which is what bench/zoo.py gives byoc's backends and what onnxruntime's default picks on
this machine) and through numpy's BLAS (same thread count), in a child process. The higher of
the two is the peak; it is cached per host (CPU model and flags, threads, library versions) in
``user_cache_dir("byoc")/roofline/``. ``achieved(flops, ms, peak)`` gives GFLOP/s and the share
of the peak.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import platformdirs
from onnx import numpy_helper

PEAK_N = 2048  # the GEMM's M = N = K: 17 GFLOP a run
DENSE = {"MatMul", "MatMulInteger", "QLinearMatMul", "Gemm"}
CONV = {"Conv", "ConvInteger", "QLinearConv"}


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


ELEMENTWISE = _names(
    """
    Add Sub Mul Div Pow Mod Neg Abs Reciprocal Sqrt Exp Log Floor Ceil Round Sign
    Max Min Mean Sum Equal Less Greater LessOrEqual GreaterOrEqual Not And Or Xor
    Where IsNaN IsInf BitShift Clip
    Relu LeakyRelu PRelu Elu Selu Celu Gelu Sigmoid HardSigmoid HardSwish Tanh Erf
    Softplus Softsign Mish ThresholdedRelu Sin Cos Tan Asin Acos Atan Sinh Cosh
    BatchNormalization LayerNormalization InstanceNormalization GroupNormalization
    RMSNormalization LpNormalization Softmax LogSoftmax Hardmax
    QuantizeLinear DequantizeLinear DynamicQuantizeLinear
    """
)
PER_INPUT = _names(  # pooling and reductions: 1 per input element
    """
    MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool GlobalLpPool
    ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2
    ReduceLogSum ReduceLogSumExp ReduceSumSquare ArgMax ArgMin CumSum
    """
)


@dataclass
class Flops:
    """A model's FLOPs: dense (MatMul, Gemm, Conv and their integer twins) + elementwise."""

    dense: int = 0
    elementwise: int = 0
    by_op: dict[str, int] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # "name (op)" of nodes with unknown shapes

    @property
    def total(self) -> int:
        return self.dense + self.elementwise

    def add(self, op: str, flops: int, dense: bool) -> None:
        if dense:
            self.dense += flops
        else:
            self.elementwise += flops
        self.by_op[op] = self.by_op.get(op, 0) + flops


def _prod(dims: Iterable[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def infer_shapes(model: onnx.ModelProto, shapes: Mapping[str, list[int]] | None = None) -> dict:
    """Every value's static shape (``None`` where unknown), after fixing the input ``shapes``."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    for value in graph.input:
        if shapes and value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            if len(dims) != len(shapes[value.name]) and len(dims):
                raise ValueError(
                    f"input {value.name!r} has {len(dims)} dims but --shapes gives "
                    f"{shapes[value.name]}"
                )
            del dims[:]
            for d in shapes[value.name]:
                dims.add().dim_value = d
    unknown = sorted(set(shapes or {}) - {v.name for v in graph.input})
    if unknown:
        raise ValueError(f"the model has no inputs {unknown}; its inputs: {_inputs(graph)}")
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    g = inferred.graph
    known: dict[str, list[int] | None] = {}
    for v in [*g.input, *g.value_info, *g.output]:
        if not v.type.HasField("tensor_type") or not v.type.tensor_type.HasField("shape"):
            continue
        dims = v.type.tensor_type.shape.dim
        static = all(d.HasField("dim_value") for d in dims)
        known[v.name] = [d.dim_value for d in dims] if static else None
    for init in g.initializer:
        known[init.name] = list(init.dims)
    for node in g.node:  # Constant nodes: their value's shape
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    known[node.output[0]] = list(a.t.dims)
    return known


def _inputs(graph: onnx.GraphProto) -> list[str]:
    inits = {i.name for i in graph.initializer}
    return [v.name for v in graph.input if v.name not in inits]


def count_flops(
    model: onnx.ModelProto | str | os.PathLike,
    shapes: Mapping[str, list[int]] | None = None,
    run_for_shapes: bool = True,
) -> Flops:
    """The FLOPs of one run of ``model`` (see the module docstring for what is counted).

    Where ONNX shape inference leaves a counted node's shapes unknown and every input's shape
    is fixed, ``run_for_shapes`` runs the model once in onnxruntime (zero inputs, no graph
    optimizations) to read those values' shapes.
    """
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    if model.functions:  # count what the model's local functions compute, node by node
        from onnx.inliner import inline_local_functions

        model = inline_local_functions(model)
    known = infer_shapes(model, shapes)
    flops, missing = _count(model, known)
    if missing and run_for_shapes:
        ran = _run_for_shapes(model, shapes or {}, sorted(missing))
        if ran:
            known.update(ran)
            flops, _ = _count(model, known)
    return flops


def _count(model: onnx.ModelProto, known: dict) -> tuple[Flops, set[str]]:
    """The FLOPs, and the names of values whose unknown shapes left nodes uncounted."""
    flops, missing = Flops(), set()
    for node in model.graph.node:
        op = node.op_type

        def shape(i: int, of: Any = node.input) -> list[int] | None:
            return known.get(of[i]) if i < len(of) and of[i] else None

        out = shape(0, node.output)
        if op in DENSE or op in CONV or op == "ConvTranspose":
            n = _dense_flops(node, shape, out)
            dense = True
        elif op in ELEMENTWISE:
            n, dense = (None if out is None else _prod(out)), False
        elif op in PER_INPUT:
            x = shape(0)
            n, dense = (None if x is None else _prod(x)), False
        else:
            continue
        if n is None:
            flops.unknown.append(f"{node.name or node.output[0]} ({op})")
            missing.update(v for v in [*node.input, *node.output] if v and known.get(v) is None)
        else:
            flops.add(op, n, dense=dense)
    return flops, missing


def _run_for_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, list[int]], names: list[str]
) -> dict[str, list[int]]:
    """The shapes of ``names`` from one onnxruntime run on zeros ({} where that cannot run)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        tensor = value.type.tensor_type
        dims = shapes.get(value.name) or [
            d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim
        ]
        if not value.type.HasField("tensor_type") or 0 in dims:
            return {}  # a symbolic dim nobody fixed: nothing to run on
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        feeds[value.name] = np.zeros(dims, dtype)
    import onnxruntime as ort

    outputs = {o.name for o in model.graph.output}
    for name in names:
        if name not in outputs:
            model.graph.output.add().name = name
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        values = session.run(names, feeds)
    except Exception:  # the counter then says which nodes it could not count
        return {}
    return {n: list(v.shape) for n, v in zip(names, values, strict=True)}


def _dense_flops(node: onnx.NodeProto, shape: Any, out: list[int] | None) -> int | None:
    op = node.op_type
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a = shape(0)
        if a is None or out is None:
            return None
        k = a[-1] if len(a) > 0 else 1
        return 2 * _prod(out) * k
    if op == "Gemm":
        a = shape(0)
        if a is None or out is None or len(a) != 2:
            return None
        k = a[0] if attrs.get("transA", 0) else a[1]
        bias = _prod(out) if len(node.input) > 2 and node.input[2] else 0
        return 2 * _prod(out) * k + bias
    # Conv, ConvInteger, QLinearConv: weight is input 1 (3 for QLinearConv)
    w = shape(3 if op == "QLinearConv" else 1)
    bias_at = {"Conv": 2, "ConvTranspose": 2, "QLinearConv": 8}.get(op)
    has_bias = bias_at is not None and len(node.input) > bias_at and bool(node.input[bias_at])
    if w is None or out is None:
        return None
    kernel = _prod(w[2:])
    if op == "ConvTranspose":  # w: [C_in, C_out / group, k...]; each input scatters
        x = shape(0)
        if x is None:
            return None
        return 2 * _prod(x) * w[1] * kernel + (_prod(out) if has_bias else 0)
    # w: [C_out, C_in / group, k...]: w[1] already holds the grouping
    return 2 * _prod(out) * w[1] * kernel + (_prod(out) if has_bias else 0)


# --- the machine's peak ---------------------------------------------------------------------


def threads() -> int:
    """The cores this process may use: what bench/zoo.py's byoc children give their backends."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def host() -> dict[str, str]:
    """The CPU model, its vector/matrix ISA flags and the C compiler (``gcc --version``)."""
    model, flags = platform.processor() or "unknown", []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == (platform.processor() or "unknown"):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = value.split()
    except OSError:
        pass
    isa = [f for f in flags if f in ("avx", "avx2", "fma") or f.startswith(("avx512", "amx"))]
    isa += [f for f in flags if f in ("avx_vnni", "avx_vnni_int8", "avx_ne_convert")]
    try:
        gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, timeout=10)
        compiler = (gcc.stdout.splitlines() or ["none"])[0]
    except (OSError, subprocess.SubprocessError):
        compiler = "none"
    return {
        "cpu": f"{model} ({os.cpu_count()} logical cores, {threads()} usable)",
        "isa": " ".join(dict.fromkeys(isa)) or "none of avx/avx2/avx512/amx",
        "compiler": compiler,
    }


@dataclass(frozen=True)
class Peak:
    gflops: float  # the higher of the two
    onnxruntime_gflops: float
    numpy_gflops: float
    threads: int
    n: int
    measured: str  # UTC time of the measurement
    load: float = 0.0  # the 1-minute load average just before: a busy machine gives a low peak

    def describe(self) -> str:
        return (
            f"{self.gflops:.1f} GFLOP/s fp32 (GEMM {self.n}^3 on {self.threads} threads: "
            f"onnxruntime {self.onnxruntime_gflops:.1f}, numpy {self.numpy_gflops:.1f}; "
            f"measured {self.measured}, load average {self.load:.2f})"
        )


def _peak_key() -> str:
    import onnxruntime

    info = host()
    parts = [info["cpu"], info["isa"], str(threads()), str(PEAK_N)]
    parts += [onnxruntime.__version__, np.__version__]
    flags = ""  # every flag, not only the ISA ones: a different CPU gets its own peak
    with contextlib.suppress(OSError, StopIteration):
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next(line for line in cpuinfo if line.startswith("flags"))
    return hashlib.sha256("\n".join([*parts, flags]).encode()).hexdigest()[:16]


def peak(remeasure: bool = False) -> Peak:
    """This machine's fp32 peak, measured once per host and cached (``remeasure``: again, e.g.
    when the cached one was measured on a busy machine: ``Peak.load`` says)."""
    path = Path(platformdirs.user_cache_dir("byoc")) / "roofline" / f"peak-{_peak_key()}.json"
    if path.exists() and not remeasure:
        return Peak(**json.loads(path.read_text()))
    load = os.getloadavg()[0]
    env = {**os.environ}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads())  # numpy's BLAS on the same threads as onnxruntime
    child = subprocess.run(
        [sys.executable, __file__, "--measure-peak-child"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if child.returncode:
        raise RuntimeError(f"measuring the peak failed:\n{child.stderr[-2000:]}")
    ort_gflops, numpy_gflops = json.loads(child.stdout.strip().splitlines()[-1])
    result = Peak(
        max(ort_gflops, numpy_gflops),
        ort_gflops,
        numpy_gflops,
        threads(),
        PEAK_N,
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        load,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps(asdict(result)))
    os.replace(path.with_suffix(".tmp"), path)
    return result


def _best_gflops(run: Any, flops: float, seconds: float = 2.0) -> float:
    """The fastest of repeated runs (after two warm-ups), over about ``seconds``."""
    run()
    run()
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return flops / best / 1e9


def _measure_peak_child() -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    n = PEAK_N
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    flops = 2.0 * n**3
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
        initializer=[numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads()
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    ort_gflops = _best_gflops(lambda: session.run(None, {"a": a}), flops)
    out = np.empty((n, n), np.float32)
    numpy_gflops = _best_gflops(lambda: np.matmul(a, b, out=out), flops)
    print(json.dumps([ort_gflops, numpy_gflops]))


def achieved(flops: float, ms: float, peak_gflops: float) -> tuple[float, float]:
    """GFLOP/s of ``flops`` done in ``ms`` milliseconds, and its share of ``peak_gflops``."""
    gflops = flops / (ms * 1e6)
    return gflops, gflops / peak_gflops


def describe_run(flops: float, ms: float, peak_gflops: float) -> str:
    """``"224.1 GFLOP/s (87% of peak)"``."""
    gflops, share = achieved(flops, ms, peak_gflops)
    return f"{gflops:.1f} GFLOP/s ({share:.0%} of peak)"


def _gflop(n: float) -> str:
    return f"{n / 1e9:.3f} GFLOP"


def _parse_shapes(items: list[str]) -> dict[str, list[int]]:
    shapes = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise SystemExit(f"--shapes {item!r}: expected name=1,3,224,224")
        shapes[name] = [int(d) for d in dims.split(",")]
    return shapes


def report(path: Path, shapes: dict[str, list[int]], by_op: bool = False) -> list[str]:
    """The lines ``roofline.py MODEL`` prints for a model: its FLOPs, and those per op type."""
    flops = count_flops(path, shapes)
    lines = [
        f"model:    {path}" + (f" shapes {shapes}" if shapes else ""),
        f"FLOPs:    {_gflop(flops.total)} ({_gflop(flops.dense)} MatMul/Gemm/Conv, "
        f"{_gflop(flops.elementwise)} elementwise, pooling and reductions)",
    ]
    if flops.unknown:
        shown = ", ".join(flops.unknown[:5]) + (", ..." if len(flops.unknown) > 5 else "")
        lines.append(
            f"unknown:  {len(flops.unknown)} nodes with unknown shapes, not counted: {shown}"
        )
    if by_op:
        for op, n in sorted(flops.by_op.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {op:24s} {_gflop(n)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", type=Path, help="an ONNX file")
    parser.add_argument("--shapes", nargs="*", default=[], help="input shapes: x=1,3,224,224")
    parser.add_argument("--by-op", action="store_true", help="FLOPs per op type")
    parser.add_argument("--peak", action="store_true", help="only the machine's peak")
    parser.add_argument("--no-peak", action="store_true", help="only the model's FLOPs")
    parser.add_argument("--remeasure", action="store_true", help="measure the peak again")
    parser.add_argument("--measure-peak-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_peak_child:
        _measure_peak_child()
        return 0
    if not args.model and not args.peak:
        parser.error("give a model, or --peak")
    if args.model and not args.peak:
        if not args.model.is_file():
            parser.error(
                f"{args.model}: no such file (a zoo model's: bench/zoo.py --flops --models NAME)"
            )
        print("\n".join(report(args.model, _parse_shapes(args.shapes), args.by_op)))
    if not args.no_peak:
        for key, value in host().items():
            print(f"{key + ':':10s}{value}")
        print(f"{'peak:':10s}{peak(args.remeasure).describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
