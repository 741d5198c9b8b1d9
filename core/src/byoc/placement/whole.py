"""The whole-model check, measured placement's last word on a built plan: the compiled model
runs once and is timed against plain onnxruntime on the whole model (``measure``). Where it
fails, differs, loses, or cannot explain its win (``rules.unexplained``), the plan gets one
second chance (``second_chance``: one backend's whole region, as vetoes) and then runs as
plain onnxruntime (``lost`` says why). Each function returns its finding; the placer turns
it into the next plan."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

import onnx

from byoc.compiled import CompiledModel
from byoc.errors import BackendError
from byoc.executor import build
from byoc.pipeline import as_read
from byoc.placement import rules, timing
from byoc.placement.cache import host_id
from byoc.placement.check import differs
from byoc.placement.ledger import Ledger, Vetoes, warn
from byoc.placement.timing import Timing
from byoc.plan import FALLBACK, Measurement, Partition, Plan
from byoc.progress import ProgressFn
from byoc.units import compile_unit


def measure(
    ledger: Ledger,
    plan: Plan,
    compiled: CompiledModel,
    feeds: dict[str, Any],
    verdicts: Mapping[str, Measurement],
    progress: ProgressFn | None,
) -> Measurement:
    """The compiled model of ``plan`` against plain onnxruntime on the whole model, with the
    user's ``[fallback]`` settings (its threads spin by default, as they would for a user who
    runs onnxruntime alone). A spinning pool slows a backend's threads while they take turns,
    so the two are timed in blocks, each block's first runs discarded."""
    nodes = [n for p in compiled.plan.partitions for n in p.nodes]  # type: ignore[union-attr]
    whole = whole_unit(ledger.source)
    plain = compile_unit(ledger.reg, FALLBACK, whole, ledger.cfg.fallback)[1]
    args = [feeds[n] for n in plain.input_names]
    try:
        start = time.perf_counter()
        got = compiled.run(feeds)
        once = time.perf_counter() - start
        failure = None
        if not _reduced_precision(ledger, plan, verdicts) and not draws_random(ledger.source.graph):
            outputs, want = [got[n] for n in whole.outputs], list(plain.run(args))
            fallback = ledger.quiet_fallback(plan)
            others = functools.partial(ledger.references, whole, args, fallback)
            different = differs(ledger.cfg.compare, whole, outputs, want, others)
            failure = f"the compiled model's {different}" if different else None
    except Exception as exc:  # each partition ran alone, but not all of them together
        failure = f"failed on the measurement inputs ({type(exc).__name__}: {exc})"
    if failure is not None:  # each partition's outputs were close, the model's are not
        return Measurement("the compiled model", "byoc", nodes, 0, 0, False, failure=failure)
    key = whole_key(ledger, plan)
    cached = ledger.cached(key, nodes, ("byoc",))
    if cached is not None:  # an unclear one only until remeasure_after days (Ledger.cached)
        return cached
    if progress is not None:
        progress(1, 1, "measuring the whole model")
    timed = ledger.undisturbed(
        lambda: _against_plain(compiled, plain, feeds, once, ledger.margin),
        lambda: _alone(ledger, compiled, whole, feeds, once),
    )
    m = ledger.judged("the compiled model", "byoc", nodes, timed)
    if not m.disturbed:
        ledger.cache.put(key, m)
    return m


def _reduced_precision(ledger: Ledger, plan: Plan, verdicts: Mapping[str, Measurement]) -> bool:
    """Whether a partition runs in a reduced precision or quantizes with its backend's own
    arithmetic (``int8``): its outputs were held to ``[compile] precision_tolerance``, not to
    [compare]'s, so the model's are too."""
    found = (verdicts.get(ledger.key(u)) for u in plan.partitions)
    return any(m is not None and m.precision != "fp32" for m in found)


def _against_plain(
    compiled: CompiledModel, plain: Any, feeds: dict[str, Any], once: float, margin: float
) -> Timing:
    """The compiled model timed against ``plain``, an onnxruntime session of the whole
    model (whose threads stop when it returns)."""
    args = [feeds[n] for n in plain.input_names]
    return timing.time_blocks(
        lambda _: compiled.run(feeds),
        plain.run,
        args,
        lambda a, b: 1 - margin,
        budget=timing.whole_budget(once),
    )


