"""Placement: which partitions a compile keeps. Placement only decides: ``byoc.compiler.
compile`` asks ``Placer.decide`` for the plan, builds it (reusing what deciding made), and
asks ``Placer.verify`` whether the built model stays. For the plan it is given, ``decide``:

1. runs the plan once on representative inputs (given, or ``random_inputs``: valid by
   construction where the graph says what an input is), every unit on onnxruntime, so each
   backend partition gets its real input values and outputs;
2. builds each backend partition and runs it once on them: one that fails, or (measured) whose
   outputs differ from onnxruntime's beyond ``[compare]`` rtol/atol plus twice what
   onnxruntime's own runs differ by (optimized against unoptimized, and a float16 model
   against float32), goes back untimed;
3. (``[compile] placement = "measured"``, the default) times each remaining partition against
   an onnxruntime session of the same partition model, interleaved after a warm-up, medians,
   with the fallback's thread settings and spinning off (how a multi-unit plan runs); a
   timing while other processes took more than ``host.BUSY`` of the CPUs is taken again
   after a pause, and if still disturbed is no evidence: the partition goes back, uncached;
4. vetoes, for that backend, the nodes of every partition that fails or does not win by
   ``[compile] margin`` and partitions again (another backend may claim them; the leftover
   graph is re-cut into as few onnxruntime sessions as acyclicity allows), until every
   partition is kept;
4b. (measured, several backends, ``[compile] search``) searches: each backend partitions the
   whole graph alone (its own pieces' timing losses do not veto it there), its winning
   partitions join the plan's as candidates, the candidates
   that save the most are taken greedily without overlap, and if they beat the plan by the
   margin the other candidates' nodes are vetoed for their backends and step 4 runs again;
5. (``verify``) runs the built model once and times it against plain onnxruntime on the whole
   model; if it fails, or its outputs differ from plain onnxruntime's as a partition's may
   not (step 2; small differences that later layers magnify), or it still loses, or its
   partitions cannot explain its win (together they save less than the margin of plain
   onnxruntime's time), or other processes disturbed the check, warns in one line and
   (``[compile] whole_model_fallback``) gives the plan that runs the model as one onnxruntime
   session; a failure or a difference always does.

When nothing can be run (no inputs, onnxruntime fails on them, or it cannot load a segment
byoc made: a bug to report), measured placement sends every partition to onnxruntime, with one
line saying why. Every verdict lands in ``Plan.placement`` and, for returned nodes, in their
refusals, so ``byoc explain`` and ``byoc partition`` show it. Timings are cached in the user
cache dir, keyed by the partition's content, backend, version and native build, the backend's
and the fallback's settings, and the host (``byoc.host``): a second compile of the same model
times nothing but still runs each partition once to check it. The cache is data byoc may not
have written: an entry that is not a small regular file, or that ``read_entry`` refuses (a
field of the wrong type or range, nodes other than those it is read for), is a miss, with one
line. Step 4's rounds are bounded, and where they cannot settle (a round vetoes nothing new:
a bug) every partition goes to onnxruntime, with one line.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import reprlib
import stat
import statistics
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
import onnx

from byoc import host, plugins
from byoc.compiled import CompiledModel, results_of
from byoc.context import Context
from byoc.errors import BackendError, ByocError, ConfigError, InputError, NodesRefused
from byoc.executor import build, fallback_config
from byoc.graph import Graph
from byoc.inputs import check_inputs, random_inputs
from byoc.loading import weight_bytes
from byoc.pipeline import as_read, partition
from byoc.plan import FALLBACK, Measurement, Partition, Placement, Plan
from byoc.plugins import Registry
from byoc.progress import ProgressFn
from byoc.tolerance import compare_arrays, float32_outputs, precision_error, within_spread
from byoc.units import compile_unit

Runner = Callable[[list[Any]], Any]
CACHE_VERSION = 6  # 6: timings other processes disturbed are not cached (Measurement.others)
SEARCH_RULES = 3  # how the search decides (3: shared bases, near ties end to end)
WHOLE_BUDGET = (4.0, 15.0)  # seconds for the whole-model check: room for ~12 rounds, within these
PAUSE = 0.5  # seconds to let a burst of theirs pass before timing once more


class _Trial:
    """What onnxruntime made of one partition on the measurement inputs: its arguments, its
    outputs, and the onnxruntime runtime that made them (to time against)."""

    def __init__(self, args: list[Any], outputs: list[Any], ort: Runner) -> None:
        self.args, self.outputs, self.ort = args, outputs, ort


_GIVE_INPUTS = (
    '; give inputs ([compare] inputs, [shapes], inputs=) or set [compile] placement = "static" '
    "to keep them unchecked"
)


_STATIC_ADVICE = (
    '; set [compile] placement = "static" to keep the partitions unchecked, or free memory'
)

_REPORT = " (a bug in byoc: please report it with the model)"

MEMORY_PER_WEIGHT_BYTE = 16  # measured placement's peak memory at most, per byte of weights
MEMORY_BASE = 1 << 29  # and the libraries and buffers around them: 0.5 GB
MEMORY_RESERVE = 1 << 31  # checking stops below 2 GiB available, or half of it at the start


class _Unsettled(Exception):
    """Placement's rounds of partitioning cannot settle (``Placer._settle``): a bug in byoc."""


class _Unrunnable(Exception):
    """onnxruntime fails on the measurement inputs, or cannot load a segment of the plan;
    ``advice``: what the warning tells the user to do."""

    def __init__(self, why: str, advice: str = _GIVE_INPUTS) -> None:
        super().__init__(why)
        self.advice = advice


def _saved_ms(m: Measurement, basis: float | None = None) -> float:
    """What running a partition on its backend saves against onnxruntime, per run; with
    ``basis``, on that onnxruntime time of its region instead of the one timed beside it (its
    ratio to onnxruntime kept: _bases)."""
    if basis is None or m.onnxruntime_ms <= 0:
        return m.onnxruntime_ms - m.call_ms - m.backend_ms
    return basis * (1 - m.backend_ms / m.onnxruntime_ms) - m.call_ms


def _saved_range(m: Measurement, basis: float | None = None) -> tuple[float, float]:
    """What a partition saves at the two ends of its ratio's interval (least, most)."""
    if m.interval is None:
        return _saved_ms(m, basis), _saved_ms(m, basis)
    lo, hi = m.interval
    ort = m.onnxruntime_ms if basis is None else basis
    return ort * (1 - hi) - m.call_ms, ort * (1 - lo) - m.call_ms


NEAR = 0.8  # candidates sharing this much of their nodes (of the two's union) cover one region


def _bases(ms: list[Measurement]) -> dict[int, float]:
    """Each candidate's onnxruntime time for comparing its saving with the others': the median
    over the candidates that cover nearly the same nodes (NEAR), itself included. Each was
    timed beside onnxruntime at its own moment, and this machine drifts between them: bert-enc's
    dnnl encoder (166 nodes) read onnxruntime at 6.31 ms and OpenVINO's (173, its token-id
    Gathers too) at 5.29, so dnnl's ratio of 0.74 saved 1.64 ms against OpenVINO's 1.54 at 0.71,
    and the search kept dnnl, which ran 0.78 of onnxruntime end to end, OpenVINO 0.69, without
    asking. On one basis their ratios rank them; where that and the savings as timed disagree
    (drift, or extra nodes that cost more than drift), the end-to-end check decides."""
    return {id(m): statistics.median(o.onnxruntime_ms for o in ms if _near(m, o)) for m in ms}


def _near(a: Measurement, b: Measurement) -> bool:
    """Whether two candidates cover nearly one region (NEAR of their nodes shared)."""
    x, y = set(a.nodes), set(b.nodes)
    return bool(x | y) and len(x & y) >= NEAR * len(x | y)


def _lost_search(winner: Measurement | None, m: Measurement | None = None) -> str:
    """Why the search took a node from a backend (from its candidate ``m``, if it had one)."""
    mine = f"; {m.partition} saves {_saved_ms(m):.3g} ms on {m.backend}" if m else ""
    if winner is None:
        return f"search: onnxruntime runs it{mine}, less than a candidate it overlaps"
    return f"search: {winner.partition} saves {_saved_ms(winner):.3g} ms on {winner.backend}{mine}"


