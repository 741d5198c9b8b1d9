"""The partitioning pipeline, TVM's steps on ONNX, read top to bottom in ``partition``."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

import onnx
from onnx import numpy_helper

from byoc.config import Config
from byoc.context import Active, ConfigLike, Context, resolve
from byoc.errors import ConfigError
from byoc.graph import Graph, subgraph_reads
from byoc.loading import read_model, specialize
from byoc.passes import PassState, run_pass
from byoc.passes.annotate import Candidate, annotate_target
from byoc.passes.merge_composite import merge_composite
from byoc.passes.merge_regions import Regions, grow, merge_compiler_regions
from byoc.passes.partition import partition_graph
from byoc.passes.prune import PruneRule, prune_regions
from byoc.plan import FALLBACK, Composite, Decision, Partition, Plan
from byoc.plugins import Registry

ModelLike = str | os.PathLike[str] | bytes | onnx.ModelProto


def _check_op_names(a: Active, claims: Mapping[str, Any], cfg: Config) -> None:
    """``ops`` and ``exclude_ops`` name ONNX op types or ops the backend claims: a misspelt
    name would silently claim nothing (or exclude nothing)."""
    for key in ("ops", "exclude_ops"):
        unknown = [op for op in a.table[key] or () if op not in claims and not _is_onnx_op(op)]
        if unknown:
            raise ConfigError(
                f"{cfg.source}: 'backend.{a.name}.{key}' names {', '.join(map(repr, unknown))}, "
                f"which is not an ONNX op type nor one {a.name} claims "
                f"(it claims {', '.join(sorted(claims)) or 'nothing'})"
            )


def _is_onnx_op(op: str) -> bool:
    return any(
        onnx.defs.has(op, domain) for domain in ("", "ai.onnx.ml", "ai.onnx.preview.training")
    )


def partition(
    model: ModelLike | Plan,
    config: Context | ConfigLike = None,
    *,
    vetoes: Mapping[str, Mapping[str, str]] | None = None,
    registry: Registry | None = None,
) -> Plan:
    """Partition a model between the configured backends and onnxruntime.

    ``model`` may be a plan: its model is partitioned again, as read and specialized for it
    (with other ``[shapes]``, specialized anew), so measured placement's rounds do not read,
    check and infer a large model's weights each time.
    ``vetoes`` maps node names to ``{backend: reason}``: those backends may not claim those
    nodes, alone or in a composite (measured placement returns losing partitions this way).
    ``registry`` is the plugins to use (default: ``byoc.registry()``, the installed ones);
    ``config`` may be a resolved ``Context`` (``byoc.context.resolve``) instead of both.
    """
    ctx = resolve(config, registry)
    cfg, reg, active, skipped = ctx.config, ctx.registry, ctx.active, ctx.skipped
    source, graph = _loaded(model, cfg)  # 1. load: names, order, [shapes], inference
    known = graph.index.keys() | {n.name for n in source.graph.node}  # folded ones too
    unknown = [k for k in vetoes or {} if k not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=3, cutoff=0.5)
        raise ConfigError(
            f"vetoes name {len(unknown)} node(s) the model does not have, first '{unknown[0]}'"
            + (f" (near names: {', '.join(close)})" if close else "")
        )
    vetoed = {graph.index[k]: dict(v) for k, v in (vetoes or {}).items() if k in graph.index}
    candidates = [
        Candidate(
            a.name, reg.supported_ops(a.name, a.table), a.table["ops"], a.table["exclude_ops"]
        )
        for a in active
    ]
    for a, c in zip(active, candidates, strict=True):
        _check_op_names(a, c.checks, cfg)
    allowed = {c.name: c.allowed for c in candidates}
    tables = [(a.name, reg.pattern_table(a.name, a.table)) for a in active]
    rules = {
        a.name: PruneRule(
            a.table["min_partition_nodes"], a.backend.prune if a.table["prune"] else None
        )
        for a in active
    }
    state = PassState.start(graph)
    state = run_pass(  # 2. MergeComposite
        "MergeComposite",
        merge_composite,
        state,
        tables,
        lambda b, i: vetoed.get(i, {}).get(b) or allowed[b](graph.nodes[i].op_type),
    )
    state = run_pass("AnnotateTarget", annotate_target, state, candidates, vetoed)  # 3.
    state = run_pass("MergeCompilerRegions", merge_compiler_regions, state)  # 4.
    state = run_pass("Prune", prune_regions, state, rules)
    units = run_pass("PartitionGraph", _partition_graph, state, source)  # 5. PartitionGraph
    if len(units) == 1 and units[0].backend == FALLBACK:
        as_read(units[0], source)
    rewriters = {a.name for a in active if a.backend.optimizes_graphs}
    reads: list[list[str]] = []  # per node of the model as read, once for every partition
    for unit in units:
        if unit.backend in rewriters:
            reads = reads or [[*n.input, *subgraph_reads(n)] for n in source.graph.node]
            as_original(unit, source, graph, reads)
    plan = _plan(state, units, skipped, cfg)
    plan.source, plan.graph = source, graph
    graph.drop_weights()  # the plan is kept while backends copy its partitions' weights
    return plan


def _loaded(model: ModelLike | Plan, cfg: Config) -> tuple[onnx.ModelProto, Graph]:
    """The model as read, and the analysis of it specialized for ``cfg``'s shapes."""
    if not isinstance(model, Plan):
        source = read_model(model)
        return source, Graph(specialize(source, cfg.shapes))
    if model.source is None:  # a plan made by hand: its model is the source
        return _loaded(model.model, cfg)
    if model.graph is not None and model.config is not None and model.config.shapes == cfg.shapes:
        return model.source, model.graph
    return model.source, Graph(specialize(model.source, cfg.shapes))


