"""Codegen: a partition becomes a JSON graph of oneDNN kernels plus its constant weights.

In the spirit of TVM's JSON codegen: ``nodes`` (``input``, ``const`` and ``kernel`` nodes; a
kernel is named by its composite, e.g. ``dnnl.conv2d_bias_relu``), ``arg_nodes`` (the input
nodes, in signature order) and ``heads`` (the output nodes, in order). Every node has one output;
a kernel's ``inputs`` are node ids (``-1`` for an absent optional input).

Lowering (``byoc_dnnl.lowering``, each op and composite by its entry in ``byoc_dnnl.kinds``)
works on ONNX nodes, then a fusion pass
(``byoc_dnnl.fusion``) folds BatchNormalization and per-channel scale/shift into convolution and
matmul weights and turns the activations, residual additions and per-channel operations that
follow a kernel into oneDNN post-ops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from byoc import NodesRefused, Partition

from byoc_dnnl import host, kinds
from byoc_dnnl.fusion import Fuser
from byoc_dnnl.lowering import Lowering

FORMAT = "byoc-dnnl-json/1"
FORMAT_HOST = "byoc-dnnl-json/2"  # with host nodes or integer inputs (byoc_dnnl.host)


@dataclass
class Artifact:
    """A partition's JSON graph and weights; with ``codegen = "c"`` also the C++ file made from
    the graph and its compiled library. ``source`` and ``suffix`` are what ``byoc compile
    --dump-dir`` writes: the JSON graph, or the C++ file."""

    source: str
    weights: dict[str, np.ndarray]
    suffix: str = ".json"
    prebuilt: Any = field(default=None, repr=False, compare=False)  # (config key, Runtime)
    graph_source: str | None = None  # C source mode: the JSON graph (``source`` is the C++)
    library: Any = field(default=None, repr=False)  # C source mode: a byoc.native.Library

    @property
    def graph(self) -> dict[str, Any]:
        return json.loads(self.source if self.graph_source is None else self.graph_source)

    @property
    def graph_text(self) -> str:
        return self.source if self.graph_source is None else self.graph_source


# -- the JSON graph ---------------------------------------------------------------------------


def codegen(partition: Partition, fuse: bool = True) -> Artifact:
    """Lower, fuse and serialize one partition."""
    low = Lowering(partition, *kinds.lowerings())
    kernels = low.lower()
    if fuse:
        kernels = Fuser(low, set(partition.outputs)).run(kernels)
    ids: dict[str, int] = {}
    nodes: list[dict[str, Any]] = []
    weights: dict[str, np.ndarray] = {}

    def add(node: dict[str, Any], value: str) -> int:
        ids[value] = len(nodes)
        nodes.append(node)
        return ids[value]

    for name in partition.inputs:
        add(
            {"op": "input", "name": name, "shape": list(low.shape(name)), "dtype": low.dtype(name)},
            name,
        )

    def ref(value: str | None, hosted: bool = False) -> int:
        """The node of a value; a constant becomes a const node, float32 unless a host node
        reads it as u8 or i8 (a quantized embedding table)."""
        if value is None:
            return -1
        if value not in ids:
            c = low.const(value)
            if c is None:
                raise ValueError(f"value '{value}' is read before it is written")
            key = f"c{len(weights)}"
            dtype = c.dtype.name if hosted and c.dtype.name in host.CONST_DTYPES else "float32"
            weights[key] = np.ascontiguousarray(c, dtype=dtype)
            add({"op": "const", "name": key, "shape": list(c.shape) or [1], "dtype": dtype}, value)
        return ids[value]

    for k in kernels:
        inputs = [ref(v, k.kind in host.KINDS) for v in k.inputs]
        if k.kind in host.KINDS:
            node = {"op": "host", "name": k.name, "kind": k.kind, "inputs": inputs}
            node.update(shape=list(low.shape(k.output)), dtype=low.dtype(k.output))
            add({**node, "attrs": k.attrs, "members": k.members}, k.output)
            continue
        post = []
        for p in k.post_ops:
            p = dict(p)
            if "input" in p:
                p["input"] = ref(p["input"])
            post.append(p)
        add(
            {
                "op": "kernel",
                "name": k.name,
                "kind": k.kind,
                "inputs": inputs,
                "shape": list(low.shape(k.output)),
                "attrs": k.attrs,
                "post_ops": post,
                "members": k.members,
            },
            k.output,
        )
    hosted = {m for n in nodes if n["op"] == "host" for m in n["members"]}
    if hosted and not any(n["op"] == "kernel" for n in nodes):
        raise NodesRefused(dict.fromkeys(hosted, "its partition has no oneDNN kernel to run"))
    for name in partition.outputs:  # one folded to a constant (weights dequantized): copied out
        if name not in ids and _copy_out(name, low, ref, add) is None:
            made = [n.name for n in partition.model.graph.node if name in n.output]
            why = "its output is a constant that is not float32: onnxruntime hands it out"
            raise NodesRefused(dict.fromkeys(made, why))
    heads = [ids[name] for name in partition.outputs]
    after = host.after_kernels(nodes)
    if (
        host.kernel_reads(nodes) & after
    ):  # a kernel reads an ArgMax's result (through a Cast to float32, say)
        raise NodesRefused(
            {
                m: "a kernel of its partition reads what it computes"
                for i in after
                if nodes[i]["kind"] in host.ARG_KINDS
                for m in nodes[i]["members"]
            }
        )
    # kernel nodes carry no dtype: they compute float32 (or the int8 of their kind)
    has_host = any(n["op"] == "host" or n.get("dtype", "float32") != "float32" for n in nodes)
    graph = {
        "format": FORMAT_HOST if has_host else FORMAT,
        "symbol": partition.name,
        "nodes": nodes,
        "arg_nodes": [ids[n] for n in partition.inputs],
        "heads": heads,
    }
    return Artifact(json.dumps(graph, indent=1), weights)


def _copy_out(name: str, low: Lowering, ref: Any, add: Any) -> int | None:
    """A partition output folded to a float32 constant (the weights a DequantizeLinear makes,
    also an output of the model), written by a copy kernel: the runtime's heads are kernels.
    None for a constant of another type."""
    c = low.const(name)
    if c is None or c.dtype != np.float32:
        return None
    node = {"op": "kernel", "name": "dnnl.copy", "kind": "eltwise", "inputs": [ref(name)]}
    attrs = {"alg": "linear", "alpha": 1.0, "beta": 0.0}
    node |= {"shape": list(c.shape) or [1], "attrs": attrs, "post_ops": [], "members": []}
    return int(add(node, name))