class Placer:
    """One compile: rounds of partition, try (and with measured placement, time), veto; then
    the whole-model check."""

    def __init__(
        self,
        plan: Plan,
        ctx: Context,
        progress: ProgressFn | None,
        vetoes: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.cfg = cfg = ctx.config
        self.plan = plan
        self.source = plan.source if plan.source is not None else plan.model
        self.read = plan  # partitioned again from its model: read and specialized once
        self.progress = progress
        self.reg: Registry = ctx.registry
        self.tables = ctx.tables
        self.measured_mode = cfg.compile["placement"] == "measured"
        self.margin = cfg.compile["margin"]
        self.cache = MeasurementCache()
        self.built: dict[str, tuple[Any, Any]] = {}  # partition key -> (artifact, runtime)
        self.vetoes = vetoes if vetoes is not None else {}
        self.slower: dict[str, set[str]] = {}  # node -> backends a partition of it lost on
        # id(unit) -> (a weak reference to unit, key): hashing a large model is done once
        self._keys: dict[int, tuple[weakref.ref[Partition], str]] = {}
        self.feeds: dict[str, Any] | None = None  # the measurement inputs, once decided
        self.options: dict[str, dict[str, Any]] = {}  # partition key -> the options it runs with
        if cfg.compile["precision"] != "fp32" and not host.cpu().has_bf16():
            warnings.warn(
                f'[compile] precision = "{cfg.compile["precision"]}": this CPU has neither '
                "AVX512_BF16 nor AMX; every partition computes in fp32",
                stacklevel=4,
            )
        self._call_ms: float | None = None
        self.shown: dict[str, Measurement] = {}
        self.trials: dict[str, _Trial] = {}  # partition key -> its inputs, outputs, onnxruntime
        self.verdicts: dict[str, Measurement] = {}  # partition key -> its verdict, once decided
        self.second_chance_taken = False  # verify tried one backend's whole region
        self.disturbed = 0  # timings other processes spoiled, twice where a second was allowed
        self.memory_floor: int | None = None  # checking stops below this much available memory

    def decide(self, inputs: Mapping[str, Any] | None) -> Plan:
        """The plan to build: every backend partition checked (and, measured, timed and
        searched), with ``plan.placement`` saying how each was decided."""
        mode = "measured" if self.measured_mode else "static"
        if not self.plan.partitions:
            return self._placed(Placement(mode))
        short = self._short_of_memory()
        if short is not None:
            return self._unchecked(short, _STATIC_ADVICE)
        free = host.available_memory()
        self.memory_floor = max(MEMORY_RESERVE, free // 2) if free is not None else None
        try:
            feeds = self._model_inputs(inputs)
        except InputError as exc:
            if inputs is not None:
                raise
            return self._unchecked(f"no inputs to run the partitions on ({exc})")
        verdicts: dict[str, Measurement] = {}  # by key: each partition once, first verdict
        try:
            self._settle(feeds, verdicts)
            if self.measured_mode and self._search_or_stay(feeds, verdicts):
                self._settle(feeds, verdicts)
            for key, m in self.shown.items():  # a cached search's candidates, for explain
                verdicts.setdefault(key, m)
        except _Unrunnable as exc:  # the model fails on these inputs, or a segment on load
            given = inputs is not None and exc.advice is _GIVE_INPUTS  # the user's: say no more
            return self._unchecked(str(exc), "" if given else exc.advice)
        except _Unsettled as exc:  # in either mode: what kept nothing it checked keeps nothing
            note = f"every partition runs on onnxruntime: {exc}"
            warnings.warn(f"placement: {note}{_REPORT}", stacklevel=3)
            return self._on_onnxruntime(
                f"returned to onnxruntime: {exc}", Placement(mode, note=note)
            )
        tried = list(verdicts.values())
        failed = [m for m in tried if m.failure is not None]
        if failed:
            warnings.warn(
                f"{len(failed)} partition(s) returned to onnxruntime at compile; first: "
                f"{failed[0].partition} ({failed[0].backend}) {failed[0].failure}",
                stacklevel=3,
            )
        self.feeds, self.verdicts = feeds, verdicts
        busy = [m for m in tried if m.disturbed]
        if busy:
            warnings.warn(
                f"measured placement: other processes took up to "
                f"{max(m.others or 0 for m in busy):.0%} of the CPUs while {len(busy)} "
                "partition(s) were timed; those run on onnxruntime and their timings are not "
                "cached (compile again on a quieter machine)",
                stacklevel=3,
            )
        noted = [m for m in tried if m.failure is None and m.precision_note]
        return self._placed(Placement(mode, tried if self.measured_mode else failed + noted))

    def verify(self, compiled: CompiledModel) -> Plan | None:
        """Measured placement's last word on the built model: None to keep it, or the next
        plan to build and verify: once, one backend's whole region (``_second_chance``), else
        the plan that runs the model as plain onnxruntime (it failed, or does not beat
        onnxruntime; it has no partitions, so its check keeps it)."""
        self.built.clear()  # what deciding made and the build did not take
        placement = self.plan.placement
        if not self.measured_mode or self.feeds is None or not self.plan.partitions:
            return None
        assert placement is not None
        whole = placement.whole = self._whole(compiled, self.feeds)
        unexplained = self._unexplained(whole) if whole.kept else None
        if whole.kept and unexplained is None:
            return None
        retry = not whole.kept and not whole.disturbed and self.cfg.compile["whole_model_fallback"]
        if retry and (second := self._second_chance(placement)) is not None:
            return second
        return self._whole_model_verdict(placement, unexplained)

    def _second_chance(self, placement: Placement) -> Plan | None:
        """After the plan lost (or failed) the whole-model check, once: the kept candidate of
        one backend that holds every node the plan's partitions hold and saved the most, as
        the plan, that backend's earlier vetoes on its nodes dropped and every other backend
        vetoed (its own check decides next). A plan cut from pieces that each won alone can
        lose end to end where one backend's whole region wins: squeezenet-qdq on an AVX-512
        EPYC, a dnnl plan 1.04x onnxruntime and plain onnxruntime next, OpenVINO's whole
        model 0.69x. None when there is no such candidate."""
        if self.second_chance_taken:
            return None
        self.second_chance_taken = True
        claimed = {n for p in self.plan.partitions for n in p.nodes}
        mine = {(p.backend, frozenset(p.nodes)) for p in self.plan.partitions}
        best = max(
            (
                m
                for m in self.verdicts.values()
                if m.kept
                and m.failure is None
                and claimed <= set(m.nodes)
                and (m.backend, frozenset(m.nodes)) not in mine
            ),
            key=_saved_ms,
            default=None,
        )
        if best is None:
            return None
        whole = placement.whole
        assert whole is not None
        lost = whole.failure or f"{whole.backend_ms:.3g} ms vs {whole.onnxruntime_ms:.3g} ms"
        warnings.warn(
            f"measured placement: the plan lost the whole-model check ({lost}); trying "
            f"{best.backend} on its {len(best.nodes)} nodes instead",
            stacklevel=4,
        )
        why = f"the plan lost the whole-model check; {best.backend} was tried on its region"
        nodes = set(best.nodes)
        for node in self.plan.decisions:
            by = self.vetoes.setdefault(node, {})
            for backend in self.tables:
                if backend != best.backend or node not in nodes:
                    by.setdefault(backend, why)
                else:
                    by.pop(backend, None)
        self.plan = partition(self.read, self.ctx, vetoes=self.vetoes)
        return self._placed(placement)

    def reuse(self, unit: Partition) -> tuple[Any, Any] | None:
        """The artifact and runtime made while deciding, for ``build`` (each taken once)."""
        return self.built.pop(self._key(unit), None) if unit.backend != FALLBACK else None

    def _settle(self, feeds: dict[str, Any], verdicts: dict[str, Measurement]) -> None:
        """Rounds of try (and time) and veto until every partition of the plan is kept. Each
        round vetoes a backend on nodes it claimed (the partitions that lost are cut from what
        it may claim), so there are at most as many rounds as nodes times backends. A round
        that vetoes nothing new cannot change the plan, and would repeat for ever: that (a
        bug, or a verdict about other nodes, which ``read_entry`` keeps out of the cache) ends
        placement with ``_Unsettled``, as does reaching the bound."""
        bound = len(self.read.decisions) * max(1, len(self.tables)) + 1
        for _ in range(bound):
            if not self.plan.partitions:
                return
            trials = self._reference(feeds, self.plan)
            round_: list[Measurement] = []
            for i, unit in enumerate(self.plan.partitions, start=1):
                key = self._key(unit)
                self.trials[key] = trials[unit.name]
                if key not in verdicts:
                    if self.progress is not None and self.measured_mode:
                        self.progress(i, len(self.plan.partitions), f"measuring {unit.name}")
                    verdicts[key] = self._verdict(unit, key, trials[unit.name])
                    self._enough_memory(f"checking {unit.name}")
                round_.append(verdicts[key])
                if not verdicts[key].kept:  # nothing builds or times it: its weights go now
                    self.built.pop(key, None)
                    self.trials.pop(key, None)
            losers = [m for m in round_ if not m.kept]
            if not losers:
                return
            vetoed = sum(map(len, self.vetoes.values()))
            for m in losers:
                for node in m.nodes:
                    self.vetoes.setdefault(node, {})[m.backend] = m.summary()
                    if m.failure is None:
                        self.slower.setdefault(node, set()).add(m.backend)
            if sum(map(len, self.vetoes.values())) == vetoed:
                raise _Unsettled(
                    f"{losers[0].partition} ({losers[0].backend}) lost on nodes its backend "
                    "may not claim already, so partitioning again cannot change the plan"
                )
            self.plan = partition(self.read, self.ctx, vetoes=self.vetoes)
        raise _Unsettled(f"the plan did not settle in {bound} rounds of partitioning")

    def _search_or_stay(self, feeds: dict[str, Any], verdicts: dict[str, Measurement]) -> bool:
        """``_search``; where it cannot finish (the machine runs low on memory while it runs
        the candidates' plans, or onnxruntime cannot load a segment of one: byoc's bug), the
        plan settled before it stays, every partition of it checked, and one line says so. The
        search changes the plan only when it finishes."""
        try:
            return self._search(feeds, verdicts)
        except _Unrunnable as exc:
            report = exc.advice if exc.advice is _REPORT else ""
            warnings.warn(
                f"measured placement: the search for faster partitions stopped ({exc}{report}); "
                "the plan checked before it stays",
                stacklevel=4,
            )
            return False

    def _search(self, feeds: dict[str, Any], verdicts: dict[str, Measurement]) -> bool:
        """Candidates from every backend: each one partitions the whole graph on its own, and
        its partitions that win against onnxruntime are candidates beside the plan's. The
        candidates that save the most time, taken greedily without overlap, replace the
        priority-order plan when they save more than it by the margin: the nodes they do not
        give a backend are vetoed for it, with the reason, and the plan is cut again. Returns
        whether it changed the plan ([compile] search)."""
        if not self.cfg.compile["search"] or len(self.tables) < 2:
            return False
        search_key = self._search_key()
        known = self._cached_search(search_key)
        if known is not None:
            return known
        before, disturbed = set(verdicts), self.disturbed
        changed, stopped = self._search_anew(feeds, verdicts)
        if not stopped and self.disturbed == disturbed:
            entry = {
                "vetoes": self.vetoes if changed else None,
                "candidates": sorted(set(verdicts) - before),
                "measured_at": time.time(),
            }
            self.cache.put_json(search_key, entry)
        return changed

    def _search_anew(
        self, feeds: dict[str, Any], verdicts: dict[str, Measurement]
    ) -> tuple[bool, bool]:
        """The search itself: whether it changed the plan, and whether it stopped early."""
        current = [verdicts[self._key(u)] for u in self.plan.partitions]
        candidates = {id(m): m for m in current}
        made = {id(verdicts[self._key(u)]): (u, self._key(u)) for u in self.plan.partitions}
        trial_of: dict[str, _Trial] = {}
        deadline = time.perf_counter() + self.cfg.compile["search_seconds"]
        stopped = False
        for name in self.tables:
            if stopped:
                break
            plan = partition(self.read, self.ctx.alone(name), vetoes=self._unbeaten(name))
            if not plan.partitions:
                continue
            trials = self._reference(feeds, plan)
            for i, unit in enumerate(plan.partitions, start=1):
                key = self._key(unit)
                if key not in verdicts and time.perf_counter() > deadline:
                    stopped = True
                    break
                if key not in verdicts:
                    if self.progress is not None:
                        self.progress(i, len(plan.partitions), f"searching: {unit.name}")
                    try:
                        verdicts[key] = self._verdict(unit, key, trials[unit.name])
                    except ByocError:  # a candidate only: its failure costs nothing
                        continue
                if not verdicts[key].kept:  # as in _settle
                    self.built.pop(key, None)
                    trials.pop(unit.name, None)
                else:
                    candidates[id(verdicts[key])] = verdicts[key]
                    made.setdefault(id(verdicts[key]), (unit, key))
                    trial_of[key] = trials[unit.name]
        if stopped:
            warnings.warn(
                f"measured placement: the search stopped after [compile] search_seconds = "
                f"{self.cfg.compile['search_seconds']:g}; candidates not yet timed were left out "
                "(a compile with the cache filled times fewer)",
                stacklevel=5,
            )
        chosen: list[Measurement] = []
        taken: set[str] = set()
        bases = _bases(list(candidates.values()))
        ranked = sorted(candidates.values(), key=lambda m: _saved_ms(m, bases[id(m)]), reverse=True)
        for m in self._challengers_first(ranked, current, bases):
            if not any(n in taken for n in m.nodes):
                chosen.append(m)
                taken.update(m.nodes)
        chosen = [self._contest(m, current, made, trial_of) for m in chosen]
        owner = {n: m for m in chosen for n in m.nodes}
        kept = {id(m) for m in chosen} & {id(m) for m in current}
        ins = [m for m in chosen if id(m) not in kept]
        outs = [m for m in current if id(m) not in kept]

        # clear only when the savings as timed and on the shared bases agree: where they
        # disagree (drift, or a region's extra nodes costing more than drift), end to end decides
        def better(a: list[Measurement], b: list[Measurement]) -> bool:
            return all(self._clearly_better(a, b, x) for x in ({}, bases))

        def gains(a: list[Measurement], b: list[Measurement]) -> bool:
            return all(self._gains(a, b, current, x) for x in ({}, bases))

        if not ins or better(outs, ins):
            return False, stopped
        vetoes = {node: dict(by) for node, by in self.vetoes.items()}
        for m in candidates.values():
            for node in m.nodes:
                winner = owner.get(node)
                if winner is None or winner.backend != m.backend:
                    vetoes.setdefault(node, {})[m.backend] = _lost_search(winner, m)
        for node, winner in owner.items():  # a chosen region is its backend's alone
            vetoes.get(node, {}).pop(winner.backend, None)  # a smaller piece's loss
            for name in self.tables:
                if name != winner.backend:
                    vetoes.setdefault(node, {}).setdefault(name, _lost_search(winner))
        if not (gains(ins, outs) and better(ins, outs)):
            self._sharpen(ins + outs, made, {**self.trials, **trial_of})
            bases = _bases(list(candidates.values()))
            if better(outs, ins):
                return False, stopped
            clear = gains(ins, outs) and better(ins, outs)
            if not clear and not self._faster_whole(vetoes, feeds):
                return False, stopped  # a near tie, end to end too: the priority plan stays
        self.vetoes.clear()  # in place: the compile's own dict (codegen refusals join it)
        self.vetoes.update(vetoes)
        self.plan = partition(self.read, self.ctx, vetoes=self.vetoes)
        return True, stopped

    def _challengers_first(
        self, ranked: list[Measurement], current: list[Measurement], bases: dict[int, float]
    ) -> list[Measurement]:
        """``ranked`` with each partition of the plan preceded by a candidate of another
        backend for nearly its region that it does not clearly beat (on the savings as timed
        and on the shared bases): that near tie then goes to the end-to-end check, which keeps
        the plan unless the candidate's is faster by the margin. Without it a near tie stayed
        with whichever ranked first: bert-enc's dnnl and OpenVINO encoders timed 0.72-0.74 of
        onnxruntime each, while end to end OpenVINO's plan ran at 0.88-0.92 of dnnl's."""
        order = list(ranked)
        mine = {id(m) for m in current}

        def at(m: Measurement) -> int:  # by identity: measurements compare by value
            return next(i for i, o in enumerate(order) if o is m)

        for a in ranked:
            if id(a) not in mine:
                continue
            rival = next(
                (
                    b
                    for b in ranked
                    if id(b) not in mine
                    and b.backend != a.backend
                    and _near(a, b)
                    and not all(self._clearly_better([a], [b], x) for x in ({}, bases))
                ),
                None,
            )
            if rival is not None and at(rival) > at(a):
                order.insert(at(a), order.pop(at(rival)))
        return order

    def _faster_whole(self, vetoes: dict[str, dict[str, str]], feeds: dict[str, Any]) -> bool:
        """A near tie between partitions, decided end to end: the search's plan and the
        priority plan, both built (with what was compiled already) and timed against each other
        in alternating blocks as the whole-model check; the search's must be faster by the
        margin. Partition savings each rest on an onnxruntime time of their own region, timed
        apart: bert-enc's dnnl encoder (166 nodes) saved 1.50-1.63 ms and OpenVINO's (173, its
        token-id Gathers too) 1.58-1.60, a tie that flipped between compiles, while end to end
        OpenVINO's plan ran at 0.66-0.71 of onnxruntime and dnnl's at 0.73-0.79."""

        def reuse(unit: Partition) -> tuple[Any, Any] | None:
            return self.built.get(self._key(unit)) if unit.backend != FALLBACK else None

        try:
            theirs, ours = (
                build(plan, self.ctx, reuse=reuse)
                for plan in (partition(self.read, self.ctx, vetoes=vetoes), self.plan)
            )
            once = time.perf_counter()
            theirs.run(feeds), ours.run(feeds)
            once = (time.perf_counter() - once) / 2
        except ByocError:  # the whole-model check and the next rounds say what failed
            return False
        if self.progress is not None:
            self.progress(1, 1, "searching: the two plans end to end")
        margin = self.margin
        timing = self._undisturbed(
            lambda: time_blocks(
                lambda _: theirs.run(feeds),
                lambda _: ours.run(feeds),
                [],
                lambda a, b: 1 - margin,
                budget=_whole_budget(once),
            )
        )
        return not self._busy(timing) and timing.interval[1] < 1 - margin

    def _gains(
        self,
        ins: list[Measurement],
        outs: list[Measurement],
        current: list[Measurement],
        bases: dict[int, float],
    ) -> bool:
        """The new partitions save more than the replaced ones by the margin of the plan's
        onnxruntime time (savings on ``bases`` where given, _bases; else as timed)."""
        gain = sum(_saved_ms(m, bases.get(id(m))) for m in ins) - sum(
            _saved_ms(m, bases.get(id(m))) for m in outs
        )
        return gain > max(0.0, self.margin * sum(m.onnxruntime_ms for m in current))

    @staticmethod
    def _clearly_better(
        ins: list[Measurement], outs: list[Measurement], bases: dict[int, float]
    ) -> bool:
        """The least the new partitions save beats the most the replaced ones save."""
        least = sum(_saved_range(m, bases.get(id(m)))[0] for m in ins)
        return least > sum(_saved_range(m, bases.get(id(m)))[1] for m in outs)

    def _sharpen(
        self,
        ms: list[Measurement],
        made: dict[int, tuple[Partition, str]],
        trials: dict[str, _Trial],
    ) -> None:
        """Time these partitions again, longer (60 pairs, up to 4 s each), so that their intervals
        narrow: a near tie on the first timings (ViT-tiny: OpenVINO [0.75, 0.86] against dnnl
        [0.87, 0.91]) is decided by more samples, not by the first ones' noise."""
        for m in ms:
            unit, key = made.get(id(m), (None, ""))
            runtime, trial = self.built.get(key), trials.get(key)
            if unit is None or runtime is None or trial is None or m.precision != "fp32":
                continue
            again = self._time(unit, runtime[1], trial, budget=4.0, pairs=60)
            if again.disturbed:  # no evidence: the first timing stands
                continue
            for name in ("backend_ms", "onnxruntime_ms", "call_ms", "interval", "samples"):
                setattr(m, name, getattr(again, name))
            m.measured_at, m.cached, m.kept = again.measured_at, False, self._wins(again)
            self.cache.put(key, m)

    def _search_key(self) -> str:
        """What a search's outcome depends on: the model, every backend (version, build,
        settings), the fallback, the host, the decision's settings and the vetoes so far."""
        backends = {
            name: [self.reg.backends[name].version, self.reg.backends[name].build(), table]
            for name, table in self.tables.items()
        }
        c = self.cfg.compile
        head = {
            "cache": CACHE_VERSION,
            "rules": SEARCH_RULES,
            "search": backends,
            "fallback": _quiet(self.cfg.fallback),
            "host": host_id(),
            "decide": [c["margin"], c["precision"], c["precision_tolerance"]],
            # which backends may not take which nodes, and which of those are timing losses
            # (not the reasons: a cached verdict's reads "(cached)", a fresh one's not)
            "vetoes": {node: sorted(by) for node, by in self.vetoes.items()},
            "slower": {node: sorted(by) for node, by in self.slower.items()},
        }
        digest = hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode())
        digest.update(self.source.SerializeToString(deterministic=True))
        return f"search-{digest.hexdigest()}"

    def _cached_search(self, key: str) -> bool | None:
        """A search done before on the same model and settings: its vetoes applied (whether
        the plan changed), its candidates' cached timings kept for ``explain``; None to search
        (none cached, [compile] remeasure, or older than remeasure_after days). Each partition
        of the plan it leads to is still checked and run once, as every cached verdict is."""
        if self.cfg.compile["remeasure"]:
            return None
        entry = self.cache.get_search(key, model=self.read.decisions)
        if entry is None:
            return None
        if (time.time() - entry.measured_at) / 86400 >= self.cfg.compile["remeasure_after"]:
            return None
        for key_ in entry.candidates:
            m = self._cached(key_, None, self.tables)
            if m is not None:
                self.shown[key_] = m
        if entry.vetoes is None:
            return False
        self.vetoes.clear()  # in place: the compile's own dict (codegen refusals join it)
        self.vetoes.update(entry.vetoes)
        self.plan = partition(self.read, self.ctx, vetoes=self.vetoes)
        return True

    def _unbeaten(self, backend: str) -> dict[str, dict[str, str]]:
        """The vetoes for ``backend``'s search candidates: all but its partitions' timing
        losses, since a piece that lost alone says nothing of the larger region around it
        (whisper: OpenVINO's fragments between dnnl's lost, OpenVINO on the whole model wins)."""
        lost = {node for node, by in self.slower.items() if backend in by}
        return {
            node: {b: r for b, r in by.items() if b != backend or node not in lost}
            for node, by in self.vetoes.items()
        }

    def _contest(
        self,
        m: Measurement,
        current: list[Measurement],
        made: dict[int, tuple[Partition, str]],
        trial_of: dict[str, _Trial],
    ) -> Measurement:
        """``m``, or the partition of the plan it would replace: a candidate for the same
        region (same nodes and inputs) on another backend is timed head to head against it,
        in turn on the same inputs, and replaces it only if clearly faster by the margin (a
        near tie keeps the priority plan, on every compile)."""
        rival = next((c for c in current if c is not m and set(c.nodes) == set(m.nodes)), None)
        if rival is None or id(m) not in made or id(rival) not in made:
            return m
        (unit, key), (other, other_key) = made[id(m)], made[id(rival)]
        mine, theirs = self.built.get(key), self.built.get(other_key)
        if unit.inputs != other.inputs or mine is None or theirs is None or key not in trial_of:
            return m
        margin = self.margin
        args = list(trial_of[key].args)
        timing = self._undisturbed(
            lambda: time_pair(mine[1].run, theirs[1].run, args, lambda a, b: 1 - margin)
        )
        return m if not self._busy(timing) and timing.interval[1] < 1 - margin else rival

    def _verdict(self, unit: Partition, key: str, trial: _Trial) -> Measurement:
        """Compile a partition and run it once; a failure (or, measured, a difference from
        onnxruntime) returns it untimed; else, measured, its timing (cached) decides. With
        ``[compile] precision``, the backend's reduced-precision options are tried first and
        kept if the outputs stay within ``precision_tolerance``; else it runs in fp32."""
        precision, note = "fp32", ""
        made: tuple[Any, Any] | None = None
        unit.options = self._reduced(unit)
        wanted, tol = self.cfg.compile["precision"], self.cfg.compile["precision_tolerance"]
        if not unit.options and wanted != "fp32" and host.cpu().has_bf16():
            note = f"in fp32: {unit.backend} offers no {wanted} on this CPU"
        if unit.options:
            made, failure, error = self._try(unit, key, trial, exact=False)
            if failure is None and error <= tol:
                precision, note = wanted, f"in {wanted}: error {error:.2g} <= {tol:g}"
            else:
                why = failure or f"error {error:.2g} > [compile] precision_tolerance {tol:g}"
                note = f"in fp32: {wanted} {why}"
                unit.options, made = {}, None
        failure, timed = None, key if precision == "fp32" else f"{key}-{precision}"
        if made is None:
            made, failure, _ = self._try(unit, key, trial, exact=True)
            if failure is not None and made is not None and self.reg.backends[unit.backend].exact:
                made, failure, why = self._try_exact(unit, key, trial, failure)
                note, timed = "; ".join(filter(None, (note, why))), f"{key}-exact"
        nodes = list(unit.nodes)
        if failure is not None:
            m = Measurement(unit.name, unit.backend, nodes, 0.0, 0.0, False, failure=failure)
        elif not self.measured_mode:
            m = Measurement(unit.name, unit.backend, nodes, 0.0, 0.0, True)
        else:
            cached = self._cached(timed, nodes, (unit.backend,))
            m = cached or self._time(unit, made[1], trial)  # type: ignore[index]
            if not m.cached and not m.disturbed:
                self.cache.put(timed, m)
        self.options[key] = dict(unit.options)
        m.precision, m.precision_note = precision, note
        return m

    def _try_exact(
        self, unit: Partition, key: str, trial: _Trial, failure: str
    ) -> tuple[tuple[Any, Any] | None, str | None, str]:
        """A partition whose outputs differed from onnxruntime's (``failure``), compiled again
        with its backend's ``exact`` options: what was made, why it still fails (both
        reasons), and the note that says why it runs with them."""
        exact = self.reg.backends[unit.backend].exact
        unit.options = {**unit.options, **exact}
        made, again, _ = self._try(unit, key, trial, exact=True)
        options = ", ".join(f"{k} = {v!r}" for k, v in exact.items())
        if again is None:
            return made, None, f"with {options} (with its faster kernels: {failure})"
        unit.options = {}
        return None, f"{failure}; with {options}: {again}", ""

    def _try(
        self, unit: Partition, key: str, trial: _Trial, *, exact: bool
    ) -> tuple[tuple[Any, Any] | None, str | None, float]:
        """Compile the partition (with its options) and run it once: what was made, why it is
        not to be trusted (``_run_once``; for a reduced precision, only a failure), and (for a
        reduced precision) its ``precision_error``."""
        table = {**self.tables[unit.backend], **unit.options}
        try:
            made = compile_unit(self.reg, unit.backend, unit, table)
        except (NodesRefused, ConfigError):
            raise
        except ByocError as exc:
            if exact and self.cfg.backends is not None:  # named in `backends`: it must work
                raise
            return None, f"failed to compile ({exc})", math.inf
        if exact:
            failure = self._run_once(unit, made[1], trial)
            error = 0.0
        else:
            try:
                got = results_of(unit, made[1].run(list(trial.args)))
                failure, error = None, precision_error(got, trial.outputs)
            except Exception as exc:
                failure, error = f"failed ({type(exc).__name__}: {exc})", math.inf
        if failure is None:
            self.built[key] = made
        else:
            self.built.pop(key, None)
        return made, failure, error

    def _reduced(self, unit: Partition) -> dict[str, Any]:
        """The backend's options for ``[compile] precision`` on this CPU, or none."""
        wanted = self.cfg.compile["precision"]
        if wanted == "fp32" or not host.cpu().has_bf16():
            return {}
        offered = self.reg.backends[unit.backend].precisions.get(wanted, {})
        return dict(offered(unit) if callable(offered) else offered)

    def _run_once(self, unit: Partition, runtime: Any, trial: _Trial) -> str | None:
        """Why the partition's one run on the measurement inputs is not to be trusted, if it
        is not: it raised, returned the wrong things, or (measured placement) an output
        differs from onnxruntime's beyond [compare] rtol/atol plus twice what onnxruntime's
        own runs of the partition differ by (``_references``)."""
        try:
            got = results_of(unit, runtime.run(list(trial.args)))
        except Exception as exc:
            return f"failed on the measurement inputs ({type(exc).__name__}: {exc})"
        if not self.measured_mode:
            return None
        return self._differs(unit, got, trial.outputs, lambda: self._references(unit, trial.args))

    def _differs(
        self,
        unit: Partition,
        got: list[Any],
        want: list[Any],
        references: Callable[[], list[list[Any]]],
    ) -> str | None:
        """Why ``got`` is not ``want`` (onnxruntime's outputs of ``unit``), or None: an output
        differs beyond [compare] rtol/atol plus twice what onnxruntime's own runs differ by
        (``references()``, run only for an output that differs)."""
        rtol, atol = self.cfg.compare["rtol"], self.cfg.compare["atol"]
        others: list[list[Any]] | None = None
        for i, (name, g, w) in enumerate(zip(unit.outputs, got, want, strict=True)):
            report = compare_arrays(name, g, w, rtol, atol)
            if report.passed:
                continue
            if others is None:  # how far onnxruntime is from itself, for this unit
                others = references()
            wide = within_spread(
                name, g, w, [o[i] for o in others], rtol, atol, unit.graph.quantum(name)
            )
            if wide.passed:
                continue
            detail = report.note or f"max abs error {report.max_abs:.3g}"
            return (
                f"output '{name}' differs from onnxruntime's on the measurement inputs "
                f"({detail}; [compare] rtol = {rtol:g}, atol = {atol:g}, plus twice the "
                f"{wide.spread:.3g} that onnxruntime's own runs differ by"
                + (f", plus the {wide.quantum:.3g} ties may move it" if wide.quantum else "")
                + ")"
            )
        return None

    def _references(self, unit: Partition, args: list[Any]) -> list[list[Any]]:
        """The partition's outputs from onnxruntime's other runs: with its graph optimizations
        off, and (float16 or bfloat16) in float32, with and without rounding what each node
        writes (``float32_outputs``). Fused kernels round differently (a QDQ model's
        QLinearConv against DequantizeLinear, Conv, QuantizeLinear: a quantum, which later
        layers carry on and scale: 10.2 on yolov8n-det-qdq's boxes of up to 317), and a
        backend may keep float32 between float16 ops, or round after each where onnxruntime
        does not, so a backend may differ from onnxruntime by twice what these runs do."""
        table = {**self._quiet_fallback(), "graph_optimization_level": "disable"}
        runs = [list(compile_unit(self.reg, FALLBACK, unit, table)[1].run(list(args)))]
        feeds = dict(zip(unit.inputs, args, strict=True))
        for rounded in (False, True):
            wide = float32_outputs(unit.model, feeds, unit.outputs, rounded)
            runs += [] if wide is None else [wide]
        return runs

    def _quiet_fallback(self) -> dict[str, Any]:
        """The [fallback] table for onnxruntime runs beside a backend's (``_quiet``)."""
        return _quiet(fallback_config(self.cfg, self.plan, self.reg))

    def _short_of_memory(self) -> str | None:
        """Why measuring would likely run this machine out of memory (an out-of-memory kill
        loses the whole compile, unsaid), or None: measured placement holds the model, each
        partition's ONNX, the backends' builds and onnxruntime's sessions of them at once,
        11-15x the weights (gpt2-ts, 117 MB: 1.7 GB; 256 MB of MatMul weights: 2.9 GB), about
        MEMORY_PER_WEIGHT_BYTE times them at most, where static placement takes 8-9x."""
        if not self.measured_mode:
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

    def _unchecked(self, why: str, advice: str = _GIVE_INPUTS) -> Plan:
        """Nothing could be run: with measured placement every partition goes back to
        onnxruntime (the path that cannot be wrong or slow); static placement keeps them."""
        if not self.measured_mode:  # the user's choice: a note in explain, no warning
            return self._placed(Placement("static", note=f"partitions kept unchecked: {why}"))
        note = f"every partition runs on onnxruntime: {why}"
        warnings.warn(f"measured placement: {note}{advice}", stacklevel=4)
        return self._on_onnxruntime(
            f"returned to onnxruntime: {why}", Placement("measured", note=note)
        )

    def _on_onnxruntime(self, reason: str, placement: Placement) -> Plan:
        """The model as plain onnxruntime: every claimed node vetoed for every backend."""
        for node in self.plan.decisions:
            self.vetoes[node] = dict.fromkeys(self.tables, reason)
        self.plan = partition(self.read, self.ctx, vetoes=self.vetoes)
        return self._placed(placement)

    def _placed(self, placement: Placement) -> Plan:
        for unit in self.plan.partitions:  # the precision each was decided in
            unit.options = self.options.get(self._key(unit), {})
        self.plan.placement = placement
        return self.plan

    # -- inputs and keys ----------------------------------------------------------------------

    def _model_inputs(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """The given inputs, checked, and random ones for the rest."""
        graph = Graph(self.plan.model)  # read and specialized already
        cmp = self.cfg.compare
        feeds = random_inputs(graph, self.cfg.shapes, cmp["seed"], cmp["inputs"], given=given)
        if given is None:
            return feeds
        return check_inputs({n: graph.type_of(n) for n in graph.inputs}, feeds)

    def _wins(self, m: Measurement) -> bool:
        """A partition returned to onnxruntime joins a neighbouring session, which saves a
        session call: so the backend must beat onnxruntime's time less that call, less the
        margin. Timing went on until the ratio's interval was clear of that threshold; when
        the budget ran out first (unclear), it is kept only if its median passes and the
        interval is clear of onnxruntime's time without the margin: a median 2% ahead on a
        noisy machine is not yet a win (light_densenet121 kept so, then ran 1.03x in its own
        process), and one noisy round no longer throws a 10% win away."""
        m.margin = self.margin
        if m.disturbed:
            m.clear = False
            return False
        if m.interval is None:
            return m.backend_ms <= m.needed_ms()
        lo, hi = m.interval
        threshold = m.threshold()
        m.clear = hi < threshold or lo > threshold
        if m.clear:
            return hi < threshold
        return m.backend_ms <= m.needed_ms() and hi < m.threshold(margin=False)

    def _cached(
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
        m.kept = self._wins(m)
        days = (time.time() - m.measured_at) / 86400
        if not m.clear and days >= self.cfg.compile["remeasure_after"]:
            return None
        return m

    def _key(self, unit: Partition) -> str:
        """The cache key of a backend partition (hashing a large model is worth doing once)."""
        known = self._keys.get(id(unit))
        if known is not None and known[0]() is unit:  # a weak reference: losers' weights go
            return known[1]
        backend = self.reg.backends[unit.backend]
        head = {
            "cache": CACHE_VERSION,
            "backend": [unit.backend, backend.version, backend.build()],
            "table": self.tables[unit.backend],
            "fallback": _quiet(self.cfg.fallback),
            "host": host_id(),
        }
        digest = hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode())
        digest.update(unit.model.SerializeToString(deterministic=True))
        self._keys[id(unit)] = (weakref.ref(unit), digest.hexdigest())
        return self._keys[id(unit)][1]

    # -- timing -------------------------------------------------------------------------------

    def _reference(self, feeds: dict[str, Any], plan: Plan) -> dict[str, _Trial]:
        """Run a plan on onnxruntime: each backend partition's real inputs and outputs. A
        value is let go after its last reader, as a compiled model does (mvit_v2_s on a video
        clip: 12 GB of activations in all, 1.2 GB live at once in onnxruntime)."""
        quiet = self._quiet_fallback()
        env = dict(feeds)
        trials: dict[str, _Trial] = {}
        last = {n: i for i, unit in enumerate(plan.schedule) for n in unit.inputs}
        for i, unit in enumerate(plan.schedule):
            try:  # a segment byoc made that onnxruntime cannot load is byoc's bug: fail safe
                runtime = compile_unit(self.reg, FALLBACK, unit, quiet)[1]
            except BackendError as exc:
                raise _Unrunnable(
                    f"onnxruntime cannot load {unit.name}, which byoc made: {exc}",
                    _REPORT,
                ) from exc
            args = [env[n] for n in unit.inputs]
            try:
                outputs = runtime.run(args)
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}"
                raise _Unrunnable(f"onnxruntime fails on the measurement inputs ({msg})") from exc
            if unit.backend != FALLBACK:
                trials[unit.name] = _Trial(args, list(outputs), runtime.run)
            env.update(zip(unit.outputs, outputs, strict=True))
            for name in [n for n in env if last.get(n, -1) <= i]:
                del env[name]
            self._enough_memory(f"{i + 1} of the plan's {len(plan.schedule)} units")
        return trials

    def _enough_memory(self, where: str) -> None:
        """Stop checking (``_Unrunnable``) where the machine is running out of memory: the
        partitions' real inputs and outputs are held until each is checked, and on a model
        of large activations and many partitions they add up (mvit_v2_s on a video clip: 162
        partitions, past 12 GB, where onnxruntime runs the model in 1.2 GB)."""
        free = host.available_memory()
        if free is not None and self.memory_floor is not None and free < self.memory_floor:
            raise _Unrunnable(
                f"the machine ran low on memory while checking the partitions ({free / 2**30:.1f}"
                f" GB left after {where}: their real inputs and outputs are kept to check them)",
                _STATIC_ADVICE,
            )

    def _time(
        self, unit: Partition, runtime: Any, trial: _Trial, budget: float = 1.0, pairs: int = 8
    ) -> Measurement:
        """The partition on its backend against onnxruntime, on its real inputs."""
        if self._call_ms is None:  # once per compile: what an empty session call costs
            self._call_ms = session_call_ms(self._quiet_fallback(), self.reg)
        call_ms, margin = self._call_ms, self.margin

        def threshold(_: float, t_ort: float) -> float:
            return max(0.0, 1 - min(call_ms, t_ort) / t_ort) * (1 - margin)

        timing = self._undisturbed(
            lambda: time_pair(
                runtime.run, trial.ort, trial.args, threshold, budget=budget, min_pairs=pairs
            )
        )
        return self._judged(unit.name, unit.backend, list(unit.nodes), timing, call_ms)

    def _busy(self, timing: Timing) -> bool:
        """Whether other processes took more than ``host.BUSY`` of the CPUs while timed."""
        return host.busy(timing.others)

    def _undisturbed(self, timed: Callable[[], Timing]) -> Timing:
        """``timed()``, and once more after a pause when other processes took more than
        ``host.BUSY`` of the CPUs meanwhile (a burst passes). A neighbour slows the two sides
        unequally: while a torch export ran, oneDNN's OpenMP threads, which share each
        primitive between them, took 6-13x their time on P1, onnxruntime's pool 1.5x. Once a
        timing of this compile stayed disturbed the machine is busy: nothing is timed twice."""
        timing = timed()
        if self._busy(timing) and not self.disturbed:
            time.sleep(PAUSE)
            timing = timed()
        if self._busy(timing):
            self.disturbed += 1
        return timing

    def _judged(
        self, name: str, backend: str, nodes: list[str], timing: Timing, call_ms: float = 0.0
    ) -> Measurement:
        m = Measurement(name, backend, nodes, timing.first_ms, timing.second_ms, False)
        m.call_ms = min(call_ms, timing.second_ms)
        m.interval, m.samples, m.measured_at = timing.interval, timing.samples, time.time()
        m.others, m.disturbed = timing.others, self._busy(timing)
        m.kept = self._wins(m)
        return m

    def _whole(self, compiled: CompiledModel, feeds: dict[str, Any]) -> Measurement:
        """The compiled model against plain onnxruntime on the whole model, with the user's
        ``[fallback]`` settings (its threads spin by default, as they would for a user who
        runs onnxruntime alone). A spinning pool slows a backend's threads while they take
        turns, so the two are timed in blocks, each block's first runs discarded."""
        nodes = [n for p in compiled.plan.partitions for n in p.nodes]  # type: ignore[union-attr]
        whole = _whole_unit(self.source)
        plain = compile_unit(self.reg, FALLBACK, whole, self.cfg.fallback)[1]
        args = [feeds[n] for n in plain.input_names]
        try:
            start = time.perf_counter()
            got = compiled.run(feeds)
            once = time.perf_counter() - start
            differs = None
            if not self._reduced_precision() and not _draws_random(self.source.graph):
                outputs, want = [got[n] for n in whole.outputs], list(plain.run(args))
                others = functools.partial(self._references, whole, args)
                differs = self._differs(whole, outputs, want, others)
            failure = f"the compiled model's {differs}" if differs else None
        except Exception as exc:  # each partition ran alone, but not all of them together
            failure = f"failed on the measurement inputs ({type(exc).__name__}: {exc})"
        if failure is not None:  # each partition's outputs were close, the model's are not
            return Measurement("the compiled model", "byoc", nodes, 0, 0, False, failure=failure)
        key = self._whole_key()
        cached = self._cached(key, nodes, ("byoc",))
        if cached is not None:  # an unclear one only until remeasure_after days (_cached)
            return cached
        if self.progress is not None:
            self.progress(1, 1, "measuring the whole model")
        timing = self._undisturbed(lambda: self._against_plain(compiled, plain, feeds, once))
        m = self._judged("the compiled model", "byoc", nodes, timing)
        if not m.disturbed:
            self.cache.put(key, m)
        return m

    def _reduced_precision(self) -> bool:
        """Whether a partition runs in a reduced precision: its outputs were held to
        ``[compile] precision_tolerance``, not to [compare]'s, so the model's are too."""
        verdicts = (self.verdicts.get(self._key(u)) for u in self.plan.partitions)
        return any(m is not None and m.precision != "fp32" for m in verdicts)

    def _against_plain(
        self, compiled: CompiledModel, plain: Any, feeds: dict[str, Any], once: float
    ) -> Timing:
        """The compiled model timed against ``plain``, an onnxruntime session of the whole
        model (whose threads stop when it returns)."""
        args = [feeds[n] for n in plain.input_names]
        margin = self.margin
        return time_blocks(
            lambda _: compiled.run(feeds),
            plain.run,
            args,
            lambda a, b: 1 - margin,
            budget=_whole_budget(once),
        )

    def _whole_key(self) -> str:
        digest = hashlib.sha256(b"whole")
        for unit in self.plan.schedule:
            digest.update(self._key(unit).encode() if unit.backend != FALLBACK else b"-")
            digest.update(unit.model.SerializeToString(deterministic=True))
        digest.update(json.dumps([self.cfg.fallback, host_id()], default=str).encode())
        return digest.hexdigest()

    def _unexplained(self, whole: Measurement) -> str | None:
        """Why the whole model's measured win is not credible, or None. Only its partitions
        can make the model faster than plain onnxruntime (the rest is the same sessions' work,
        plus handoffs): when what they save, each timed beside onnxruntime, is less than the
        margin of the whole model's time, a larger win end to end was a disturbance of one
        side, as a neighbour on the core of onnxruntime's pinned thread makes (swin on an AVX2
        EPYC: 0.75x measured once and cached, 1.12x in its own process)."""
        saved = 0.0
        for unit in self.plan.partitions:
            m = self.verdicts.get(self._key(unit))
            if m is None:
                return None
            saved += max(m.onnxruntime_ms - m.call_ms - m.backend_ms, 0.0)
        if saved >= self.margin * whole.onnxruntime_ms:
            return None
        return (
            f"the compiled model's partitions save {saved:.3g} ms, less than the "
            f"{self.margin:.0%} margin of plain onnxruntime's {whole.onnxruntime_ms:.3g} ms, so "
            f"its {whole.backend_ms:.3g} ms end to end{whole.spread()} is not a win to trust"
        )

    def _whole_model_verdict(self, placement: Placement, unexplained: str | None) -> Plan | None:
        whole = placement.whole
        assert whole is not None
        slower = (
            whole.failure
            or (f"the whole-model check: {whole.busy()}" if whole.disturbed else None)
            or unexplained
            or (
                f"the compiled model is not faster than plain onnxruntime "
                f"({whole.backend_ms:.3g} ms vs {whole.onnxruntime_ms:.3g} ms{whole.spread()})"
            )
        )
        if whole.failure is None and not self.cfg.compile["whole_model_fallback"]:
            warnings.warn(f"{slower}; kept ([compile] whole_model_fallback = false)", stacklevel=4)
            return None
        whole.kept = False  # as explain shows it (the cache holds the timing as measured)
        warnings.warn(f"{slower}: running it as one onnxruntime session", stacklevel=4)
        return self._on_onnxruntime(f"the whole model runs on onnxruntime: {slower}", placement)


@dataclass
class Timing:
    """Two things timed against each other: median milliseconds of each, the ~95% interval of
    the median of their ratio (first / second), and how many samples made it."""

    first_ms: float
    second_ms: float
    interval: tuple[float, float]
    samples: int
    others: float | None = None  # the share of the CPUs other processes took meanwhile


def _whole_budget(once: float) -> float:
    """Seconds for timing two whole models that run once in ``once`` seconds: room for ~12
    rounds of two blocks (gap, two warm-up runs, then runs), within ``WHOLE_BUDGET``."""
    per_round = 2 * (0.05 + 2 * once + max(once, 0.03))
    return min(WHOLE_BUDGET[1], max(WHOLE_BUDGET[0], 12 * per_round))


def median_interval(ratios: list[float]) -> tuple[float, float]:
    """A distribution-free ~95% confidence interval of the median (the sign test's order
    statistics): a few outliers, a noisy neighbour's burst, move it little."""
    ordered = sorted(ratios)
    n = len(ordered)
    k = max(0, math.floor((n - 1.96 * math.sqrt(n)) / 2))
    return ordered[k], ordered[n - 1 - k]


def sequential(
    sample: Callable[[int], tuple[float, float]],
    threshold: Callable[[float, float], float],
    *,
    min_samples: int,
    budget: float,
) -> Timing:
    """Draw samples (seconds of first and second) until the interval of their median ratio
    lies on one side of ``threshold(first's median, second's median)`` or ``budget`` seconds
    are spent, after at least ``min_samples`` (three when one is more than twice as fast)."""
    a: list[float] = []
    b: list[float] = []
    mark, start = host.cpu_mark(), time.perf_counter()
    while True:
        x, y = sample(len(a))
        a.append(x)
        b.append(y)
        n = len(a)
        if n >= 3 and (min(a) > 2 * max(b) or min(b) > 2 * max(a)):
            break
        if n >= min_samples:
            lo, hi = median_interval([p / q for p, q in zip(a, b, strict=True)])
            t = threshold(statistics.median(a) * 1e3, statistics.median(b) * 1e3)
            if hi < t or lo > t or time.perf_counter() - start > budget:
                break
    ratios = [p / q for p, q in zip(a, b, strict=True)]
    return Timing(
        statistics.median(a) * 1e3,
        statistics.median(b) * 1e3,
        median_interval(ratios),
        n,
        host.others_since(mark),
    )


def time_pair(
    first: Runner,
    second: Runner,
    args: list[Any],
    threshold: Callable[[float, float], float] = lambda a, b: 1.0,
    *,
    budget: float = 1.0,
    min_pairs: int = 8,
    warmup: int = 2,
) -> Timing:
    """``first(args)`` against ``second(args)`` in pairs, run in turn (ABBA order) after
    ``warmup`` runs each, until the ratio is clearly on one side of the threshold
    (``sequential``)."""
    for _ in range(warmup):
        first(args)
        second(args)

    def pair(i: int) -> tuple[float, float]:
        spent = [0.0, 0.0]
        for k in (0, 1) if i % 2 == 0 else (1, 0):
            t0 = time.perf_counter()
            (first if k == 0 else second)(args)
            spent[k] = time.perf_counter() - t0
        return spent[0], spent[1]

    return sequential(pair, threshold, min_samples=min_pairs, budget=budget)


def time_blocks(
    first: Runner,
    second: Runner,
    args: list[Any],
    threshold: Callable[[float, float], float] = lambda a, b: 1.0,
    *,
    rounds: int = 6,
    budget: float = 4.0,
    warmup: int = 2,
    min_runs: int = 1,
    block_seconds: float = 0.03,
    gap: float = 0.05,
) -> Timing:
    """``first(args)`` against ``second(args)`` in alternating blocks (first, second, first,
    ...) of at least ``min_runs`` runs and ``block_seconds``, after ``gap`` idle seconds and
    ``warmup`` untimed runs per block that absorb what the other one left behind (threads
    still spinning, cold caches);
    a round's sample is its two block medians, drawn until the ratio is clear (at least
    ``rounds``; ``sequential``). Short blocks and many rounds: a neighbour's burst spoils a
    round or two, which the median's interval shrugs off, where long blocks and three
    rounds let one burst make the verdict unclear (a 40 ms model read [0.30, 2.01] over 5
    rounds on a busy machine, [0.82, 0.89] in pairs). Six rounds to stop: all six on one
    side of the threshold, as likely as 1 in 64 by chance."""

    def block(fn: Runner) -> float:
        time.sleep(gap)  # the other one's idle threads stop spinning (onnxruntime's do)
        for _ in range(warmup):
            fn(args)
        start, times = time.perf_counter(), list[float]()
        while len(times) < min_runs or time.perf_counter() - start < block_seconds:
            t0 = time.perf_counter()
            fn(args)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return sequential(
        lambda _: (block(first), block(second)), threshold, min_samples=rounds, budget=budget
    )


def session_call_ms(config: Mapping[str, Any], reg: Registry | None = None) -> float:
    """Median milliseconds of one call of an onnxruntime session that does nothing (an
    Identity on one float): the fixed cost every onnxruntime unit of a plan pays."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])], "call", [x], [y]
    )
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 13)], ir_version=8
    )
    unit = Partition("call", FALLBACK, [], ["x"], ["y"], model)
    run = compile_unit(reg or plugins.registry(), FALLBACK, unit, config)[1].run
    args = [np.zeros(1, np.float32)]
    for _ in range(20):
        run(args)
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        run(args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _quiet(table: Mapping[str, Any]) -> dict[str, Any]:
    """A fallback table whose threads do not spin between runs (unless the user said so): a
    spinning onnxruntime pool steals the cores a backend's threads need while they alternate."""
    return {"allow_spinning": False, **table} if "allow_spinning" not in table else dict(table)


def _whole_unit(model: onnx.ModelProto) -> Partition:
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


def _draws_random(graph: onnx.GraphProto) -> bool:
    """Whether the graph, or a subgraph of one of its nodes, draws random values."""
    for node in graph.node:
        if node.op_type in _RANDOM:
            return True
        for attr in node.attribute:
            if attr.g.node and _draws_random(attr.g):
                return True
            if any(_draws_random(g) for g in attr.graphs):
                return True
    return False


_THREAD_ENV = ("OMP_", "GOMP_", "KMP_", "MKL_", "ONEDNN_", "DNNL_")


def host_id() -> str:
    """What a timing depends on beyond the code: the CPU model, its features, the cores, and
    the environment's threading settings (``OMP_*``, ``GOMP_*``, ``KMP_*``, ``MKL_*``,
    ``ONEDNN_*``, ``DNNL_*``: OpenMP's wait policy alone made oneDNN 2x slower on P1)."""
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_THREAD_ENV))
    c = host.cpu()
    text = f"{c.machine}|{c.model}|{' '.join(c.flags)}|{c.cores}|{env}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


