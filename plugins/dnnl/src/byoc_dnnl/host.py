"""Host steps: the work on integer tensors that a partition does before its native net.

A transformer reads int64 token ids and an int64 attention mask. What it computes from them
before its first layer is small: rows of the embedding table (Gather), the mask cast to float32,
unsqueezed and expanded. Left to onnxruntime, that is a session of its own before the partition
(0.26 ms of MiniLM's 9 ms run, for 0.07 ms of work). A JSON graph may hold these as ``host``
nodes that the runtime computes with numpy, before the native call:

- ``reshape`` (Reshape, Flatten, Squeeze, Unsqueeze, Identity) and ``expand`` of an integer
  tensor;
- ``cast`` of an integer tensor to float32;
- ``gather`` of a constant table at integer indices (``attrs.axis``), the indices checked
  against the table first; the table is float32, or u8 or i8 (a quantized embedding table);
- ``dequantize`` of a u8 or i8 tensor by one constant scale and zero point, to float32.

A host node reads only inputs, constants and other host nodes, so every host node can be
computed before the native net runs. Kernels read only float32 nodes, so the native code still
sees checked float32 arrays. ``split`` makes the native part: a graph of the first format
where each host value a kernel reads is an input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from byoc import ArtifactError, InputError

KINDS = ("reshape", "expand", "cast", "gather", "dequantize")
DTYPES = (
    "float32",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint64",
    "uint32",
    "uint16",
    "uint8",
    "bool",
)

CONST_DTYPES = ("float32", "uint8", "int8")  # u8 and i8: quantized embedding tables
Native = Callable[[list[np.ndarray]], list[np.ndarray]]


def _bad(msg: str) -> ArtifactError:
    return ArtifactError(f"dnnl artifact: {msg}")


def dtype(node: Mapping[str, Any]) -> str:
    """The dtype of a node's value (kernels are float32, and nodes that do not say)."""
    return "float32" if node.get("op") == "kernel" else str(node.get("dtype", "float32"))


def validate_host(i: int, node: dict[str, Any], nodes: list[Any]) -> None:
    """Check a host node against the nodes it reads (their shapes checked before)."""
    kind, inputs, shape = node.get("kind"), node.get("inputs"), tuple(node["shape"])
    if kind not in KINDS:
        raise _bad(f"node {i} has unknown host kind {kind!r}")
    if node.get("dtype") not in DTYPES:
        raise _bad(f"node {i} has unknown dtype {node.get('dtype')!r}")
    arity = {"gather": 2, "dequantize": 3}.get(kind, 1)
    if (
        not isinstance(inputs, list)
        or len(inputs) != arity
        or not all(isinstance(v, int) and 0 <= v < i for v in inputs)
    ):
        raise _bad(f"node {i}: a {kind} host node reads {arity} nodes that come before it")
    read = [nodes[v] for v in inputs]
    if any(r.get("op") == "kernel" for r in read):
        raise _bad(f"node {i}: a host node cannot read a kernel's result")
    x, out = read[1 if kind == "gather" else 0], node["dtype"]
    shape_x = tuple(x["shape"])
    integer = dtype(x) != "float32"
    if kind == "gather":
        attrs = node.get("attrs")
        table, axis = (
            tuple(read[0]["shape"]),
            attrs.get("axis") if isinstance(attrs, dict) else None,
        )
        if read[0].get("op") != "const" or not integer or out != dtype(read[0]):
            raise _bad(f"node {i}: a gather reads a constant table at integer indices")
        if not isinstance(axis, int) or not 0 <= axis < len(table):
            raise _bad(f"node {i}: gather axis {axis!r} is not an axis of its table")
        if shape != table[:axis] + shape_x + table[axis + 1 :]:
            raise _bad(f"node {i}: shape {list(shape)} is not what its gather makes")
    elif kind == "dequantize":
        scale, zero = read[1], read[2]
        if (
            dtype(x) not in CONST_DTYPES[1:]
            or out != "float32"
            or shape != shape_x
            or any(r.get("op") != "const" or math.prod(r["shape"]) != 1 for r in (scale, zero))
            or dtype(scale) != "float32"
            or dtype(zero) != dtype(x)
        ):
            raise _bad(
                f"node {i}: a dequantize makes float32 of a u8 or i8 tensor of its shape with "
                "one constant scale and zero point"
            )
    elif kind == "cast":
        if not integer or out != "float32" or shape != shape_x:
            raise _bad(f"node {i}: a cast makes float32 of an integer tensor of its shape")
    elif not integer or out != dtype(x):
        raise _bad(f"node {i}: a {kind} host node keeps its integer input's dtype")
    elif kind == "reshape" and math.prod(shape) != math.prod(shape_x):
        raise _bad(f"node {i}: cannot reshape {list(shape_x)} to {list(shape)}")
    elif kind == "expand" and not _expands(shape_x, shape):
        raise _bad(f"node {i}: cannot expand {list(shape_x)} to {list(shape)}")


def _expands(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(src[::-1], dst[::-1], strict=False))