def _partition_graph(state: PassState, source: onnx.ModelProto) -> list[Partition]:
    """The kept regions, and what is left grouped into as few onnxruntime sessions as the
    cycle check allows, as partitions in run order."""
    graph, labels = state.graph, state.labels
    fallback = [
        FALLBACK if lab is None and i not in graph.const_nodes else None
        for i, lab in enumerate(labels)
    ]
    for k, nodes in enumerate(state.regions):  # partitions are contracted units in the cycle check
        for i in nodes:
            fallback[i] = f"{FALLBACK}:partition {k}"  # a label of its own: never merged
    leftover = Regions(graph, fallback, state.regions)
    grow(leftover, any_pair=True)
    composites = [
        Composite(m.name, tuple(graph.nodes[i].name for i in m.members), m.bound)
        for m in state.matches
        if labels[m.members[-1]] is not None
    ]
    kept = [(labels[r[0]] or FALLBACK, list(r)) for r in state.regions]
    return partition_graph(
        graph,
        kept + [(FALLBACK, r) for r in leftover.regions() if fallback[r[0]] == FALLBACK],
        composites,
        declared={v.name: v for v in source.graph.input},
    )


def as_read(unit: Partition, source: onnx.ModelProto) -> None:
    """Make the one onnxruntime session of a plan with no partition run the model as read:
    byoc's rewrite (constants folded, shapes fixed) can cost onnxruntime some of its own
    fusions (MiniLM ran 7% slower). Weights that an IR >= 4 model also lists as inputs stay
    constants, as byoc treats them, and so do Identity copies of weights (``_fold_identities``).
    Not when the signatures differ (constant outputs)."""
    inits = {t.name for t in source.graph.initializer}
    inputs = [v for v in source.graph.input if v.name not in inits]
    outputs = list(dict.fromkeys(v.name for v in source.graph.output))  # one listed twice: once
    if {v.name for v in inputs} != set(unit.inputs) or set(outputs) != set(unit.outputs):
        return
    model = onnx.ModelProto()
    model.CopyFrom(source)
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    _fold_identities(model.graph)
    unit.model = model
    unit.inputs = [v.name for v in inputs]
    unit.outputs = outputs