MAX_ENTRY_BYTES = 16 << 20  # a larger cache entry is not byoc's: a search entry, the largest,
# holds a veto and its reason per node and backend (10,000 nodes, three backends: about 5 MB)
_KEY = re.compile(r"(search-)?[0-9a-f]{64}(-\w+)?")  # what _key, _whole_key, _search_key make


class BadEntry(ValueError):
    """A measurement cache entry byoc would not have written: damaged, edited, or about other
    nodes than those it is read for. The message says what is wrong, in one line."""


@dataclass(frozen=True)
class SearchEntry:
    """A search's outcome as cached: the vetoes it applied (None: the plan stayed), the cache
    keys of its candidates' measurements, and when it searched (``time.time()``)."""

    vetoes: dict[str, dict[str, str]] | None
    candidates: list[str]
    measured_at: float


@overload
def read_entry(
    raw: bytes | str | Mapping[str, Any],
    kind: Literal["measurement"] = ...,
    *,
    nodes: Sequence[str] | None = None,
    backends: Collection[str] | None = None,
    model: Collection[str] | None = None,
) -> Measurement: ...


@overload
def read_entry(
    raw: bytes | str | Mapping[str, Any],
    kind: Literal["search"],
    *,
    nodes: Sequence[str] | None = None,
    backends: Collection[str] | None = None,
    model: Collection[str] | None = None,
) -> SearchEntry: ...


