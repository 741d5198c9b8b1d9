"""The DNNL JSON runtime: a validated JSON graph becomes one native oneDNN net.

``Runtime.run`` checks the inputs (count, dtype, shape; copies non-contiguous arrays) before any
native call, then runs the whole partition in one C call with the GIL released. The native net
hands each concurrent call its own buffers, so ``run`` is reentrant and thread-safe.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from byoc import InputError

from byoc_dnnl import host, kinds, native
from byoc_dnnl.codegen import FORMAT, FORMAT_HOST, Artifact
from byoc_dnnl.kinds.base import bad, ints

_MAX_ELEMENTS = 1 << 34


def validate(graph: Any, weights: Mapping[str, np.ndarray]) -> None:
    """Check a JSON graph's structure; raise ArtifactError saying what is wrong.

    The native side checks the shapes each oneDNN primitive needs; this checks everything that
    would make it read memory it does not own: references, shapes, constant sizes.
    """
    if not isinstance(graph, dict) or graph.get("format") not in (FORMAT, FORMAT_HOST):
        raise bad(f"not a {FORMAT} or {FORMAT_HOST} graph")
    nodes = graph.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise bad("'nodes' must be a non-empty list")
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise bad(f"node {i} is not an object")
        shape = ints(node.get("shape"), f"node {i} shape", lo=1)
        if not 1 <= len(shape) <= 6 or math.prod(shape) > _MAX_ELEMENTS:
            raise bad(f"node {i} has an unsupported shape {shape}")
        op = node.get("op")
        if op == "const":
            value = weights.get(node.get("name"))  # type: ignore[arg-type]
            if value is None:
                raise bad(f"node {i}: constant {node.get('name')!r} has no weights")
            want = host.dtype(node)
            if (
                want not in host.CONST_DTYPES
                or value.dtype != want
                or value.size != math.prod(shape)
            ):
                raise bad(
                    f"node {i}: constant {node.get('name')!r} does not have "
                    f"{math.prod(shape)} {want} values"
                )
        elif op == "kernel":
            kinds.validate_kernel(i, node)
            reads = [v for v in node["inputs"] if v >= 0]
            reads += [p["input"] for p in node.get("post_ops", []) if "input" in p]
            if any(host.dtype(nodes[v]) != "float32" for v in reads):
                raise bad(f"node {i}: a kernel reads an integer tensor")
        elif op == "host":
            host.validate_host(i, node, nodes)
        elif op != "input" or host.dtype(node) not in host.DTYPES:
            raise bad(f"node {i} has unknown op {op!r} or dtype {node.get('dtype')!r}")
    args = ints(graph.get("arg_nodes"), "arg_nodes")
    heads = ints(graph.get("heads"), "heads")
    if any(a >= len(nodes) or nodes[a].get("op") != "input" for a in args):
        raise bad("arg_nodes must name input nodes")
    if sorted(args) != [i for i, n in enumerate(nodes) if n.get("op") == "input"]:
        raise bad("arg_nodes must list every input node once")
    if any(h >= len(nodes) or nodes[h].get("op") not in ("kernel", "host") for h in heads):
        raise bad("heads must name kernel or host nodes")
    if not any(nodes[h]["op"] == "kernel" for h in heads) and not host.after_kernels(nodes):
        raise bad("heads must name a kernel node, or a host node that reads one")
    if len(set(heads)) != len(heads):
        raise bad("heads names a node twice")


class Runtime:
    """A partition's native oneDNN net; ``run`` is reentrant and thread-safe."""

    def __init__(self, artifact: Artifact, config: Mapping[str, Any]) -> None:
        try:
            graph = artifact.graph
        except ValueError as exc:
            raise bad(f"the JSON graph does not parse: {exc}") from None
        validate(graph, artifact.weights)
        graph, self._host = host.split(graph, artifact.weights)
        self.symbol = str(graph.get("symbol", "dnnl"))
        self.threads = threads(config)
        self._ffi, self._lib = native.load()
        lib = self._lib
        err = self._ffi.new("char[]", 512)
        bf16 = 1 if config.get("fpmath", "strict") == "bf16" else 0
        winograd = 1 if config.get("winograd", True) else 0
        net = lib.bd_create(bf16, winograd, self.threads, err, 512)
        if net == self._ffi.NULL:
            raise bad(self._ffi.string(err).decode())
        self._net = self._ffi.gc(net, lib.bd_destroy)
        self._keep: list[Any] = []
        nodes = graph["nodes"]
        ids: dict[int, int] = {}
        for i in graph["arg_nodes"]:  # inputs first, in signature order
            dims = self._ffi.new("int64_t[]", nodes[i]["shape"])
            ids[i] = lib.bd_tensor(self._net, len(nodes[i]["shape"]), dims)
            self._check(ids[i], f"input node {i}")
            self._check(lib.bd_input(self._net, ids[i]), f"input node {i}")
        for i, node in enumerate(nodes):
            if node["op"] != "input":
                ids[i] = self._add(i, node, ids, artifact.weights)
        for h in graph["heads"]:
            self._check(lib.bd_output(self._net, ids[h]), f"head {h}")
        self._check(lib.bd_finalize(self._net), "finalize")
        self.inputs = [tuple(nodes[i]["shape"]) for i in graph["arg_nodes"]]
        self.outputs = [tuple(nodes[h]["shape"]) for h in graph["heads"]]
        self.arena_bytes = int(lib.bd_arena_bytes(self._net))
        self._lock = threading.Lock()

    def _check(self, status: int, where: str) -> None:
        if status < 0:
            msg = self._ffi.string(self._lib.bd_error(self._net)).decode(errors="replace")
            raise bad(f"{self.symbol}: {where}: oneDNN refused it: {msg}")

    def _add(
        self, i: int, node: dict[str, Any], ids: dict[int, int], weights: Mapping[str, np.ndarray]
    ) -> int:
        ffi, lib = self._ffi, self._lib
        dims = ffi.new("int64_t[]", node["shape"])
        if node["op"] == "const":
            data = np.ascontiguousarray(weights[node["name"]], dtype=np.float32)
            values = ffi.from_buffer("float[]", data)
            tid = lib.bd_const(self._net, len(node["shape"]), dims, values)
            self._check(tid, f"node {i}")
            return int(tid)
        tid = lib.bd_tensor(self._net, len(node["shape"]), dims)
        self._check(tid, f"node {i}")
        ins = [ids[v] if v >= 0 else -1 for v in node["inputs"]]
        ip, fp = kinds.pack(i, node, ids)
        status = lib.bd_op(
            self._net,
            kinds.BY_NAME[node["kind"]].id,
            len(ins),
            ffi.new("int[]", ins),
            tid,
            len(ip),
            ffi.new("int64_t[]", ip),
            len(fp),
            ffi.new("float[]", fp),
        )
        self._check(status, f"node {i} ({node.get('name')}, {node['kind']})")
        return int(tid)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the partition: arrays in signature order -> arrays in signature order."""
        return host.around(self._host, inputs, lambda args: self._run(args, self._ffi.NULL))

    def profile(self, inputs: Sequence[np.ndarray]) -> list[tuple[int, float]]:
        """Run once, timing each native step: ``[(kernel index or -1, seconds)]``.

        The kernel index counts the graph's kernel nodes in order; -1 marks the reorders
        into the caller's output arrays.
        """
        steps = int(self._lib.bd_steps(self._net))
        times = self._ffi.new("double[]", max(steps, 1))
        host.around(self._host, inputs, lambda args: self._run(args, times))
        return [(int(self._lib.bd_step_op(self._net, i)), times[i]) for i in range(steps)]

    def implementations(self) -> list[tuple[int, str]]:
        """``(kernel index, "<primitive kind> <implementation>")`` of each native step, as
        oneDNN chose them (e.g. ``"softmax ref:any"``); kernel index -1 as in ``profile``."""
        lib, ffi = self._lib, self._ffi
        return [
            (int(lib.bd_step_op(self._net, i)), ffi.string(lib.bd_step_impl(self._net, i)).decode())
            for i in range(int(lib.bd_steps(self._net)))
        ]

    def kernel_threads(self) -> list[int]:
        """The OpenMP threads each native step's primitive was made for, in step order."""
        lib = self._lib
        return [int(lib.bd_step_threads(self._net, i)) for i in range(int(lib.bd_steps(self._net)))]

    def _run(self, inputs: Sequence[np.ndarray], times: Any) -> list[np.ndarray]:
        def call(ins: Any, outs: Any, err: Any, errlen: int) -> int:
            return int(self._lib.bd_run(self._net, ins, outs, times, err, errlen))

        return run_native(self._ffi, self.symbol, inputs, self.inputs, self.outputs, call)


