"""The ledger: the facts one compile's placement shares between its steps, and nothing that
decides. A partition's cache key (hashed once), its cached verdict (judged with this
compile's margin), the measurement inputs, the reference runs on onnxruntime (each backend
partition's real inputs and outputs), the memory guard, the cost of an empty session call,
whether other processes disturbed a timing yet, and what was built while deciding (reused by
the build). The check, the search and the whole-model check read it and return values."""

from __future__ import annotations

import hashlib
import json
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from byoc import host
from byoc.context import Active, Context
from byoc.errors import BackendError
from byoc.executor import fallback_config
from byoc.graph import Graph
from byoc.inputs import check_inputs, random_inputs
from byoc.loading import weight_bytes
from byoc.placement import rules, timing
from byoc.placement.cache import CACHE_VERSION, MeasurementCache, host_id
from byoc.placement.timing import Timing
from byoc.plan import FALLBACK, Measurement, Partition, Plan
from byoc.tolerance import float32_outputs
from byoc.units import compile_unit

Vetoes = dict[str, dict[str, str]]  # node -> backend -> why that backend may not claim it

GIVE_INPUTS = (
    '; give inputs ([compare] inputs, [shapes], inputs=) or set [compile] placement = "static" '
    "to keep them unchecked"
)
STATIC_ADVICE = (
    '; set [compile] placement = "static" to keep the partitions unchecked, or free memory'
)
REPORT = " (a bug in byoc: please report it with the model)"

MEMORY_PER_WEIGHT_BYTE = 16  # measured placement's peak memory at most, per byte of weights
MEMORY_BASE = 1 << 29  # and the libraries and buffers around them: 0.5 GB
MEMORY_RESERVE = 1 << 31  # checking stops below 2 GiB available, or half of it at the start


class Unsettled(Exception):
    """Placement's rounds of partitioning cannot settle: a bug in byoc."""


class Unrunnable(Exception):
    """onnxruntime fails on the measurement inputs, or cannot load a segment of the plan;
    ``advice``: what the warning tells the user to do."""

    def __init__(self, why: str, advice: str = GIVE_INPUTS) -> None:
        super().__init__(why)
        self.advice = advice


@dataclass(frozen=True)
class Trial:
    """What onnxruntime made of one partition on the measurement inputs: its arguments, its
    outputs, and the onnxruntime runtime that made them (to time against)."""

    args: list[Any]
    outputs: list[Any]
    ort: timing.Runner


def quiet(table: Mapping[str, Any]) -> dict[str, Any]:
    """A fallback table whose threads do not spin between runs (unless the user said so): a
    spinning onnxruntime pool steals the cores a backend's threads need while they alternate."""
    return {"allow_spinning": False, **table} if "allow_spinning" not in table else dict(table)


_OURS = ("byoc.placement", "byoc.compiler")