def read_entry(
    raw: bytes | str | Mapping[str, Any],
    kind: Literal["measurement", "search"] = "measurement",
    *,
    nodes: Sequence[str] | None = None,
    backends: Collection[str] | None = None,
    model: Collection[str] | None = None,
) -> Measurement | SearchEntry:
    """A cache entry (its JSON text, or the object it parses to) checked field by field
    against what byoc writes (``_MEASUREMENT``, ``_SEARCH``), or ``BadEntry``, the only
    exception it raises. A measurement's ``nodes`` must be exactly ``nodes`` and its backend
    one of ``backends`` where given; every node it names (a measurement's, a search's
    vetoed ones) must be one of ``model`` where given: a verdict on other nodes would veto
    nodes the plan does not hold, and placement would partition again to the same plan."""
    if isinstance(raw, bytes | str):
        if len(raw) > MAX_ENTRY_BYTES:
            raise _too_large(len(raw))
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise BadEntry(f"it is not JSON ({str(exc)[:100]})") from None
    else:
        data = raw
    if not isinstance(data, Mapping):
        raise BadEntry(f"it holds {_shown(data)}, not a JSON object")
    schema = _MEASUREMENT if kind == "measurement" else _SEARCH
    unknown = [k for k in data if k not in schema]
    if unknown:
        raise BadEntry(f"it has the field {_shown(unknown[0])}, which a {kind} has not")
    required = _REQUIRED if kind == "measurement" else set(_SEARCH)
    missing = sorted(required - set(data))
    if missing:
        raise BadEntry(f"it has no {missing[0]!r}")
    fields = {k: schema[k](v, k) for k, v in data.items()}
    named = list(fields["nodes"]) if kind == "measurement" else list(fields["vetoes"] or {})
    if model is not None:
        stranger = next((n for n in named if n not in model), None)
        if stranger is not None:
            raise BadEntry(f"it names the node {_shown(stranger)}, which the model has not")
    if kind == "search":
        return SearchEntry(**fields)
    m = Measurement(**fields)
    if nodes is not None and m.nodes != list(nodes):
        raise BadEntry(
            f"its nodes {_shown(m.nodes)} are not the {len(nodes)} node(s) {_shown(list(nodes))} "
            "it is read for"
        )
    if backends is not None and m.backend not in backends:
        raise BadEntry(f"its backend {_shown(m.backend)} is not {' or '.join(backends)}")
    return m