def run_native(
    ffi: Any,
    symbol: str,
    inputs: Sequence[np.ndarray],
    shapes: Sequence[tuple[int, ...]],
    out_shapes: Sequence[tuple[int, ...]],
    call: Callable[[Any, Any, Any, int], int],
) -> list[np.ndarray]:
    """Check the inputs, make the outputs, and ``call(ins, outs, err, errlen)`` (a native run
    returning < 0 with a message in ``err`` on failure)."""
    args = check_inputs(symbol, inputs, shapes)
    outs = [np.empty(s, np.float32) for s in out_shapes]
    ins_p = ffi.new("void *[]", [ffi.from_buffer(a) for a in args])
    outs_p = ffi.new("void *[]", [ffi.from_buffer(o) for o in outs])
    err = ffi.new("char[]", 512)
    if call(ins_p, outs_p, err, 512) < 0:
        raise RuntimeError(f"{symbol}: oneDNN failed: {ffi.string(err).decode()}")
    return outs


def check_inputs(
    symbol: str, inputs: Sequence[np.ndarray], shapes: Sequence[tuple[int, ...]]
) -> list[np.ndarray]:
    """Contiguous float32 arrays of the given shapes, or InputError saying which is wrong."""
    if len(inputs) != len(shapes):
        raise InputError(f"{symbol}: expected {len(shapes)} inputs, got {len(inputs)}")
    args = []
    for k, (value, shape) in enumerate(zip(inputs, shapes, strict=True)):
        if not isinstance(value, np.ndarray) or value.dtype != np.float32:
            got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise InputError(f"{symbol}: input {k} is {got}, expected float32")
        if value.shape != shape:
            raise InputError(f"{symbol}: input {k} has shape {value.shape}, expected {shape}")
        args.append(np.ascontiguousarray(value))
    return args


def threads(config: Mapping[str, Any]) -> int:
    """OpenMP threads per run: the config's ``threads``, else one per core this process may use.

    Even a partition of tiny kernels runs faster on every core: one thread per partition of
    0.3 MFLOP convolutions was no faster, and made P1 0.62x onnxruntime instead of 0.54x.
    """
    if config.get("threads"):
        return int(config["threads"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, cores or 1)