def as_original(
    unit: Partition, source: onnx.ModelProto, graph: Graph, reads: list[list[str]]
) -> None:
    """Give a partition of a backend that optimizes graphs itself (``optimizes_graphs``) as
    the model's own nodes between the partition's inputs and outputs: names as read, and the
    shape computations byoc folded, which such a backend's fusions look for (OpenVINO ran
    byoc's folded Llama decode step 1.48x slower than the model as read). The inputs keep the
    partition's static types. A value computed from a model input the partition does not read,
    or by a node another unit runs, is the constant byoc folded it to; where byoc folded none,
    the partition stays in byoc's form. ``reads``: what each node of ``source`` reads,
    subgraphs' outer values included."""
    weights = {t.name: t for t in source.graph.initializer}
    producer = {o: i for i, n in enumerate(source.graph.node) for o in n.output if o}
    given, nodes = set(unit.inputs), set(unit.nodes)
    foreign = {v.name for v in source.graph.input} - given - weights.keys()
    for n, read in zip(source.graph.node, reads, strict=True):  # in order: values computed
        at = graph.index.get(n.name)  # from what the unit lacks
        elsewhere = at is not None and n.name not in nodes and at not in graph.const_nodes
        if elsewhere or any(i in foreign for i in read):
            foreign.update(o for o in n.output if o and o not in given)
    taken: set[int] = set()
    tensors: dict[str, onnx.TensorProto] = {}
    stack = list(unit.outputs)
    while stack:
        name = stack.pop()
        if not name or name in given or name in tensors:
            continue
        index = producer.get(name)
        if name in weights:
            tensors[name] = weights[name]
        elif index is None or name in foreign:
            value = graph.constant(name)
            if value is None:
                return  # not computable from the unit's inputs: byoc's form stays
            tensors[name] = numpy_helper.from_array(value, name)
        elif index not in taken:
            taken.add(index)
            stack.extend(reads[index])
    model = onnx.ModelProto(ir_version=unit.model.ir_version)
    model.opset_import.extend(unit.model.opset_import)
    model.functions.extend(unit.model.functions)
    model.graph.name = unit.model.graph.name
    model.graph.input.extend(unit.model.graph.input)  # the partition's static types
    model.graph.output.extend(unit.model.graph.output)
    model.graph.node.extend(n for i, n in enumerate(source.graph.node) if i in taken)
    model.graph.initializer.extend(tensors.values())
    unit.model = model
    unit.__dict__.pop("graph", None)  # Partition.graph, if analysed already


def _fold_identities(graph: onnx.GraphProto) -> None:
    """An Identity of a weight becomes a weight of its output's name. TorchScript writes one
    for each shared weight, and onnxruntime's CPU provider then misses its fp16 convolution
    kernels: a half-precision SqueezeNet ran 4.5 ms as written, 2.9 ms so (the same outputs)."""
    weights = {t.name: t for t in graph.initializer}
    kept = []
    for n in graph.node:
        copied = n.input[0] if n.op_type == "Identity" and n.domain in ("", "ai.onnx") else ""
        if copied not in weights:
            kept.append(n)
        else:
            copy = onnx.TensorProto()
            copy.CopyFrom(weights[n.input[0]])
            copy.name = n.output[0]
            graph.initializer.append(copy)
            weights[copy.name] = copy  # an Identity of this one, further on
    if len(kept) < len(graph.node):
        del graph.node[:]
        graph.node.extend(kept)


def _plan(
    state: PassState, units: list[Partition], skipped: Mapping[str, str], cfg: Config
) -> Plan:
    graph, labels = state.graph, state.labels
    composite_of = {i: m.name for m in state.matches for i in m.members if labels[i] is not None}
    owner = {name: u for u in units for name in u.nodes}
    cycles = []
    for (a, b), via in state.blocked.items():  # producer-first merges a cycle stopped
        ua, ub = owner.get(graph.nodes[a].name), owner.get(graph.nodes[b].name)
        if ua and ub and ua is not ub and ua.backend == ub.backend != FALLBACK:
            reason = (
                f"kept out of {ua.name} (the partition of '{graph.nodes[a].name}'): "
                f"merging would create a cycle through '{graph.nodes[via].name}'"
            )
            cycles.append((b, ub.backend, reason))
    refusals = state.refused(cycles)
    decisions: dict[str, Decision] = {}
    fallback_nodes: list[str] = []
    for i, node in enumerate(graph.nodes):
        unit = owner.get(node.name)
        notes = list(refusals.get(i, []))
        if i in graph.const_nodes:
            notes.append(("*", "a constant: bound inside every partition that reads it"))
        notes.extend((b, f"backend {reason}") for b, reason in skipped.items())
        constant = i in graph.const_nodes
        if unit is None or unit.backend == FALLBACK:
            fallback_nodes.append(node.name)
            segment = unit.name if unit else FALLBACK
            decisions[node.name] = Decision(segment, FALLBACK, None, notes, constant)
        else:
            composite = composite_of.get(i)
            decisions[node.name] = Decision(unit.name, unit.backend, composite, notes, constant)
    return Plan(
        model=graph.model,
        partitions=[u for u in units if u.backend != FALLBACK],
        segments=[u for u in units if u.backend == FALLBACK],
        schedule=units,
        fallback_nodes=fallback_nodes,
        decisions=decisions,
        config=cfg,
    )