def _too_large(size: int) -> BadEntry:
    return BadEntry(f"it holds {size} bytes, more than MAX_ENTRY_BYTES ({MAX_ENTRY_BYTES})")


def _shown(value: Any) -> str:
    """A value as a warning shows it: its repr, cut short."""
    return reprlib.repr(value)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise BadEntry(f"{name} is {_shown(value)}, not a string")
    return value


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadEntry(f"{name} is {_shown(value)}, not true or false")
    return value


def _number(value: Any, name: str, most: float = math.inf) -> float:
    """A finite number from 0 to ``most``."""
    try:
        x = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else -1
    except OverflowError:  # an integer of hundreds of digits
        x = math.inf
    if not (math.isfinite(x) and 0 <= x <= most):
        span = f"from 0 to {most:.10g}" if math.isfinite(most) else ">= 0"
        raise BadEntry(f"{name} is {_shown(value)}, not a finite number {span}")
    return x


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31:
        raise BadEntry(f"{name} is {_shown(value)}, not a count")
    return value


def _moment(value: Any, name: str) -> float:
    """A ``time.time()`` no later than tomorrow (a later one would never grow old)."""
    return _number(value, name, most=time.time() + 86400)


def _names(value: Any, name: str) -> list[str]:
    """A list of distinct strings: node names."""
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise BadEntry(f"{name} is {_shown(value)}, not a list of node names")
    if len(set(value)) != len(value):
        raise BadEntry(f"{name} names a node twice")
    return value