def warn(message: str) -> None:
    """Warn in one line, attributed to the code that asked for the compile (the first frame
    outside placement and ``byoc.compiler``), however deep in placement it is said."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(_OURS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level)


class Ledger:
    """One compile's shared facts. ``read``: the first plan (the model as read and analysed,
    which every later plan is partitioned from)."""

    def __init__(self, read: Plan, ctx: Context) -> None:
        self.ctx = ctx
        self.cfg = ctx.config
        self.reg = ctx.registry
        self.tables = ctx.tables
        self.read = read
        self.source = read.source if read.source is not None else read.model
        self.measured = self.cfg.compile["placement"] == "measured"
        self.margin: float = self.cfg.compile["margin"]
        self.cache = MeasurementCache()
        self.built: dict[str, tuple[Any, Any]] = {}  # key -> (artifact, runtime), kept ones
        self.trials: dict[str, Trial] = {}  # key -> its inputs, outputs, onnxruntime
        self.memory_floor: int | None = None  # checking stops below this much available memory
        self.disturbed = 0  # timings other processes spoiled, twice where a second was allowed
        self.unproven = 0  # of those, the ones no timing on one thread replaced: no evidence
        # id(unit) -> (a weak reference to unit, key): hashing a large model is done once
        self._keys: dict[int, tuple[weakref.ref[Partition], str]] = {}
        self._call_ms: float | None = None

    # -- keys and cached verdicts -------------------------------------------------------------

    def key(self, unit: Partition) -> str:
        """The cache key of a backend partition (hashing a large model is worth doing once)."""
        known = self._keys.get(id(unit))
        if known is not None and known[0]() is unit:  # a weak reference: losers' weights go
            return known[1]
        backend = self.reg.backends[unit.backend]
        head = {
            "cache": CACHE_VERSION,
            "backend": [unit.backend, backend.version, backend.build()],
            "table": self.tables[unit.backend],
            "fallback": quiet(self.cfg.fallback),
            "host": host_id(),
        }
        digest = hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode())
        digest.update(unit.model.SerializeToString(deterministic=True))
        return self.alias(unit, digest.hexdigest())

    def alias(self, unit: Partition, key: str) -> str:
        """Remember ``key`` as ``unit``'s (a copy of a partition with its options has its key)."""
        self._keys[id(unit)] = (weakref.ref(unit), key)
        return key

    def cached(
        self, key: str, nodes: list[str] | None, backends: Collection[str]
    ) -> Measurement | None:
        """A cached measurement of exactly ``nodes`` (None: of some nodes of the model) on one
        of ``backends``, judged with this compile's margin; none with remeasure, nor when its
        verdict was unclear and it is older than [compile] remeasure_after days."""
        if self.cfg.compile["remeasure"]:
            return None
        m = self.cache.get(key, nodes=nodes, backends=backends, model=self.read.decisions)
        if m is None:
            return None
        m = rules.judge(m, self.margin)
        days = (time.time() - m.measured_at) / 86400
        if not m.clear and days >= self.cfg.compile["remeasure_after"]:
            return None
        return m

    # -- inputs and reference runs ------------------------------------------------------------

    def quiet_fallback(self, plan: Plan) -> dict[str, Any]:
        """The [fallback] table for onnxruntime runs beside a backend's while ``plan`` is
        decided (``quiet``)."""
        return quiet(fallback_config(self.cfg, plan, self.reg))

    def model_inputs(self, plan: Plan, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """The given inputs, checked, and random ones for the rest."""
        graph = Graph(plan.model)  # read and specialized already
        cmp = self.cfg.compare
        feeds = random_inputs(graph, self.cfg.shapes, cmp["seed"], cmp["inputs"], given=given)
        if given is None:
            return feeds
        return check_inputs({n: graph.type_of(n) for n in graph.inputs}, feeds)

    def reference(
        self, feeds: dict[str, Any], plan: Plan, fallback: Mapping[str, Any]
    ) -> dict[str, Trial]:
        """Run a plan on onnxruntime (with the ``fallback`` table): each backend partition's
        real inputs and outputs. A value is let go after its last reader, as a compiled model
        does (mvit_v2_s on a video clip: 12 GB of activations in all, 1.2 GB live at once in
        onnxruntime)."""
        env = dict(feeds)
        trials: dict[str, Trial] = {}
        last = {n: i for i, unit in enumerate(plan.schedule) for n in unit.inputs}
        for i, unit in enumerate(plan.schedule):
            try:  # a segment byoc made that onnxruntime cannot load is byoc's bug: fail safe
                runtime = compile_unit(self.reg, FALLBACK, unit, fallback)[1]
            except BackendError as exc:
                raise Unrunnable(
                    f"onnxruntime cannot load {unit.name}, which byoc made: {exc}", REPORT
                ) from exc
            args = [env[n] for n in unit.inputs]
            try:
                outputs = runtime.run(args)
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}"
                raise Unrunnable(f"onnxruntime fails on the measurement inputs ({msg})") from exc
            if unit.backend != FALLBACK:
                trials[unit.name] = Trial(args, list(outputs), runtime.run)
            env.update(zip(unit.outputs, outputs, strict=True))
            for name in [n for n in env if last.get(n, -1) <= i]:
                del env[name]
            self.enough_memory(f"{i + 1} of the plan's {len(plan.schedule)} units")
        return trials

    def references(
        self, unit: Partition, args: list[Any], fallback: Mapping[str, Any]
    ) -> list[list[Any]]:
        """The partition's outputs from onnxruntime's other runs: with its graph optimizations
        off, and (float16 or bfloat16) in float32, with and without rounding what each node
        writes (``float32_outputs``). Fused kernels round differently (a QDQ model's
        QLinearConv against DequantizeLinear, Conv, QuantizeLinear: a quantum, which later
        layers carry on and scale: 10.2 on yolov8n-det-qdq's boxes of up to 317), and a
        backend may keep float32 between float16 ops, or round after each where onnxruntime
        does not, so a backend may differ from onnxruntime by twice what these runs do."""
        table = {**fallback, "graph_optimization_level": "disable"}
        runs = [list(compile_unit(self.reg, FALLBACK, unit, table)[1].run(list(args)))]
        feeds = dict(zip(unit.inputs, args, strict=True))
        for rounded in (False, True):
            wide = float32_outputs(unit.model, feeds, unit.outputs, rounded)
            runs += [] if wide is None else [wide]
        return runs

    # -- memory -------------------------------------------------------------------------------

    def short_of_memory(self) -> str | None:
        """Why measuring would likely run this machine out of memory (an out-of-memory kill
        loses the whole compile, unsaid), or None: measured placement holds the model, each
        partition's ONNX, the backends' builds and onnxruntime's sessions of them at once,
        11-15x the weights (gpt2-ts, 117 MB: 1.7 GB; 256 MB of MatMul weights: 2.9 GB), about
        MEMORY_PER_WEIGHT_BYTE times them at most, where static placement takes 8-9x."""
        if not self.measured:
            return None
        weights = weight_bytes(self.source)
        need = MEMORY_PER_WEIGHT_BYTE * weights + MEMORY_BASE
        free = host.available_memory()
        if free is None or need <= free:
            return None
        gb = 1 << 30
        return (
            f"measuring needs about {need / gb:.1f} GB of memory ({MEMORY_PER_WEIGHT_BYTE}x the "
            f"model's {weights / gb:.2f} GB of weights; static placement: about 9x), and "
            f"{free / gb:.1f} GB is available"
        )

    def watch_memory(self) -> None:
        """From now on, stop checking below MEMORY_RESERVE, or half of what is available now."""
        free = host.available_memory()
        self.memory_floor = max(MEMORY_RESERVE, free // 2) if free is not None else None

    def enough_memory(self, where: str) -> None:
        """Stop checking (``Unrunnable``) where the machine is running out of memory: the
        partitions' real inputs and outputs are held until each is checked, and on a model
        of large activations and many partitions they add up (mvit_v2_s on a video clip: 162
        partitions, past 12 GB, where onnxruntime runs the model in 1.2 GB)."""
        free = host.available_memory()
        if free is not None and self.memory_floor is not None and free < self.memory_floor:
            raise Unrunnable(
                f"the machine ran low on memory while checking the partitions ({free / 2**30:.1f}"
                f" GB left after {where}: their real inputs and outputs are kept to check them)",
                STATIC_ADVICE,
            )

    # -- timing -------------------------------------------------------------------------------

    def time_unit(
        self,
        unit: Partition,
        runtime: Any,
        trial: Trial,
        fallback: Mapping[str, Any],
        budget: float = 1.0,
        pairs: int = 8,
        table: Mapping[str, Any] | None = None,
    ) -> Measurement:
        """The partition on its backend against onnxruntime, on its real inputs, judged.
        ``table``: what ``runtime`` was compiled with; given, a timing other processes
        disturbed is taken again on one thread in CPU time (``one_thread``)."""
        if self._call_ms is None:  # once per compile: what an empty session call costs
            self._call_ms = timing.session_call_ms(fallback, self.reg)
        call_ms, margin = self._call_ms, self.margin

        def pair(
            mine: timing.Runner, ort: timing.Runner, on_one_thread: bool, n: int = 1
        ) -> Timing:  # n: onnxruntime's time counted as 1/n of what is timed
            m = rules.margin_of("cpu" if on_one_thread else "wall", margin)

            def threshold(_: float, t_ort: float) -> float:
                return max(0.0, 1 - min(call_ms, t_ort / n) / t_ort * n) * (1 - m) / n

            return timing.time_pair(
                mine, ort, trial.args, threshold, budget=budget, min_pairs=pairs,
                on_one_thread=on_one_thread,
            )  # fmt: skip

        def alone() -> Timing:
            assert table is not None
            mine = compile_unit(self.reg, unit.backend, unit, self.one_thread(unit.backend, table))
            ort = compile_unit(self.reg, FALLBACK, unit, {**fallback, **timing.ONE_THREAD_FALLBACK})
            if self.threaded(unit.backend):
                return pair(mine[1].run, ort[1].run, True)
            # one thread against onnxruntime's many: onnxruntime taken as scaling perfectly
            n = timing.onnxruntime_threads(fallback)
            timed = pair(mine[1].run, ort[1].run, True, n)
            lo, hi = timed.interval
            return replace(timed, second_ms=timed.second_ms / n, interval=(lo * n, hi * n))

        result = self.undisturbed(
            lambda: pair(runtime.run, trial.ort, False), alone if table is not None else None
        )
        return self.judged(unit.name, unit.backend, list(unit.nodes), result, call_ms)

    def one_thread_context(self) -> Context:
        """This compile's settings with every backend and onnxruntime on one thread."""
        fallback = {**self.cfg.fallback, **timing.ONE_THREAD_FALLBACK}
        active = tuple(Active(a.backend, self.one_thread(a.name, a.table)) for a in self.ctx.active)
        return replace(self.ctx, config=replace(self.cfg, fallback=fallback), active=active)

    def threaded(self, backend: str) -> bool:
        """Whether ``backend`` runs threads of its own: it restates the ``threads`` option
        (docs/plugin-authors.md). One that does not runs on the calling thread, and timed on
        one thread beside onnxruntime on one, would look as fast as onnxruntime on many."""
        return "threads" in self.reg.backends[backend].options

    def one_thread(self, backend: str, table: Mapping[str, Any]) -> dict[str, Any]:
        """``backend``'s ``table`` for running on the calling thread alone: ``threads`` = 1
        (every backend has the key; docs/plugin-authors.md)."""
        return {**table, "threads": 1}

    def undisturbed(
        self, timed: Callable[[], Timing], alone: Callable[[], Timing] | None = None
    ) -> Timing:
        """``timing.undisturbed``: once a timing of this compile stayed disturbed, the machine
        is busy, and nothing is timed twice in wall time. ``alone``: the same two timed on one
        thread in CPU time, which other processes leave as it is on a quiet machine: taken
        where the wall-time timing stayed disturbed, and at once while they are still taking
        the CPUs after one did (the last quarter second)."""
        busy = self.disturbed and host.busy(host.others_since(host.cpu_mark()))
        result = self._alone(alone) if alone is not None and busy else None
        if result is None:
            result = timing.undisturbed(timed, again=not self.disturbed)
            if timing.busy(result):
                self.disturbed += 1
                result = (self._alone(alone) if alone is not None else None) or result
        self.unproven += timing.busy(result)
        return result

    @staticmethod
    def _alone(alone: Callable[[], Timing]) -> Timing | None:
        """``alone()``, or None where the one-thread builds fail to build or run (the
        disturbed wall time stands: no evidence)."""
        try:
            return alone()
        except Exception:
            return None

    def judged(
        self, name: str, backend: str, nodes: list[str], timed: Timing, call_ms: float = 0.0
    ) -> Measurement:
        """A timing as a measurement, judged with this compile's margin (``rules.wins``)."""
        m = Measurement(
            name,
            backend,
            nodes,
            timed.first_ms,
            timed.second_ms,
            False,
            call_ms=min(call_ms, timed.second_ms),
            interval=timed.interval,
            samples=timed.samples,
            measured_at=time.time(),
            others=timed.others,
            disturbed=timing.busy(timed),
            clock=timed.clock,
        )
        return rules.judge(m, self.margin)
