"""PartitionGraph: turn regions into standalone ONNX models, named and in run order."""

from __future__ import annotations

import heapq
import re

import onnx
from onnx import helper, numpy_helper

from byoc.errors import ModelError
from byoc.graph import Graph, subgraph_reads
from byoc.plan import FALLBACK, Composite, Partition


def partition_graph(
    graph: Graph,
    regions: list[tuple[str, list[int]]],
    composites: list[Composite],
    declared: dict[str, onnx.ValueInfoProto] | None = None,
) -> list[Partition]:
    """Build one Partition per region and return them in a topological run order.

    Rules: inputs are the non-constant values a region reads but does not produce,
    deduplicated, in first-use order; outputs are the values it produces that anything outside
    reads or that are graph outputs, deduplicated, in production order; every constant it reads
    is bound inside as an initializer. Symbols are ``<backend>_<n>``, numbered per backend in
    run order. Constant nodes are listed in the one backend partition that alone uses them.
    A region whose results nothing reads (dead code) becomes no unit; its nodes are listed
    with the fallback and never run. Fallback segments declare the model's inputs as the model
    does (``declared``): onnxruntime may refuse a model whose input dims were fixed (its
    inference inside If bodies can fail).
    """
    regions, copies = _copy_dequantized_constants(graph, regions)
    region_of = {node: r for r, (_, nodes) in enumerate(regions) for node in nodes}
    order = _toposort_regions(graph, [nodes for _, nodes in regions], region_of, copies)
    counters: dict[str, int] = {}
    units: list[Partition] = []
    by_region: dict[int, Partition] = {}
    for r in order:
        backend, nodes = regions[r]
        index = counters.get(backend, 0)
        counters[backend] = index + 1
        symbol = f"{backend}_{index}"
        names = {graph.nodes[n].name for n in nodes}
        unit = _extract(
            graph, nodes, symbol, backend, declared if backend == FALLBACK else None, copies
        )
        if not unit.outputs:  # dead code: nothing reads its results, so nothing runs it
            counters[backend] = index
            continue
        unit.composites = [c for c in composites if c.nodes[-1] in names]
        units.append(unit)
        by_region[r] = unit
    for const, r in _absorbed_constants(graph, region_of).items():
        if regions[r][0] != FALLBACK and r in by_region:
            by_region[r].nodes.append(graph.nodes[const].name)
    for unit in units:
        unit.nodes.sort(key=graph.index.__getitem__)
    return units


def _copy_dequantized_constants(
    graph: Graph, regions: list[tuple[str, list[int]]]
) -> tuple[list[tuple[str, list[int]]], set[int]]:
    """A DequantizeLinear of constants (a QDQ model's weights, biases and scalars) that a backend
    claimed is copied into every region reading it, of that backend or of the fallback, and
    dropped from a region that does not: like a constant node, it never makes a partition
    input, however the regions were cut. Returns the regions and the copied nodes (they depend
    on nothing)."""
    region_of = {node: r for r, (_, nodes) in enumerate(regions) for node in nodes}
    members = [set(nodes) for _, nodes in regions]
    copies: set[int] = set()
    for i, node in enumerate(graph.nodes):
        r = region_of.get(i)
        if node.op_type != "DequantizeLinear" or r is None or regions[r][0] == FALLBACK:
            continue
        value = node.output[0]
        readers = {region_of.get(u) for u in graph.consumers.get(value, [])}
        if (
            value in graph.outputs
            or not all(graph.is_constant(n) for n in node.input if n)
            or any(t is None or regions[t][0] not in (regions[r][0], FALLBACK) for t in readers)
        ):
            continue
        for t in readers:
            members[t].add(i)  # type: ignore[index]
        if r not in readers:
            members[r].discard(i)
        copies.add(i)
    kept = [(backend, sorted(m)) for (backend, _), m in zip(regions, members, strict=True) if m]
    return kept, copies