def _interval(value: Any, name: str) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise BadEntry(f"{name} is {_shown(value)}, not null or [low, high]")
    lo, hi = (_number(v, name) for v in value)
    if lo > hi:
        raise BadEntry(f"{name} is {_shown(value)}: its low end is above its high end")
    return lo, hi


def _optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    return lambda value, name: None if value is None else check(value, name)


def _vetoes(value: Any, name: str) -> dict[str, dict[str, str]] | None:
    """null, or ``{node: {backend: reason}}``."""
    if value is None:
        return None
    ok = isinstance(value, dict) and all(
        isinstance(node, str)
        and isinstance(by, dict)
        and all(isinstance(b, str) and isinstance(r, str) for b, r in by.items())
        for node, by in value.items()
    )
    if not ok:
        raise BadEntry(f"{name} is {_shown(value)}, not null or {{node: {{backend: reason}}}}")
    return {node: dict(by) for node, by in value.items()}


def _keys(value: Any, name: str) -> list[str]:
    """Cache keys (file names byoc made, never a path)."""
    if not isinstance(value, list) or not all(
        isinstance(k, str) and _KEY.fullmatch(k) for k in value
    ):
        raise BadEntry(f"{name} is {_shown(value)}, not a list of cache keys")
    return value


# Every field of a Measurement as the cache holds it (not ``cached``: how it was read), and of
# a search's entry, with what checks it: a field added to Measurement must be added here
# (tests/test_placement_cache.py says so).
_MEASUREMENT: dict[str, Callable[[Any, str], Any]] = {
    "partition": _text,
    "backend": _text,
    "nodes": _names,
    "backend_ms": _number,
    "onnxruntime_ms": _number,
    "kept": _flag,
    "call_ms": _number,
    "interval": _interval,
    "samples": _count,
    "clear": _flag,
    "measured_at": _moment,
    "failure": _optional(_text),
    "margin": functools.partial(_number, most=1.0),
    "precision": _text,
    "precision_note": _text,
    "others": _optional(_number),
    "disturbed": _flag,
}
_REQUIRED = {f.name for f in dataclasses.fields(Measurement) if f.default is dataclasses.MISSING}
_SEARCH: dict[str, Callable[[Any, str], Any]] = {
    "vetoes": _vetoes,
    "candidates": _keys,
    "measured_at": _moment,
}


