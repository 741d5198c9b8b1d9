"""The ccompiler backend's hooks: what it claims, codegen, runtime, serialization."""

from __future__ import annotations

import functools
import hashlib
import math
import os
import tempfile
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import onnx
import onnxruntime as ort
from byoc import ArtifactError, BackendError, ConfigError, NodeView, Option, Partition, native
from byoc.native import Toolchain

from byoc_ccompiler import __version__
from byoc_ccompiler.artifact import Artifact, decode, encode
from byoc_ccompiler.codegen import MAX_CONSTANT_ELEMENTS, Options, fuse, generate
from byoc_ccompiler.ops import CTYPES, OPS, output_dtype
from byoc_ccompiler.runtime import Module

NAME = "ccompiler"
# Options marked local_only are the loading machine's: a .byoc file never carries them
# (compiler, flags, directory).
OPTIONS: dict[str, Option] = {
    "cc": Option(
        str, native.default_compiler("c"), "C compiler (default: $CC, else cc)", local_only=True
    ),
    "cflags": Option(
        (list, str),
        None,
        "compiler flags (default: -O3, -march=native, -fno-math-errno, -fno-trapping-math "
        "and -fopenmp (else -fopenmp-simd), each where the compiler takes it)",
        local_only=True,
    ),
    "omp_min_elements": Option(
        int,
        1 << 16,
        "loops over at least this many elements use OpenMP",
        range(0, 1 << 62),
    ),
    "fuse": Option(
        bool,
        True,
        "fuse nodes into shared loops (false: one C function per op and a buffer per "
        "intermediate, as in TVM's BYOC guide)",
    ),
    "keep_onnxruntime_fusions": Option(
        bool,
        True,
        "leave nodes onnxruntime fuses into bigger kernels (Conv+Relu, LayerNorm, "
        "Gelu...) to onnxruntime",
    ),
    "load_library": Option(
        bool,
        True,
        "load the compiled library a saved artifact carries (false: "
        "always rebuild from its C source)",
        local_only=True,
    ),
    "cache_dir": Option(
        str,
        "",
        "where compiled libraries are cached (default: the user cache dir, byoc/ccompiler)",
        local_only=True,
    ),
}

# The cost model of ``prune``: a partition must save more than its boundary costs.
# Measured on a 2-core x86-64 VM with onnxruntime 1.31; orders of magnitude matter, not digits.
_NODE_US = 2.0  # onnxruntime's cost per node beyond its memory traffic
_CALL_US = 12.0  # our cost per partition call: checks, output allocation, cffi
_SPLIT_US = 100.0  # one more onnxruntime session run when a partition cuts a segment in two
_CACHED = 2 << 20  # tensors up to this many bytes mostly stay in cache between ops ...
_CACHE_BYTES_PER_US = 80000.0  # ... and stream at about 80 GB/s
_DRAM_BYTES_PER_US = 15000.0  # larger ones at about 15 GB/s


def _toolchain(config: Mapping[str, Any]) -> Toolchain | str:
    flags = config.get("cflags")
    cc = config.get("cc") or native.default_compiler("c")
    return native.probe(cc, tuple(flags) if flags is not None else None)


@functools.cache
def build_id() -> str:
    """What decides the generated code's speed besides the version: this package's code
    generator and C prelude (measured placement's cache key: a changed one is timed again)."""
    package = Path(__file__).parent
    files = sorted([*package.glob("*.py"), *package.glob("*.h")])
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def _available() -> str | None:
    found = native.probe(native.default_compiler("c"), None)
    return found if isinstance(found, str) else None


# -- annotation --------------------------------------------------------------------------------


def _opset(node: NodeView) -> int:
    imports = node.graph.model.opset_import
    return next((o.version for o in imports if o.domain in ("", "ai.onnx")), 1)


