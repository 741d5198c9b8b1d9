"""The dnnl backend's hooks: registration, annotation, codegen, runtime, serialization."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import byoc
import numpy as np
from byoc import ArtifactError, NodeView, Option, Partition, host, native
from byoc.artifact import read_parts, write_parts

from byoc_dnnl import annotate, csource, kinds
from byoc_dnnl import native as dnnl_native
from byoc_dnnl.codegen import Artifact, codegen
from byoc_dnnl.host import CONST_DTYPES
from byoc_dnnl.ops import SLOW
from byoc_dnnl.runtime import Runtime, validate

NAME = "dnnl"
VERSION = "0.1.0"
MAGIC = b"BYOCDNNL"
_FORMAT_VERSION = 1  # the JSON graph and weights
_C_FORMAT_VERSION = 2  # and the C++ file with its library (byoc.native.pack)
_PARTS = {  # each format version's parts (byoc.artifact.read_parts)
    _FORMAT_VERSION: ("graph", "weight index", "weights"),
    _C_FORMAT_VERSION: ("graph", "weight index", "weights", "C source"),
}
C_MAGIC = b"byoc-dnnl C source 1\n"
FPMATH = ("strict", "bf16")
CODEGEN = ("json", "c")


def _available() -> str | None:
    return dnnl_native.unavailable_reason()


def _bf16(unit: Partition) -> dict[str, Any]:
    """``fpmath = "bf16"`` for ``[compile] precision = "bf16"`` where oneDNN computes some of
    the partition in bfloat16: with AMX, its convolutions and matmuls (oneDNN's fpmath); with
    AVX512_BF16 alone, where oneDNN 3.2 ignores fpmath, its dense layers (MatMul or Gemm with
    constant weights), typed bf16 by the shim, so a partition without one is offered none."""
    flags, graph = host.cpu().flags, unit.graph
    dense = any(
        v.op_type in ("MatMul", "Gemm") and annotate.constant(v, 1) is not None
        for v in map(graph.view, range(len(graph.nodes)))
    )
    return {"fpmath": "bf16"} if "amx_bf16" in flags or ("avx512_bf16" in flags and dense) else {}


def _prune(nodes: list[NodeView]) -> str | None:
    if not any(annotate.weighted(n) for n in nodes):
        return (
            "no layer with constant weights (Conv, ConvTranspose, MatMul, Gemm, LSTM or GRU): "
            "onnxruntime runs memory-bound ops and products of two activations as fast"
        )
    macs = [_macs(n) for n in nodes if annotate.weighted(n)]
    known = [m for m in macs if m is not None]
    graph = nodes[0].graph
    whole = len(nodes) == len(graph.nodes) - len(graph.const_nodes)
    if not whole and len(known) == len(macs) and sum(known) < TINY_MACS:
        return (
            f"its layers do {sum(known)} multiply-adds in all, fewer than "
            f"{TINY_MACS >> 20}M: less work than its boundaries with onnxruntime cost (Silero "
            "VAD, one frame per call, cut into 3 such partitions: 2.0x onnxruntime)"
        )
    work = [n for n in nodes if n.op_type not in (*annotate.VIEWS, "Transpose")]
    lone = len(work) == 1 and work[0].op_type in ("MatMul", "Gemm")
    if lone and (_macs(work[0]) or 0) < LONE_MACS:
        return (
            f"a lone float dense layer of fewer than {LONE_MACS >> 20}M multiply-adds, nothing "
            "fused: onnxruntime's MLAS runs it about as fast, and the partition's boundaries "
            "cost more (an onnxruntime-optimized MiniLM, contrib ops between its dense layers: "
            "1.14x onnxruntime)"
        )
    return None


# A lone dense layer stays on dnnl from this size: ~0.1 ms of boundaries per partition against
# a gain of a few percent over MLAS (crnn-lstm's 80x512 by 512x6625 Gemm, 271M multiply-adds,
# ran 2.3% faster end to end on dnnl; MiniLM's layers, 19-75M, lost 14% together).
LONE_MACS = 1 << 27
# A partition with onnxruntime segments around it stays on dnnl from this much work: each step
# the model is cut into costs ~15 us (Silero VAD's frame model: 0.08 ms on onnxruntime alone,
# 0.16 ms in 6 steps), while 2M multiply-adds take onnxruntime 40-80 us on two cores, of which
# dnnl saves a third at best. (The zoo's other partitions do 16M or more, but for two heads
# after an LSTM: 0.01M and 0.48M.)
TINY_MACS = 1 << 21


def _macs(node: NodeView) -> int | None:
    """A layer's multiply-adds: its output's elements times the products each one sums (a
    convolution's weights per output channel, a dense layer's inner dim); a transposed
    convolution's are its input's elements times its weights per input channel; an LSTM's or
    GRU's, its W and R times the steps of its sequences. None when a shape is not known."""
    if node.op_type in ("LSTM", "GRU"):
        x, w, r = (node.input_type(i) for i in range(3))
        if not all(t is not None and t.is_static for t in (x, w, r)):
            return None
        steps = x.shape[0] * x.shape[1]  # type: ignore[union-attr]
        return int(steps * (np.prod(w.shape) + np.prod(r.shape)))  # type: ignore[union-attr]
    types = (node.output_type(0), node.input_type(0), node.input_type(1))
    shapes = [t.shape if t is not None and t.is_static else None for t in types]
    if not all(shapes):
        return None
    out, a, w = (np.array(s, dtype=np.int64) for s in shapes)
    if node.op_type in ("Conv", "ConvInteger"):
        return int(out.prod() * w[1:].prod())
    if node.op_type == "ConvTranspose":
        return int(a.prod() * w[1:].prod())
    transposed = node.op_type == "Gemm" and node.attrs.get("transA")
    return int(out.prod() * a[-2 if transposed else -1])


@byoc.hookimpl
def byoc_register_backends(register: Callable[[byoc.BackendSpec], None]) -> None:
    register(
        byoc.BackendSpec(
            NAME,
            version=VERSION,
            available=_available,
            options={
                "threads": Option(
                    int,
                    0,
                    "oneDNN (OpenMP) threads per run; 0: one per core",
                    range(0, 1 << 16),
                ),
                "fpmath": Option(
                    str,
                    "strict",
                    "strict: float32 math; bf16: let convolutions and "
                    "matmuls compute in bfloat16 (faster, less exact); without AMX only the dense "
                    "layers do, on CPUs with AVX512_BF16",
                    FPMATH,
                ),
                "winograd": Option(
                    bool,
                    True,
                    "run 3x3 stride-1 convolutions of 64 or more channels as Winograd F(4x4, "
                    "3x3), and 3-tap ones of 128 or more as F(4, 3), on AVX-512 (faster; "
                    "rounding about 1e-5 of the output's scale off the direct kernel's); false: "
                    "oneDNN's direct kernels. The native runtime's (codegen json)",
                ),
                "codegen": Option(
                    str,
                    "json",
                    "json: a JSON graph run by the native runtime; c: a C++ file per partition "
                    "calling the op-level kernel library (the DNNL blog's C source mode)",
                    CODEGEN,
                ),
            },
            priority=30,
            finite_only=True,  # oneDNN's Relu, Clip, max pooling and softmax drop NaN
            softmax_masks=True,  # but its binary add and softmax follow ONNX on -inf
            precisions={"bf16": _bf16},  # [compile] precision = "bf16"
            exact={"winograd": False},  # a partition Winograd's rounding takes too far: direct
            prune=_prune,
            fallback_defaults={"allow_spinning": False},
            build=dnnl_native.build_id,
            description="oneDNN: fused conv/matmul kernels in blocked layouts (TVM's DNNL BYOC)",
        )
    )


@byoc.hookimpl
def byoc_supported_ops(backend: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    return kinds.supported_ops(config)


@byoc.hookimpl
def byoc_pattern_table(backend: str, config: Mapping[str, Any]) -> list[Any] | None:
    return kinds.pattern_table(config)


@byoc.hookimpl
def byoc_codegen(backend: str, partition: Partition, config: Mapping[str, Any]) -> Artifact | None:
    """The JSON graph, built once into a native net to read the kernels oneDNN picked: nodes
    it would run on a reference kernel are refused (``byoc.NodesRefused``), so onnxruntime
    runs them. The net is handed to ``byoc_create_runtime`` instead of being built again."""
    artifact = codegen(partition)
    if config.get("codegen", "json") == "c":
        graph = artifact.graph
        artifact.graph_source = artifact.source
        artifact.source = csource.generate(graph, artifact.weights)
        artifact.suffix = ".cpp"
        artifact.library = csource.build(artifact.source, partition_symbol(graph))
    runtime = _make_runtime(artifact, config)
    refused = slow_kernels(artifact, runtime) | saturating_kernels(artifact, runtime)
    if refused:
        raise byoc.NodesRefused(refused)
    artifact.prebuilt = (_runtime_key(config), runtime)
    return artifact


def partition_symbol(graph: dict[str, Any]) -> str:
    return str(graph["symbol"])


def _make_runtime(artifact: Artifact, config: Mapping[str, Any]) -> Runtime | csource.CRuntime:
    if artifact.graph_source is None:
        return Runtime(artifact, config)
    graph = artifact.graph  # validated by codegen or byoc_deserialize, C++ generated from it
    library = artifact.library
    if library is not None and library.usable_here():
        try:
            return csource.CRuntime(graph, artifact.weights, library, config)
        except csource.Unloadable:
            pass
    # built elsewhere, or linking a kernel library this host does not have: build it here
    artifact.library = csource.build(artifact.source, partition_symbol(graph))
    return csource.CRuntime(graph, artifact.weights, artifact.library, config)


def slow_kernels(artifact: Artifact, runtime: Runtime | csource.CRuntime) -> dict[str, str]:
    """``{ONNX node: reason}`` for the kernels oneDNN runs with a slow implementation
    (``ops.SLOW``).

    Reorders and concat are exempt: their "ref" implementations are a series of optimized
    reorders. So are LSTM and GRU: oneDNN's "ref" RNN is its gemm-based driver with jit cells
    (a bidirectional GRU of 494 steps of 32 units: 0.41 ms, onnxruntime 0.52 ms).
    """
    kernels = [n for n in artifact.graph["nodes"] if n["op"] == "kernel"]
    refused: dict[str, str] = {}
    for k, impl in runtime.implementations():
        kind, _, name = impl.partition(" ")
        if k < 0 or kind in ("reorder", "concat", "rnn") or not name.startswith(SLOW):
            continue
        for member in kernels[k].get("members", []):
            refused[member] = (
                f"oneDNN has only a slow kernel for it ({impl}: {kernels[k]['name']}, "
                f"shape {kernels[k]['shape']}), far slower than onnxruntime"
            )
    return refused


def saturating_kernels(artifact: Artifact, runtime: Runtime | csource.CRuntime) -> dict[str, str]:
    """``{ONNX node: reason}`` for the int8 kernels whose sums may differ from onnxruntime's on
    a CPU without VNNI: there oneDNN (as onnxruntime's MLAS) adds each pair of u8 x s8 products
    in 16 bits, which saturates. A dense layer of int8 weights without a zero point pairs the
    same products as MLAS's u8 x s8 kernel and saturates alike; a convolution (onnxruntime's
    im2col pairs other products), shifted uint8 weights (onnxruntime multiplies u8 x u8 in
    16 bits, without saturating) and weights with a zero point do not. Nor does a dense layer
    of s8 integers (``quantize_static``'s int8 activations): oneDNN halves its weights to keep
    the pairs from saturating, which rounds odd weights (2 to 8 steps off on one output
    value in three, with a single product per value). s8 is read from the artifact (the
    kernel writing the source writes s8, maybe through a slice or concat: ``_s8``), so a file made
    before this rule is checked too."""
    nodes = artifact.graph["nodes"]
    kernels = [n for n in nodes if n["op"] == "kernel"]
    refused: dict[str, str] = {}
    for k, impl in runtime.implementations():
        kind, _, name = impl.partition(" ")
        if k < 0 or kind not in ("convolution", "matmul") or "vnni" in name or "amx" in name:
            continue
        kernel = kernels[k]
        paired = kernel["kind"] == "qmatmul" and len(kernel["inputs"]) == 4
        s8 = _s8(nodes, kernel["inputs"][0] if kernel["inputs"] else -1)
        if kernel["kind"] not in ("qconv", "qmatmul") or (
            paired and not kernel["attrs"].get("uint8") and not s8
        ):
            continue
        why = (
            "halves the weights of an s8 source, which rounds them"
            if s8
            else "adds pairs of u8 x s8 products in 16 bits, which saturate where "
            "onnxruntime's do not"
        )
        for member in kernel.get("members", []):
            refused[member] = f"without VNNI oneDNN's int8 kernel ({impl}: {kernel['name']}) {why}"
    return refused


def _s8(nodes: list[dict[str, Any]], index: int, depth: int = 8) -> bool:
    """Whether node ``index`` makes s8 integers: a QuantizeLinear's (or a table's) to int8,
    or a slice, concat or view of such (``lut.quantize_first`` quantizes before a slice or
    concat)."""
    if index < 0 or depth == 0:
        return False
    node = nodes[index]
    if node.get("attrs", {}).get("dst") == "int8":
        return True
    if node.get("kind") not in ("slice", "concat", "view"):
        return False
    return any(_s8(nodes, i, depth - 1) for i in node.get("inputs", []))


def _runtime_key(config: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        int(config.get("threads", 0) or 0),
        config.get("fpmath", "strict"),
        bool(config.get("winograd", True)),
    )


@byoc.hookimpl
def byoc_create_runtime(backend: str, artifact: Artifact, config: Mapping[str, Any]) -> Any:
    prebuilt, artifact.prebuilt = artifact.prebuilt, None
    if prebuilt is not None and prebuilt[0] == _runtime_key(config):
        return prebuilt[1]
    runtime = _make_runtime(artifact, config)
    saturating = saturating_kernels(artifact, runtime)
    if saturating:  # compiled on a CPU with VNNI, loaded on one without
        node, reason = next(iter(saturating.items()))
        raise byoc.BackendError(
            f"dnnl partition {partition_symbol(artifact.graph)}: this CPU has no VNNI, and "
            f"{len(saturating)} int8 node(s) of the partition were "
            f"compiled on one that has: here {reason} (node '{node}'). Compile the model again "
            "on this machine (`byoc compile`); onnxruntime then runs these nodes"
        )
    return runtime


# -- serialization ----------------------------------------------------------------------------
# byoc.artifact.write_parts's layout, checked by its read_parts:
# MAGIC | u32 format version | u64 n + JSON graph | u64 n + JSON weight index | u64 n + weights:
# float32s ([offset, count] in the index), and u8 or i8 ([offset, count, dtype]) padded to 4 bytes
# and, in format 2 (codegen = "c"), | u64 n + byoc.native.pack(C_MAGIC, symbol, C++, library)


@byoc.hookimpl
def byoc_serialize(backend: str, artifact: Artifact) -> bytes | None:
    index: dict[str, list[int]] = {}
    blobs = []
    offset = 0
    for name, value in artifact.weights.items():
        if value.dtype == np.float32:
            data = np.ascontiguousarray(value, dtype="<f4").tobytes()
            index[name] = [offset, value.size]
        else:  # u8 or i8 (host.CONST_DTYPES), padded so float32 weights stay aligned
            data = np.ascontiguousarray(value).tobytes()
            index[name] = [offset, value.size, value.dtype.name]
            data += bytes(-len(data) % 4)
        blobs.append(data)
        offset += len(data)
    parts = [artifact.graph_text.encode(), json.dumps(index).encode(), b"".join(blobs)]
    version = _FORMAT_VERSION
    if artifact.graph_source is not None:
        version = _C_FORMAT_VERSION
        symbol = partition_symbol(artifact.graph)
        parts.append(native.pack(C_MAGIC, {"symbol": symbol}, artifact.source, artifact.library))
    return write_parts(MAGIC, parts, version)


@byoc.hookimpl
def byoc_deserialize(backend: str, data: bytes, trust_native: bool) -> Artifact | None:
    version, parts = read_parts(data, MAGIC, _PARTS, "dnnl artifact")
    try:
        source = bytes(parts[0]).decode()
        graph = json.loads(source)
        index = json.loads(bytes(parts[1]).decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # nested too deep: recursion
        raise ArtifactError(f"dnnl artifact: damaged JSON: {str(exc)[:200]}") from None
    blob = parts[2]
    if not isinstance(index, dict):
        raise ArtifactError("dnnl artifact: the weight index is not an object")
    weights: dict[str, np.ndarray] = {}
    for name, entry in index.items():
        ok = isinstance(entry, list) and len(entry) in (2, 3)
        if ok and len(entry) == 3:
            ok = entry[2] in CONST_DTYPES[1:]
        dtype = np.dtype("<f4" if not ok or len(entry) == 2 else entry[2])
        ok = ok and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in entry[:2]
        )
        if not ok or entry[0] % 4 or entry[0] + dtype.itemsize * entry[1] > len(blob):
            raise ArtifactError(
                f"dnnl artifact: weight {name!r} has an unknown dtype or lies outside the data"
            )
        weights[name] = np.frombuffer(blob, dtype, entry[1], entry[0]).astype(
            dtype.newbyteorder("=")
        )
    validate(graph, weights)
    if version == _FORMAT_VERSION:
        return Artifact(source, weights)
    return _c_artifact(bytes(parts[3]), source, graph, weights, trust_native)


def _c_artifact(
    data: bytes,
    graph_source: str,
    graph: dict[str, Any],
    weights: dict[str, np.ndarray],
    trust_native: bool,
) -> Artifact:
    """The C source part: it must be the file generated from this very graph, so the C++
    compiled here never comes from the file unchecked. Its compiled library is kept only with
    ``trust_native``: otherwise the C++ is built here (or found in this machine's cache)."""
    header, cpp, library = native.unpack(data, C_MAGIC, "dnnl artifact (C source)")
    if header.get("symbol") != graph.get("symbol"):
        raise ArtifactError("dnnl artifact (C source): its symbol is not the graph's")
    if cpp != csource.generate(graph, weights):
        raise ArtifactError(
            "dnnl artifact (C source): the C++ is not what this byoc-dnnl generates from the "
            "graph (damaged, or written by another version): compile the model again"
        )
    kept = library if trust_native else None
    return Artifact(cpp, weights, ".cpp", graph_source=graph_source, library=kept)