class MeasurementCache:
    """Measurements on disk, one small JSON file per key, written atomically. An entry is
    read only from a regular file (no symlink, device or FIFO) of at most MAX_ENTRY_BYTES,
    and only as ``read_entry`` passes it; any other reads as missing, with one line saying
    why, and the next measurement under its key replaces it."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_root()

    def get(
        self,
        key: str,
        *,
        nodes: Sequence[str] | None = None,
        backends: Collection[str] | None = None,
        model: Collection[str] | None = None,
    ) -> Measurement | None:
        """The measurement under ``key`` (``read_entry``'s checks), or None."""
        try:
            raw = self.read(key)
            m = (
                None
                if raw is None
                else read_entry(raw, nodes=nodes, backends=backends, model=model)
            )
        except BadEntry as exc:
            self._ignored(key, exc)
            return None
        if m is not None:
            m.cached = True
        return m

    def get_search(self, key: str, *, model: Collection[str] | None = None) -> SearchEntry | None:
        """The search's outcome under ``key`` (``read_entry``'s checks), or None."""
        try:
            raw = self.read(key)
            return None if raw is None else read_entry(raw, "search", model=model)
        except BadEntry as exc:
            self._ignored(key, exc)
            return None

    def read(self, key: str) -> bytes | None:
        """The bytes stored under ``key``; None when there are none; ``BadEntry`` when they
        are not a regular file of at most MAX_ENTRY_BYTES (a symlink to /dev/zero would be
        read for ever, a FIFO would wait for a writer)."""
        if not _KEY.fullmatch(key):
            raise BadEntry(f"{key!r} is not a cache key")
        path = self.root / f"{key}.json"
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):  # not even opened
                raise BadEntry("it is not a regular file (a symlink, a device or a FIFO?)")
            fd = os.open(path, flags)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BadEntry(f"it cannot be read ({exc.strerror})") from None
        try:
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):  # swapped since lstat
                    raise BadEntry("it is not a regular file")
                if st.st_size > MAX_ENTRY_BYTES:
                    raise _too_large(st.st_size)
                return fh.read(MAX_ENTRY_BYTES + 1)  # read_entry refuses more (it grew)
        except OSError as exc:
            raise BadEntry(f"it cannot be read ({exc.strerror})") from None

    def _ignored(self, key: str, why: BadEntry) -> None:
        warnings.warn(
            f"measurement cache: {self.root / key}.json is ignored: {why}; measuring again "
            "(the next measurement replaces it)",
            stacklevel=4,
        )

    def put(self, key: str, m: Measurement) -> None:
        self.put_json(key, {k: v for k, v in vars(m).items() if k != "cached"})

    def put_json(self, key: str, data: Any) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
            os.replace(tmp, self.root / f"{key}.json")
        except OSError as exc:  # a read-only cache costs time, never the compile
            warnings.warn(f"cannot write the measurement cache in {self.root}: {exc}", stacklevel=2)


def cache_root() -> Path:
    """Where measurements are kept: ``placement/`` in byoc's user cache dir."""
    return host.cache_root() / "placement"