def check(node: NodeView) -> str | None:
    """Why ccompiler cannot take this node, or None: op semantics, dtypes, static shapes."""
    op = OPS[node.op_type]
    opset = _opset(node)
    if opset < op.since:
        return f"{node.op_type} at opset {opset} (ccompiler implements opset {op.since}+)"
    if opset > onnx.defs.onnx_opset_version():
        return (
            f"opset {opset} is newer than any ONNX release known here "
            f"({onnx.defs.onnx_opset_version()}); onnxruntime refuses it too"
        )
    if len(node.outputs) != 1:
        return f"{node.op_type} with {len(node.outputs)} outputs"
    n = len(node.inputs)
    if not op.arity[0] <= n <= op.arity[1] or (node.op_type != "Clip" and "" in node.inputs):
        return f"{node.op_type} with {n} inputs"
    shapes: list[tuple[Any, ...]] = []
    dtypes: list[str | None] = []
    for i, name in enumerate(node.inputs):
        if not name:
            dtypes.append(None)
            continue
        t = node.input_type(i)
        reason = _static(name, t)
        if reason:
            return reason
        assert t is not None and t.dtype is not None and t.shape is not None
        shapes.append(tuple(t.shape))
        dtypes.append(t.dtype.name)
        value = node.const(i)
        if value is not None and value.size > MAX_CONSTANT_ELEMENTS:
            return (
                f"constant input '{name}' has {value.size} elements; ccompiler embeds "
                f"constants of at most {MAX_CONSTANT_ELEMENTS} in the C source"
            )
    out = node.output_type(0)
    reason = _static(node.outputs[0], out)
    if reason:
        return reason
    assert out is not None and out.dtype is not None and out.shape is not None
    t = dtypes[op.t_input]
    if t not in op.dtypes:
        return f"{node.op_type} on {t} (ccompiler: {', '.join(op.dtypes)})"
    reason = _operand_dtypes(node, dtypes, t)
    if reason:
        return reason
    want = output_dtype(node.op_type, node.attrs, t)
    if want != out.dtype.name:
        return f"output dtype {out.dtype} (ccompiler computes {want})"
    if node.op_type == "Cast" and t == "float32" and want in ("int32", "int64"):
        return "Cast from float to integer (out-of-range values are undefined behaviour in C)"
    if node.op_type == "Gelu" and node.attrs.get("approximate", "none") not in ("none", "tanh"):
        return f"Gelu approximate={node.attrs.get('approximate')!r}"
    try:
        expected = np.broadcast_shapes(*shapes)
    except ValueError:
        return f"input shapes {shapes} do not broadcast"
    if tuple(out.shape) != expected:
        return f"output shape {list(out.shape)} is not the broadcast {list(expected)} of the inputs"
    if math.prod(expected) == 0:
        return "empty tensor"
    return None


def _static(name: str, t: byoc.TensorType | None) -> str | None:
    if t is None or t.dtype is None or t.shape is None:
        return f"the type of '{name}' is unknown"
    if not t.is_static:
        return (
            f"'{name}' has a non-static shape {t}; fix the model's input shapes in the "
            f"config's [shapes] table"
        )
    if t.dtype.name not in CTYPES:
        return f"dtype {t.dtype} (ccompiler: {', '.join(CTYPES)})"
    return None


def _operand_dtypes(node: NodeView, dtypes: list[str | None], t: str) -> str | None:
    for i, dtype in enumerate(dtypes):
        if dtype is None:
            continue
        want: tuple[str, ...]
        if node.op_type == "Where" and i == 0:
            want = ("bool",)
        elif node.op_type == "Pow" and i == 1:
            want = ("float32", "int32", "int64")
        elif node.op_type == "Cast":
            want = tuple(CTYPES)
        else:
            want = (t,)
        if dtype not in want:
            return f"input {i} of {node.op_type} is {dtype}, expected {' or '.join(want)}"
    return None


