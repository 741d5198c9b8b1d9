"""``byoc.compile``: the one entry point from a model to a runnable ``CompiledModel``.

It reads top to bottom: the config and the plugins, resolved once; the plan
(``byoc.pipeline.partition``: TVM's passes); then ``byoc.placement.Placer``, which builds each
partition (``byoc.executor.build``), runs it once, measures it when placement is measured, and
keeps only what it checked. Placement decides and the compiler partitions: where placement
vetoes nodes it answers ``Repartition``, and the one loop here cuts the next plan. A backend's
codegen may refuse nodes (``byoc.NodesRefused``): the model is partitioned again without them,
and placement starts over.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import onnx

from byoc.compiled import CompiledModel, Step
from byoc.config import Config
from byoc.context import ConfigLike, Context, resolve
from byoc.errors import BackendError, ModelError, NodesRefused
from byoc.executor import build
from byoc.fallback import OrtRuntime
from byoc.graph import declared_inputs, tensor_type
from byoc.inputs import given_shapes
from byoc.loading import TooLarge, read_model
from byoc.pipeline import ModelLike, partition
from byoc.placement import Placer, Repartition, Vetoes
from byoc.plan import FALLBACK, Partition, Placement, Plan
from byoc.plugins import Registry
from byoc.progress import ProgressFn

BF16 = onnx.TensorProto.BFLOAT16
VERIFIED_PLANS = 3  # the most placement's check builds: the plan, one backend's whole region,
# and plain onnxruntime (Placer.verify)


def compile(
    model: ModelLike,
    config: ConfigLike = None,
    *,
    inputs: Mapping[str, Any] | None = None,
    progress: ProgressFn | None = None,
    registry: Registry | None = None,
) -> CompiledModel:
    """Partition a model, generate code for every partition and make it runnable.

    Every backend partition is run once on ``inputs`` (``random_inputs`` for those not given:
    valid by construction where the graph says what an input is); one that fails goes back to
    onnxruntime. With measured placement (the default) so does one whose outputs differ from
    onnxruntime's beyond ``[compare]`` rtol/atol, or that does not beat onnxruntime. Symbolic
    input dims take the sizes ``inputs`` give them, as if ``[shapes]`` said so (where
    ``[shapes]`` says otherwise, the inputs win: it fixes a default, not a contract): backends
    that need static shapes may claim the model, other shapes compile again on first use, and
    a saved file runs these shapes only.
    ``progress(index, total, unit_name)``, when given, is called before each unit is compiled
    or measured (``byoc.progress.TerminalProgress`` draws a bar on a terminal). ``registry``:
    the plugins to use (default: ``byoc.registry()``, the installed ones).
    """
    ctx = resolve(config, registry)
    try:
        return _compile(model, ctx, inputs, progress)
    except TooLarge as exc:
        if not isinstance(model, str | os.PathLike):
            raise
        return _whole_file(os.fspath(model), ctx, exc)


def _compile(
    model: ModelLike, ctx: Context, inputs: Mapping[str, Any] | None, progress: ProgressFn | None
) -> CompiledModel:
    if inputs is not None:  # [shapes] for the dims the inputs give, as the user's own
        model = read_model(model)  # ([shapes] is a default: where the inputs differ, they win)
        given = given_shapes(declared_inputs(model), inputs)
        fixed = {k: v for k, v in given.items() if ctx.config.shapes.get(k) != v}
        if fixed:
            shapes = {**ctx.config.shapes, **fixed}
            ctx = dataclasses.replace(ctx, config=dataclasses.replace(ctx.config, shapes=shapes))
    reg = ctx.registry
    plan = first = partition(model, ctx)
    _no_bfloat16_io(plan.source if plan.source is not None else plan.model)

    def variants(other: onnx.ModelProto, c: Config) -> CompiledModel:
        return compile(other, c, registry=reg)  # the same placement for other input shapes

    vetoes: Vetoes = {}
    # a backend's codegen may refuse nodes (NodesRefused): partition without them; each
    # refusal vetoes a backend on nodes it claimed (``refuse``), so these rounds end
    rounds = len(first.decisions) * max(1, len(ctx.tables)) + 1
    for _ in range(rounds):
        placer = Placer(first, ctx, progress)
        try:
            answer: Plan | Repartition = placer.decide(plan, vetoes, inputs)
            reuse: Callable[[Partition], tuple[Any, Any] | None] | None = placer.reuse
            # the plan, then the plans the check asks for: one backend's whole region, and
            # plain onnxruntime
            for _ in range(VERIFIED_PLANS):
                while isinstance(answer, Repartition):  # placement vetoes, this partitions
                    vetoes = answer.vetoes
                    plan = partition(first, ctx, vetoes=vetoes)
                    answer = answer.then(plan)
                compiled = build(answer, ctx, progress=progress, reuse=reuse, variants=variants)
                verified = placer.verify(compiled)
                assert compiled.plan is not None
                compiled.plan.placement = verified.placement
                if verified.then is None:
                    compiled.plan.graph = None  # placement's analysis, what backends cached of it
                    return compiled
                answer, reuse = verified.then, None
            why = f"placement's check asked for more than {VERIFIED_PLANS} plans"
            return _on_onnxruntime(first, ctx, why, progress, variants)
        except NodesRefused as exc:
            vetoes = refuse(vetoes, exc)
            plan = partition(first, ctx, vetoes=vetoes)
    why = f"backends refused nodes at codegen in {rounds} rounds of partitioning"
    return _on_onnxruntime(first, ctx, why, progress, variants)


def _on_onnxruntime(
    first: Plan,
    ctx: Context,
    why: str,
    progress: ProgressFn | None,
    variants: Callable[[onnx.ModelProto, Config], CompiledModel],
) -> CompiledModel:
    """The model as plain onnxruntime (every node vetoed for every backend), where the rounds
    of partitioning and checking did not end as they must (a bug in byoc or a backend): the
    path that cannot be wrong or slow, said in one line."""
    warnings.warn(
        f"{why}: running the model on onnxruntime (a bug in byoc: please report it with the model)",
        stacklevel=4,
    )
    vetoes = {
        node: dict.fromkeys(ctx.tables, f"returned to onnxruntime: {why}")
        for node in first.decisions
    }
    plan = partition(first, ctx, vetoes=vetoes)
    mode = ctx.config.compile["placement"]
    plan.placement = Placement(mode, note=f"every partition runs on onnxruntime: {why}")
    compiled = build(plan, ctx, progress=progress, variants=variants)
    if compiled.plan is not None:
        compiled.plan.graph = None
    return compiled


def _whole_file(path: str, ctx: Context, why: TooLarge) -> CompiledModel:
    """A model too large for byoc's partitions (``loading.TooLarge``) as one onnxruntime
    session of its file, which reads the external data itself: the path that cannot be wrong
    or slow, said in one line. The model's graph is read without its weights, for the
    signature; there is no plan (nothing to explain), and the file cannot be saved."""
    problem = ctx.registry.backends[FALLBACK].unavailable_reason
    if problem is not None:
        raise BackendError(f"the onnxruntime fallback cannot be used: {problem}")
    try:
        proto = onnx.load(path, load_external_data=False)
        _no_bfloat16_io(proto)
        runtime = OrtRuntime(path, ctx.config.fallback)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"onnxruntime cannot load '{path}': {exc}") from None
    inputs = declared_inputs(proto)
    outputs = {o.name: tensor_type(o.type) for o in proto.graph.output}
    nodes = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(proto.graph.node)]
    unit = Partition(f"{FALLBACK}_0", FALLBACK, nodes, list(inputs), list(outputs), proto)
    warnings.warn(f"{why.what}: onnxruntime runs the whole model from its file", stacklevel=3)
    compiled = CompiledModel(
        None,
        [Step(unit, path, runtime)],
        ctx.config.fallback,
        inputs=inputs,
        outputs=outputs,
        registry=ctx.registry,
    )
    compiled.file = path
    return compiled


def _no_bfloat16_io(model: onnx.ModelProto) -> None:
    """A ModelError for bfloat16 model inputs or outputs: onnxruntime's Python API takes and
    returns no bfloat16 arrays ("No corresponding Numpy type"), and every compiled model runs
    on it in part, and is checked against it."""
    g = model.graph
    weights = {t.name for t in g.initializer}
    ends = [("input", v) for v in g.input if v.name not in weights] + [
        ("output", v) for v in g.output
    ]
    found = [f"{kind} '{v.name}'" for kind, v in ends if v.type.tensor_type.elem_type == BF16]
    if found:
        raise ModelError(
            f"the model's {', '.join(found)} is bfloat16, which onnxruntime's Python API can "
            "neither take nor return (byoc runs what no backend claims on it, and checks "
            "backends against it): export the model with float32 inputs and outputs (a Cast "
            "at each end keeps bfloat16 inside)"
        )


def refuse(vetoes: Vetoes, exc: NodesRefused) -> Vetoes:
    """``vetoes`` and a backend's codegen refusals; each round must take nodes from it."""
    new = {n: r for n, r in exc.reasons.items() if exc.backend not in vetoes.get(n, {})}
    if not new:
        raise BackendError(f"backend {exc.backend} refused nodes it may no longer claim: {exc}")
    out = {node: dict(by) for node, by in vetoes.items()}
    for node, reason in new.items():
        out.setdefault(node, {})[exc.backend] = f"refused at codegen: {reason}"
    return out