def _toposort_regions(
    graph: Graph, regions: list[list[int]], region_of: dict[int, int], copies: set[int]
) -> list[int]:
    succ: list[set[int]] = [set() for _ in regions]
    indegree = [0] * len(regions)
    for r, nodes in enumerate(regions):
        for n in nodes:
            if n in copies:  # its readers have their own copies
                continue
            for s in graph.succ(n):
                t = region_of[s]
                if t != r and t not in succ[r]:
                    succ[r].add(t)
                    indegree[t] += 1
    heap = [(regions[r][0], r) for r in range(len(regions)) if indegree[r] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, r = heapq.heappop(heap)
        order.append(r)
        for t in succ[r]:
            indegree[t] -= 1
            if indegree[t] == 0:
                heapq.heappush(heap, (regions[t][0], t))
    if len(order) != len(regions):
        raise ModelError("internal error: the partitions form a cycle")  # merges prevent this
    return order


def _constant_readers(graph: Graph) -> dict[str, list[int]]:
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for name in dict.fromkeys([*node.input, *subgraph_reads(node)]):
            if name and graph.is_constant(name):
                readers.setdefault(name, []).append(i)
    return readers


def _absorbed_constants(graph: Graph, region_of: dict[int, int]) -> dict[int, int]:
    """Constant nodes whose every use lies in one region: node -> region."""
    readers = _constant_readers(graph)
    outputs = set(graph.outputs)
    owner: dict[int, int | None] = {}
    for c in sorted(graph.const_nodes, reverse=True):  # users come later in topological order
        found: set[int | None] = set()
        for value in graph.nodes[c].output:
            if value in outputs:
                found.add(None)
            for user in readers.get(value, []):
                found.add(owner.get(user) if user in graph.const_nodes else region_of.get(user))
        owner[c] = found.pop() if len(found) == 1 else None
    return {c: r for c, r in owner.items() if r is not None}


def _extract(
    graph: Graph,
    nodes: list[int],
    symbol: str,
    backend: str,
    declared: dict[str, onnx.ValueInfoProto] | None,
    copies: set[int],
) -> Partition:
    members = set(nodes)
    produced = {v for n in nodes for v in graph.nodes[n].output if v}
    graph_outputs = set(graph.outputs)
    inputs: list[str] = []
    constants: list[str] = []
    for n in nodes:
        node = graph.nodes[n]
        for name in dict.fromkeys([*node.input, *subgraph_reads(node)]):
            if not name or name in produced:
                continue
            (constants if graph.is_constant(name) else inputs).append(name)
    inputs = list(dict.fromkeys(inputs))
    constants = list(dict.fromkeys(constants))
    outputs = [
        v
        for n in nodes
        if n not in copies  # each reader has its own
        for v in graph.nodes[n].output
        if v and (v in graph_outputs or any(u not in members for u in graph.consumers.get(v, ())))
    ]
    model = _model(graph, nodes, inputs, outputs, constants, symbol, declared or {})
    names = [graph.nodes[n].name for n in nodes]
    return Partition(symbol, backend, names, inputs, list(dict.fromkeys(outputs)), model)


def _model(
    graph: Graph,
    nodes: list[int],
    inputs: list[str],
    outputs: list[str],
    constants: list[str],
    symbol: str,
    declared: dict[str, onnx.ValueInfoProto],
) -> onnx.ModelProto:
    src = graph.model
    infos = {v.name: v for v in [*src.graph.input, *src.graph.value_info, *src.graph.output]}
    infos.update(declared)
    # IR 3 wants every initializer listed as a graph input too (old exporters' weights); a
    # partition's constants are not, which IR 4 allows
    model = onnx.ModelProto(ir_version=max(src.ir_version, 4), producer_name="byoc")
    model.opset_import.extend(src.opset_import)
    model.functions.extend(src.functions)
    g = model.graph  # filled in place: make_model would copy the weights once more
    g.name = symbol
    g.node.extend(graph.nodes[n] for n in nodes)
    for name in inputs:
        g.input.append(_value_info(infos, name, symbol, required=True, src=src))
    for name in dict.fromkeys(outputs):
        g.output.append(_value_info(infos, name, symbol, required=False))
    for name in constants:
        if name in graph.initializers:
            g.initializer.append(graph.initializers[name])
        else:
            value = graph.constant(name)
            assert value is not None  # is_constant(name) holds for every name in constants
            g.initializer.append(numpy_helper.from_array(value, name))
    boundary = set(inputs) | set(outputs)
    for n in nodes:
        for v in graph.nodes[n].output:
            if v in infos and v not in boundary:
                g.value_info.append(infos[v])
    return model


def _value_info(
    infos: dict[str, onnx.ValueInfoProto],
    name: str,
    symbol: str,
    required: bool,
    src: onnx.ModelProto | None = None,
) -> onnx.ValueInfoProto:
    info = infos.get(name)
    if info is not None and info.type.ByteSize():
        return info
    if required:
        stop = _inference_stop(src) if src is not None else ""
        raise ModelError(
            f"cannot tell the type of '{name}', an input of {symbol}: ONNX shape inference "
            + (
                f"stops at {stop}; the model may not run at these input shapes (does "
                "onnxruntime?): fix them with [shapes]"
                if stop
                else "could not infer it; fix the model's input shapes with [shapes]"
            )
        )
    return helper.make_empty_tensor_value_info(name)


def _inference_stop(model: onnx.ModelProto) -> str:
    """Where strict ONNX shape inference fails on the model (shapes that contradict each other,
    as a Concat of 24 and 32 rows), in one line; "" when it does not."""
    try:
        onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:  # InferenceError, or a protobuf too large to copy
        found = re.search(r"\(op_type:[^)]*\): \[[^\]]*\] [^\n(]*", str(exc))
        return found.group(0).strip() if found else ""
    return ""