def _alone(
    ledger: Ledger, compiled: CompiledModel, whole: Partition, feeds: dict[str, Any], once: float
) -> Timing:
    """The compiled model against plain onnxruntime, each built again on one thread and timed
    in pairs in the calling thread's CPU time (``Ledger.undisturbed``)."""
    assert compiled.plan is not None
    single = sorted({p.backend for p in compiled.plan.partitions if not ledger.threaded(p.backend)})
    if single:  # one thread against onnxruntime's one: they would look faster than they are
        raise BackendError(f"{', '.join(single)} run(s) no threads of their own")
    mine = build(compiled.plan, ledger.one_thread_context())
    table = {**ledger.cfg.fallback, **timing.ONE_THREAD_FALLBACK}
    plain = compile_unit(ledger.reg, FALLBACK, whole, table)[1]
    return timing.time_pair(
        lambda _: mine.run(feeds),
        plain.run,
        [feeds[n] for n in plain.input_names],
        lambda a, b: 1 - rules.margin_of("cpu", ledger.margin),
        budget=timing.whole_budget(once),
        on_one_thread=True,
    )


def whole_key(ledger: Ledger, plan: Plan) -> str:
    """The cache key of the whole-model check of ``plan``: every unit, and the settings."""
    digest = hashlib.sha256(b"whole")
    for unit in plan.schedule:
        digest.update(ledger.key(unit).encode() if unit.backend != FALLBACK else b"-")
        digest.update(unit.model.SerializeToString(deterministic=True))
    digest.update(json.dumps([ledger.cfg.fallback, host_id()], default=str).encode())
    return digest.hexdigest()


def second_chance(
    plan: Plan,
    verdicts: Mapping[str, Measurement],
    whole: Measurement,
    tables: Mapping[str, Any],
    vetoes: Vetoes,
) -> Vetoes | None:
    """After ``plan`` lost (or failed) the whole-model check: the vetoes that make the kept
    candidate of one backend that holds every node the plan's partitions hold and saved the
    most the plan, that backend's earlier vetoes on its nodes dropped and every other backend
    vetoed (its own check decides next). A plan cut from pieces that each won alone can lose
    end to end where one backend's whole region wins. None when there is no such candidate."""
    claimed = {n for p in plan.partitions for n in p.nodes}
    mine = {(p.backend, frozenset(p.nodes)) for p in plan.partitions}
    best = max(
        (
            m
            for m in verdicts.values()
            if m.kept
            and m.failure is None
            and claimed <= set(m.nodes)
            and (m.backend, frozenset(m.nodes)) not in mine
        ),
        key=rules.saved_ms,
        default=None,
    )
    if best is None:
        return None
    lost_by = whole.failure or f"{whole.backend_ms:.3g} ms vs {whole.onnxruntime_ms:.3g} ms"
    warn(
        f"measured placement: the plan lost the whole-model check ({lost_by}); trying "
        f"{best.backend} on its {len(best.nodes)} nodes instead"
    )
    why = f"the plan lost the whole-model check; {best.backend} was tried on its region"
    nodes = set(best.nodes)
    again = {node: dict(by) for node, by in vetoes.items()}
    for node in plan.decisions:
        by = again.setdefault(node, {})
        for backend in tables:
            if backend != best.backend or node not in nodes:
                by.setdefault(backend, why)
            else:
                by.pop(backend, None)
    return again


def lost(whole: Measurement, unexplained: str | None, fallback: bool) -> str | None:
    """Why the checked model runs as plain onnxruntime, or None to keep it: a failure always
    sends it there; a loss (or a win ``unexplained``) only with ``[compile]
    whole_model_fallback`` (``fallback``), else one line says it was kept."""
    slower = (
        whole.failure
        or (f"the whole-model check: {whole.busy()}" if whole.disturbed else None)
        or unexplained
        or (
            f"the compiled model is not faster than plain onnxruntime "
            f"({whole.backend_ms:.3g} ms vs {whole.onnxruntime_ms:.3g} ms{whole.spread()})"
        )
    )
    if whole.failure is None and not fallback:
        warn(f"{slower}; kept ([compile] whole_model_fallback = false)")
        return None
    warn(f"{slower}: running it as one onnxruntime session")
    return slower


def whole_unit(model: onnx.ModelProto) -> Partition:
    """The model as one onnxruntime unit, exactly as the whole-model fallback would run it
    (weights an old model also lists as inputs stay constants: onnxruntime prepacks them)."""
    graph = model.graph
    inputs = [i.name for i in graph.input if i.name not in {t.name for t in graph.initializer}]
    outputs = list(dict.fromkeys(o.name for o in graph.output))  # one listed twice: once
    unit = Partition("whole", FALLBACK, [], inputs, outputs, model)
    as_read(unit, model)
    return unit


# Ops whose values differ from one run (or session) to the next: no two runs of such a model
# can be compared, so the whole-model check does not compare its outputs (backends claim none).
_RANDOM = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
    }
)


def draws_random(graph: onnx.GraphProto) -> bool:
    """Whether the graph, or a subgraph of one of its nodes, draws random values."""
    for node in graph.node:
        if node.op_type in _RANDOM:
            return True
        for attr in node.attribute:
            if attr.g.node and draws_random(attr.g):
                return True
            if any(draws_random(g) for g in attr.graphs):
                return True
    return False