def split(
    graph: dict[str, Any], weights: Mapping[str, np.ndarray]
) -> tuple[dict[str, Any], Host | None]:
    """A validated graph's native part (a graph without host nodes or integer inputs) and the
    host steps around it (None when there are none)."""
    nodes = graph["nodes"]
    if not any(n["op"] == "host" or dtype(n) != "float32" for n in nodes):
        return graph, None
    read: set[int] = set()
    for n in nodes:
        if n["op"] == "kernel":
            read.update(v for v in n["inputs"] if v >= 0)
            read.update(p["input"] for p in n.get("post_ops", []) if "input" in p)
    keep = [i for i, n in enumerate(nodes) if n["op"] == "kernel" or i in read]
    new = {old: k for k, old in enumerate(keep)}
    native_nodes = []
    for old in keep:
        n = nodes[old]
        if n["op"] == "host":  # a host value the kernels read: an input of the native net
            n = {"op": "input", "name": n.get("name", ""), "shape": n["shape"], "dtype": "float32"}
        elif n["op"] == "kernel":
            n = dict(n, inputs=[new[v] if v >= 0 else -1 for v in n["inputs"]])
            n["post_ops"] = [
                dict(p, input=new[p["input"]]) if "input" in p else p for p in n.get("post_ops", [])
            ]
        native_nodes.append(n)
    args = [old for old in keep if nodes[old]["op"] in ("input", "host")]
    native = {
        **graph,
        "nodes": native_nodes,
        "arg_nodes": [new[old] for old in args],
        "heads": [new[h] for h in graph["heads"] if nodes[h]["op"] == "kernel"],
    }
    return native, Host(graph, weights, args)


class Host:
    """A graph's host steps: ``run`` checks the inputs, computes the host nodes, calls the
    native net on the float32 values it reads, and returns the outputs in signature order."""

    def __init__(
        self, graph: dict[str, Any], weights: Mapping[str, np.ndarray], native_args: list[int]
    ) -> None:
        nodes = graph["nodes"]
        self.symbol = str(graph.get("symbol", "dnnl"))
        self.inputs = [
            (i, tuple(nodes[i]["shape"]), np.dtype(dtype(nodes[i]))) for i in graph["arg_nodes"]
        ]
        self.steps = _cast_before_expand(
            [(i, n) for i, n in enumerate(nodes) if n["op"] == "host"], set(graph["heads"])
        )
        read = {v for _, n in self.steps for v in n["inputs"] if nodes[v]["op"] == "const"}
        self.consts = {i: weights[nodes[i]["name"]].reshape(nodes[i]["shape"]) for i in read}
        self.native_args = native_args
        self.heads = [h if nodes[h]["op"] == "host" else -1 for h in graph["heads"]]

    def run(self, inputs: Sequence[np.ndarray], native: Native) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise InputError(
                f"{self.symbol}: expected {len(self.inputs)} inputs, got {len(inputs)}"
            )
        values: dict[int, np.ndarray] = dict(self.consts)
        for k, ((i, shape, want), value) in enumerate(zip(self.inputs, inputs, strict=True)):
            if not isinstance(value, np.ndarray) or value.dtype != want:
                got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
                raise InputError(f"{self.symbol}: input {k} is {got}, expected {want}")
            if value.shape != shape:
                raise InputError(
                    f"{self.symbol}: input {k} has shape {value.shape}, expected {shape}"
                )
            values[i] = value
        for i, node in self.steps:
            values[i] = self._step(node, [values[v] for v in node["inputs"]])
        outs = iter(native([np.ascontiguousarray(values[i]) for i in self.native_args]))
        return [next(outs) if h < 0 else np.array(values[h]) for h in self.heads]

    def _step(self, node: dict[str, Any], args: list[np.ndarray]) -> np.ndarray:
        kind, shape = node["kind"], tuple(node["shape"])
        if kind == "reshape":
            return args[0].reshape(shape)
        if kind == "expand":
            return np.broadcast_to(args[0], shape)
        if kind == "dequantize":  # as onnxruntime: (x - zero point) * scale, in float32
            x, scale, zero = args  # in one buffer: cold after a run, each new one cost 30 us
            y = np.subtract(x, np.float32(zero.item()), dtype=np.float32)
            return np.multiply(y, np.float32(scale.item()), out=y)
        if kind == "cast":  # of a smaller tensor, then expanded: see _cast_before_expand
            y = args[0].astype(np.float32)
            return y if y.shape == shape else np.broadcast_to(y, shape)
        table, idx = args
        axis = node["attrs"]["axis"]
        n = table.shape[axis]
        if idx.size and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise InputError(
                f"{self.symbol}: {node.get('name', 'a gather')}: an index is outside "
                f"[{-n}, {n - 1}], the rows of its table"
            )
        return np.take(table, idx, axis=axis)


def _cast_before_expand(
    steps: list[tuple[int, dict[str, Any]]], heads: set[int]
) -> list[tuple[int, dict[str, Any]]]:
    """The steps, with each Cast of an Expand that only it reads made a Cast of the Expand's
    input: the small tensor is cast and the cast expanded (a pooling mask, int64 [1, 128, 1]
    expanded to [1, 128, 384]: 7 us instead of 15)."""
    readers: dict[int, int] = {}
    for _, n in steps:
        for v in n["inputs"]:
            readers[v] = readers.get(v, 0) + 1
    by_id = dict(steps)
    gone = set()
    out = []
    for i, n in steps:
        src = n["inputs"][0]
        x = by_id.get(src) if n["kind"] == "cast" and src not in heads else None
        if x is not None and x["kind"] == "expand" and readers[src] == 1:
            gone.add(src)
            n = dict(n, inputs=x["inputs"])
        out.append((i, n))
    return [(i, n) for i, n in out if i not in gone]


def around(host: Host | None, inputs: Sequence[np.ndarray], native: Native) -> list[np.ndarray]:
    """Run a partition: its host steps around the native call, if it has any."""
    return native(list(inputs)) if host is None else host.run(inputs, native)