_fused_cache: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def onnxruntime_fuses(graph: Any) -> set[str]:
    """Names of nodes onnxruntime's graph optimizer fuses into other kernels or removes.

    Runs onnxruntime's optimizer (extended level) once per graph and keeps the nodes that come
    out unchanged; when the optimizer cannot run, assumes nothing is fused.
    """
    if graph in _fused_cache:
        return _fused_cache[graph]
    fused: set[str] = set()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.intra_op_num_threads = 1
    with tempfile.TemporaryDirectory(prefix="byoc-cc-ort-") as tmp:
        opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        try:
            ort.InferenceSession(
                graph.model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
            )
            optimized = onnx.load(opts.optimized_model_filepath, load_external_data=False)
        except Exception:  # onnxruntime will report real problems when it runs the model
            optimized = None
    if optimized is not None:
        kept = {(n.name, n.op_type) for n in optimized.graph.node}
        fused = {
            n.name for n in graph.nodes if n.op_type in OPS and (n.name, n.op_type) not in kept
        }
    _fused_cache[graph] = fused
    return fused


def _checks(config: Mapping[str, Any]) -> dict[str, Any]:
    found = _toolchain(config)
    configured = config.get("cflags") is not None or config.get("cc") not in (
        None,
        native.default_compiler("c"),
    )
    if isinstance(found, str) and configured:  # the user's cc or cflags: say so, do not hide
        raise ConfigError(f"[backend.{NAME}] cc/cflags: {found}")
    if isinstance(found, str):
        reason = found

        def refuse(node: NodeView) -> str:
            return reason

        return dict.fromkeys(OPS, refuse)
    keep_fusions = config.get("keep_onnxruntime_fusions", True)

    def accept(node: NodeView) -> str | None:
        reason = check(node)
        if reason is None and keep_fusions and node.name in onnxruntime_fuses(node.graph):
            reason = "onnxruntime fuses it with its neighbours (keep_onnxruntime_fusions)"
        return reason

    return dict.fromkeys(OPS, accept)


# -- pruning -----------------------------------------------------------------------------------


def _nbytes(view: NodeView, name: str) -> int:
    t = view.graph.type_of(name)
    if t is None or t.dtype is None or not t.is_static:
        return 0
    return math.prod(int(d) for d in t.shape or ()) * t.dtype.itemsize


def prune(nodes: list[NodeView]) -> str | None:
    """Send a partition back to onnxruntime when fusing it saves less than its boundary costs.

    onnxruntime runs each node as its own pass over memory; the fused loops read each input and
    write each escaping value once. A partition costs a call, and one more onnxruntime session
    run when it cuts a fallback segment in two. A partition that is the whole model is kept.
    """
    if not nodes:
        return None
    graph = nodes[0].graph
    inside = {v.name for v in nodes}
    before = any(graph.nodes[p].name not in inside for v in nodes for p in graph.pred(v.index))
    after = any(graph.nodes[s].name not in inside for v in nodes for s in graph.succ(v.index))
    if not (before or after):  # the alternative is an onnxruntime session of its own
        return None
    onnxruntime = sum(_NODE_US + _stream_us(v, [*v.inputs, *v.outputs]) for v in nodes)
    ours = _CALL_US
    outputs = set(graph.outputs)
    groups = fuse(nodes)
    kernel_of = {nodes[i].outputs[0]: g for g, members in enumerate(groups) for i in members}
    for g, members in enumerate(groups):
        touched = {
            x
            for i in members
            for x in nodes[i].inputs
            if x and kernel_of.get(x) != g and not _scalar_const(graph, x)
        }
        for i in members:
            out = nodes[i].outputs[0]
            users = graph.consumers.get(out, [])
            if out in outputs or any(kernel_of.get(graph.nodes[u].output[0]) != g for u in users):
                touched.add(out)
        ours += _stream_us(nodes[members[0]], sorted(touched))
    saved = onnxruntime - ours
    cost = _SPLIT_US if before and after else 0.0
    if saved <= 0:
        return f"fusing its {len(nodes)} node(s) saves nothing (estimate: {saved:.0f} us)"
    if saved < cost:
        return (
            f"fusing its {len(nodes)} node(s) saves about {saved:.0f} us, less than the "
            f"about {cost:.0f} us of cutting an onnxruntime segment in two"
        )
    return None


