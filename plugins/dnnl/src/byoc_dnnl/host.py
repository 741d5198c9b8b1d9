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
- ``dequantize`` of a u8 or i8 tensor by one constant scale and zero point, to float32;
- ``permute`` (Transpose) of an integer tensor (``attrs.perm``).

A model may also end in integers: a CTC recogniser's ArgMax over its classes. Left to
onnxruntime, that too is a session of its own (0.23 ms of a CRNN's 11.5 ms run, for 0.02 ms of
numpy). So ``argmax`` and ``argmin`` (``attrs.axis``, ``keepdims``, ``last``: ONNX's
``select_last_index``) are host nodes that may read a kernel's float32 result, and run after the
native call, with the integer nodes that read them.

Every other host node reads only inputs, constants and other host nodes, so it is computed
before the native net runs. Kernels read only float32 nodes computed before them, so the native
code still sees checked float32 arrays. ``split`` makes the native part: a graph of the first
format where each host value a kernel reads is an input, and each kernel result a host node
reads is an output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from byoc import ArtifactError, InputError

KINDS = ("reshape", "expand", "cast", "gather", "dequantize", "permute", "argmax", "argmin")
ARG_KINDS = ("argmax", "argmin")  # the host kinds that may read a kernel's result
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
    if kind not in ARG_KINDS and any(r.get("op") == "kernel" for r in read):
        raise _bad(f"node {i}: a {kind} host node cannot read a kernel's result")
    x, out = read[1 if kind == "gather" else 0], node["dtype"]
    shape_x = tuple(x["shape"])
    integer = dtype(x) != "float32"
    attrs = node.get("attrs")
    if kind in ARG_KINDS:
        _validate_arg(i, node, shape_x, integer)
    elif kind == "permute":
        perm = attrs.get("perm") if isinstance(attrs, dict) else None
        if not isinstance(perm, list) or sorted(perm) != list(range(len(shape_x))):
            raise _bad(f"node {i}: perm {perm!r} is not a permutation of its input's axes")
        if not integer or out != dtype(x) or shape != tuple(shape_x[p] for p in perm):
            raise _bad(
                f"node {i}: a permute keeps its integer input's dtype and permutes its shape"
            )
    elif kind == "gather":
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


def _validate_arg(i: int, node: dict[str, Any], shape_x: tuple[int, ...], integer: bool) -> None:
    attrs = node.get("attrs")
    attrs = attrs if isinstance(attrs, dict) else {}
    axis, keep, last = attrs.get("axis"), attrs.get("keepdims"), attrs.get("last")
    if (
        not isinstance(axis, int)
        or not 0 <= axis < len(shape_x)
        or keep not in (0, 1)
        or last not in (0, 1)
    ):
        raise _bad(
            f"node {i}: {node['kind']} needs an axis of its input, keepdims and last (0 or 1)"
        )
    want = shape_x[:axis] + ((1,) if keep else ()) + shape_x[axis + 1 :]
    if integer or node["dtype"] != "int64" or tuple(node["shape"]) != want:
        raise _bad(f"node {i}: an {node['kind']} makes int64 {list(want)} of a float32 tensor")


def _expands(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(src[::-1], dst[::-1], strict=False))


def after_kernels(nodes: list[Any]) -> set[int]:
    """The host nodes that read a kernel's result, or read such a node: they run after the
    native call."""
    after: set[int] = set()
    for i, n in enumerate(nodes):
        if n["op"] == "host" and any(nodes[v]["op"] == "kernel" or v in after for v in n["inputs"]):
            after.add(i)
    return after


def kernel_reads(nodes: list[Any]) -> set[int]:
    """The nodes the kernels read: their inputs and their post-ops' operands."""
    read: set[int] = set()
    for n in nodes:
        if n["op"] == "kernel":
            read.update(v for v in n["inputs"] if v >= 0)
            read.update(p["input"] for p in n.get("post_ops", []) if "input" in p)
    return read


def split(
    graph: dict[str, Any], weights: Mapping[str, np.ndarray]
) -> tuple[dict[str, Any], Host | None]:
    """A validated graph's native part (a graph without host nodes or integer inputs) and the
    host steps around it (None when there are none)."""
    nodes = graph["nodes"]
    if not any(n["op"] == "host" or dtype(n) != "float32" for n in nodes):
        return graph, None
    after = after_kernels(nodes)
    read = kernel_reads(nodes)
    if read & after:
        raise _bad("a kernel reads a host node that runs after the kernels")
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
    # the native outputs: the kernel heads, then the kernel results only host nodes read
    outs = [h for h in graph["heads"] if nodes[h]["op"] == "kernel"]
    for i in sorted(after):
        outs += [v for v in nodes[i]["inputs"] if nodes[v]["op"] == "kernel" and v not in outs]
    native = {
        **graph,
        "nodes": native_nodes,
        "arg_nodes": [new[old] for old in args],
        "heads": [new[h] for h in outs],
    }
    return native, Host(graph, weights, args, outs, after)


class Host:
    """A graph's host steps: ``run`` checks the inputs, computes the host nodes that come
    before the kernels, calls the native net on the float32 values it reads, computes the
    host nodes after it, and returns the outputs in signature order."""

    def __init__(
        self,
        graph: dict[str, Any],
        weights: Mapping[str, np.ndarray],
        native_args: list[int],
        native_outs: list[int],
        after: set[int],
    ) -> None:
        nodes = graph["nodes"]
        self.symbol = str(graph.get("symbol", "dnnl"))
        self.inputs = [
            (i, tuple(nodes[i]["shape"]), np.dtype(dtype(nodes[i]))) for i in graph["arg_nodes"]
        ]
        steps = _cast_before_expand(
            [(i, n) for i, n in enumerate(nodes) if n["op"] == "host"], set(graph["heads"])
        )
        self.steps = [(i, n) for i, n in steps if i not in after]
        self.after = [(i, n) for i, n in steps if i in after]
        read = {v for _, n in steps for v in n["inputs"] if nodes[v]["op"] == "const"}
        self.consts = {i: weights[nodes[i]["name"]].reshape(nodes[i]["shape"]) for i in read}
        self.native_args = native_args
        self.native_outs = native_outs
        self.heads = [(h, h in native_outs) for h in graph["heads"]]

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
        outs = native([np.ascontiguousarray(values[i]) for i in self.native_args])
        values.update(zip(self.native_outs, outs, strict=True))
        for i, node in self.after:
            values[i] = self._step(node, [values[v] for v in node["inputs"]])
        return [values[h] if native else np.array(values[h], order="C") for h, native in self.heads]

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
        if kind == "permute":
            return args[0].transpose(node["attrs"]["perm"])
        if kind in ARG_KINDS:
            return _arg(kind, args[0], node["attrs"]).reshape(shape)
        table, idx = args
        axis = node["attrs"]["axis"]
        n = table.shape[axis]
        if idx.size and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise InputError(
                f"{self.symbol}: {node.get('name', 'a gather')}: an index is outside "
                f"[{-n}, {n - 1}], the rows of its table"
            )
        return np.take(table, idx, axis=axis)


def _arg(kind: str, x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """ONNX's ArgMax or ArgMin along ``axis``: the first index of the extreme value, or the
    last with ``last``; int64."""
    axis = attrs["axis"]
    find = np.argmax if kind == "argmax" else np.argmin
    if not attrs["last"]:
        return find(x, axis=axis).astype(np.int64, copy=False)
    flipped = find(np.flip(x, axis), axis=axis)
    return (x.shape[axis] - 1 - flipped).astype(np.int64, copy=False)


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