def _stream_us(view: NodeView, names: list[str]) -> float:
    """Estimated time to stream these tensors through memory once."""
    sizes = [_nbytes(view, x) for x in names if x]
    total = sum(sizes)
    rate = _CACHE_BYTES_PER_US if max(sizes, default=0) <= _CACHED else _DRAM_BYTES_PER_US
    return total / rate


def _scalar_const(graph: Any, name: str) -> bool:
    value = graph.constant(name)
    return value is not None and value.size == 1


# -- hooks -------------------------------------------------------------------------------------


@byoc.hookimpl
def byoc_register_backends(register: Callable[[byoc.BackendSpec], None]) -> None:
    register(
        byoc.BackendSpec(
            NAME,
            version=__version__,
            available=_available,
            options=OPTIONS,
            min_partition_nodes=2,
            prune=prune,
            priority=20,
            # several onnxruntime sessions take turns with our loops: idle spinning threads of
            # one would steal the cores the next one needs
            fallback_defaults={"allow_spinning": False},
            build=build_id,
            description="fused, OpenMP-parallel C loops for elementwise ops, built with cffi",
        )
    )


@byoc.hookimpl
def byoc_supported_ops(backend: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    return _checks(config)


@byoc.hookimpl
def byoc_codegen(backend: str, partition: Partition, config: Mapping[str, Any]) -> Artifact | None:
    toolchain = _required_toolchain(config, partition.name)
    options = Options(
        openmp=toolchain.openmp,
        omp_min_elements=config.get("omp_min_elements", 1 << 16),
        fuse=config.get("fuse", True),
    )
    source, inputs, outputs = generate(partition, options)
    artifact = Artifact(partition.name, source, inputs, outputs, partition.model, options)
    _build(artifact, toolchain, config)
    return artifact


def _required_toolchain(config: Mapping[str, Any], where: str) -> Toolchain:
    found = _toolchain(config)
    if isinstance(found, str):
        raise BackendError(f"partition {where} (backend {NAME}): {found}")
    return found


def _build(artifact: Artifact, toolchain: Toolchain, config: Mapping[str, Any]) -> None:
    """Compile (or find in the cache) the artifact's library and record it in the artifact."""
    try:
        artifact.library = native.build(
            artifact.source,
            toolchain,
            f"int {artifact.symbol}(void *const *args);",
            NAME,
            cache=config.get("cache_dir", ""),
        )
    except Exception as exc:
        raise BackendError(
            f"partition {artifact.symbol} (backend {NAME}): compiling the C source with "
            f"{toolchain.cc} {' '.join(toolchain.cflags)} failed: {exc}"
        ) from exc


@byoc.hookimpl
def byoc_create_runtime(
    backend: str, artifact: Artifact, config: Mapping[str, Any]
) -> Module | None:
    library = artifact.library
    if library is None or not library.usable_here() or not config.get("load_library", True):
        # none (a loaded file's is used only when trusted), or another machine's: build the
        # source, which decode checked is this plugin's own output, with this machine's cc
        found = _toolchain(config)
        if isinstance(found, str):
            hint = (
                "; or trust the library the file carries: byoc.load(path, trust_native=True), "
                "byoc run --trust-native"
                if artifact.carried
                else ""
            )
            raise BackendError(
                f"partition {artifact.symbol} (backend {NAME}) must be built from its C source "
                f"here, and {found}: install a C compiler (or set [backend.{NAME}] cc){hint}"
            )
        _build(artifact, found, config)
        library = artifact.library
    assert library is not None
    ffi, lib = native.load(library, NAME, config.get("cache_dir", ""))
    return Module(ffi, lib, artifact.symbol, artifact.inputs, artifact.outputs)


@byoc.hookimpl
def byoc_serialize(backend: str, artifact: Artifact) -> bytes | None:
    return encode(artifact)


@byoc.hookimpl
def byoc_deserialize(backend: str, data: bytes, trust_native: bool) -> Artifact | None:
    try:
        return decode(data, trust_native)
    except ArtifactError:
        raise
    except Exception as exc:  # anything else a hostile file provokes is still a bad artifact
        raise ArtifactError(
            f"ccompiler artifact is not valid: {type(exc).__name__}: {exc}"
        ) from exc
