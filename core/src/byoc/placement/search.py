"""The search ([compile] search, measured placement, several backends): each backend
partitions the whole graph alone (its own pieces' timing losses do not veto it there), its
winning partitions join the plan's as candidates, the candidates that save the most are taken
greedily without overlap, and if they beat the plan by the margin the other candidates' nodes
are vetoed for their backends. The search never replaces the plan: it returns the vetoes
(``Found``), and the compiler partitions again. Its outcome is cached with the model and the
settings, so a second compile applies it without searching."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from byoc.errors import BackendError, ByocError
from byoc.executor import build
from byoc.pipeline import partition
from byoc.placement import check, rules, timing
from byoc.placement.cache import CACHE_VERSION, host_id
from byoc.placement.check import Made
from byoc.placement.ledger import REPORT, Ledger, Trial, Unrunnable, Vetoes, quiet, warn
from byoc.placement.timing import Timing
from byoc.plan import FALLBACK, Measurement, Partition, Plan
from byoc.progress import ProgressFn

SEARCH_RULES = 3  # how the search decides (3: shared bases, near ties end to end)


@dataclass(frozen=True)
class Found:
    """What a search found: ``vetoes`` to partition the model with (None: the plan stays);
    the verdicts and options of the candidates it checked, and the verdicts it timed again,
    by cache key; and the cached candidates a search read from the cache shows in explain."""

    vetoes: Vetoes | None
    verdicts: dict[str, Measurement] = field(default_factory=dict)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    shown: dict[str, Measurement] = field(default_factory=dict)


def lost_search(
    winner: Measurement | None, m: Measurement | None = None, work: Callable[[list[str]], int] = len
) -> str:
    """Why the search took a node from a backend (from its candidate ``m``, if it had one).
    The winner is named by its backend and size (``work``: how many of its nodes compute),
    not by the name it was measured under: the plan cut after the search names its units
    afresh. ``m`` lost the node, so no unit of that plan is ``m``: its name stays its own."""
    mine = f"; {m.partition} saves {rules.saved_ms(m):.3g} ms on {m.backend}" if m else ""
    if winner is None:
        return f"search: onnxruntime runs it{mine}, less than a candidate it overlaps"
    region = f"{winner.backend}'s partition of {work(winner.nodes)} node(s)"
    return f"search: {region} saves {rules.saved_ms(winner):.3g} ms{mine}"


class Search:
    """One search from the settled ``plan``: ``verdicts`` (by cache key) of every partition
    checked so far, the ``vetoes`` it was partitioned with, and ``slower``: node -> the
    backends a partition of it lost on by its timing. It reads them and returns ``Found``."""

    def __init__(
        self,
        ledger: Ledger,
        plan: Plan,
        verdicts: Mapping[str, Measurement],
        vetoes: Vetoes,
        slower: Mapping[str, set[str]],
        feeds: dict[str, Any],
        progress: ProgressFn | None,
    ) -> None:
        self.ledger, self.plan, self.feeds, self.progress = ledger, plan, feeds, progress
        self.before, self.vetoes, self.slower = verdicts, vetoes, slower
        self.verdicts = dict(verdicts)  # and the candidates' (this search's own)
        self.options: dict[str, dict[str, Any]] = {}  # key -> a candidate's options
        self.fallback = ledger.quiet_fallback(plan)

    def run(self) -> Found:
        """The search, or the plan as it stays where there are not two backends, the search is
        off, or it cannot finish (the machine runs low on memory while it runs the
        candidates' plans, or onnxruntime cannot load a segment of one: byoc's bug): then the
        plan settled before it stays, every partition of it checked, and one line says so."""
        cfg = self.ledger.cfg
        if not cfg.compile["search"] or len(self.ledger.tables) < 2:
            return Found(None)
        key = self.key()
        known = self.cached(key)
        if known is not None:
            return known
        unproven = self.ledger.unproven
        try:
            vetoes, stopped = self.anew()
        except Unrunnable as exc:
            report = exc.advice if exc.advice is REPORT else ""
            warn(
                f"measured placement: the search for faster partitions stopped ({exc}{report}); "
                "the plan checked before it stays"
            )
            return self._found(None)
        if not stopped and self.ledger.unproven == unproven:
            entry = {
                "vetoes": vetoes,
                "candidates": sorted(set(self.verdicts) - set(self.before)),
                "measured_at": time.time(),
            }
            self.ledger.cache.put_json(key, entry)
        return self._found(vetoes)

    def _found(self, vetoes: Vetoes | None) -> Found:
        """What this search adds to the verdicts it was given, and its vetoes."""
        new = {k: m for k, m in self.verdicts.items() if self.before.get(k) is not m}
        return Found(vetoes, new, dict(self.options))

    def key(self) -> str:
        """What a search's outcome depends on: the model, every backend (version, build,
        settings), the fallback, the host, the decision's settings and the vetoes so far."""
        reg, cfg = self.ledger.reg, self.ledger.cfg
        backends = {
            name: [reg.backends[name].version, reg.backends[name].build(), table]
            for name, table in self.ledger.tables.items()
        }
        c = cfg.compile
        head = {
            "cache": CACHE_VERSION,
            "rules": SEARCH_RULES,
            "search": backends,
            "fallback": quiet(cfg.fallback),
            "host": host_id(),
            "decide": [c["margin"], c["precision"], c["precision_tolerance"]],
            # which backends may not take which nodes, and which of those are timing losses
            # (not the reasons: a cached verdict's reads "(cached)", a fresh one's not)
            "vetoes": {node: sorted(by) for node, by in self.vetoes.items()},
            "slower": {node: sorted(by) for node, by in self.slower.items()},
        }
        digest = hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode())
        digest.update(self.ledger.source.SerializeToString(deterministic=True))
        return f"search-{digest.hexdigest()}"

    def cached(self, key: str) -> Found | None:
        """A search done before on the same model and settings: its vetoes (None: the plan
        stayed), its candidates' cached timings for ``explain``; None to search (none cached,
        [compile] remeasure, or older than remeasure_after days). Each partition of the plan
        it leads to is still checked and run once, as every cached verdict is."""
        cfg = self.ledger.cfg
        if cfg.compile["remeasure"]:
            return None
        entry = self.ledger.cache.get_search(key, model=self.ledger.read.decisions)
        if entry is None:
            return None
        if (time.time() - entry.measured_at) / 86400 >= cfg.compile["remeasure_after"]:
            return None
        shown = {}
        for candidate in entry.candidates:
            m = self.ledger.cached(candidate, None, self.ledger.tables)
            if m is not None:  # named as a candidate (``placer.named``)
                shown[candidate] = replace(m, partition=f"search/{m.partition.rpartition('/')[2]}")
        return Found(entry.vetoes, shown=shown)

    def unbeaten(self, backend: str) -> Vetoes:
        """The vetoes for ``backend``'s search candidates: all but its partitions' timing
        losses, since a piece that lost alone says nothing of the larger region around it (a
        backend's fragments between another's can lose where its whole region wins)."""
        lost = {node for node, by in self.slower.items() if backend in by}
        return {
            node: {b: r for b, r in by.items() if b != backend or node not in lost}
            for node, by in self.vetoes.items()
        }

    def anew(self) -> tuple[Vetoes | None, bool]:
        """The search itself: the vetoes of the plan it chose (None: the priority plan
        stays), and whether it stopped early ([compile] search_seconds)."""
        ledger = self.ledger
        current = [self.verdicts[ledger.key(u)] for u in self.plan.partitions]
        candidates = {id(m): m for m in current}
        made = {id(self.verdicts[ledger.key(u)]): (u, ledger.key(u)) for u in self.plan.partitions}
        trial_of: dict[str, Trial] = {}
        stopped = self._gather(candidates, made, trial_of)
        chosen: list[Measurement] = []
        taken: set[str] = set()
        on = rules.bases(list(candidates.values()))
        ranked = sorted(
            candidates.values(), key=lambda m: rules.saved_ms(m, on[id(m)]), reverse=True
        )
        for m in self._challengers_first(ranked, current, on):
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
            return all(rules.clearly_better(a, b, x) for x in ({}, on))

        def gains(a: list[Measurement], b: list[Measurement]) -> bool:
            return all(rules.gains(a, b, current, x, ledger.margin) for x in ({}, on))

        if not ins or better(outs, ins):
            return None, stopped
        vetoes = {node: dict(by) for node, by in self.vetoes.items()}
        work = ledger.read.work
        for m in candidates.values():
            for node in m.nodes:
                winner = owner.get(node)
                if winner is None or winner.backend != m.backend:
                    vetoes.setdefault(node, {})[m.backend] = lost_search(winner, m, work)
        for node, winner in owner.items():  # a chosen region is its backend's alone
            vetoes.get(node, {}).pop(winner.backend, None)  # a smaller piece's loss
            for name in ledger.tables:
                if name != winner.backend:
                    vetoes.setdefault(node, {}).setdefault(name, lost_search(winner, None, work))
        if not (gains(ins, outs) and better(ins, outs)):
            again = self._sharpen(ins + outs, made, {**ledger.trials, **trial_of})
            ins, outs, current = ([again.get(id(m), m) for m in ms] for ms in (ins, outs, current))
            candidates = {id(m): m for m in (again.get(id(c), c) for c in candidates.values())}
            on = rules.bases(list(candidates.values()))
            if better(outs, ins):
                return None, stopped
            clear = gains(ins, outs) and better(ins, outs)
            if not clear and not self._faster_whole(vetoes):
                return None, stopped  # a near tie, end to end too: the priority plan stays
        return vetoes, stopped

    def _gather(
        self,
        candidates: dict[int, Measurement],
        made: dict[int, tuple[Partition, str]],
        trial_of: dict[str, Trial],
    ) -> bool:
        """Every backend's own plan of the model, its partitions checked (those not checked
        yet) and its kept ones added to ``candidates`` (with the unit and key that ``made``
        each, and its trial); whether it stopped at [compile] search_seconds."""
        ledger = self.ledger
        deadline = time.perf_counter() + ledger.cfg.compile["search_seconds"]
        for name in ledger.tables:
            plan = partition(ledger.read, ledger.ctx.alone(name), vetoes=self.unbeaten(name))
            if not plan.partitions:
                continue
            trials = ledger.reference(self.feeds, plan, self.fallback)
            for i, unit in enumerate(plan.partitions, start=1):
                key = ledger.key(unit)
                if key not in self.verdicts and time.perf_counter() > deadline:
                    seconds = ledger.cfg.compile["search_seconds"]
                    warn(
                        f"measured placement: the search stopped after [compile] search_seconds"
                        f" = {seconds:g}; candidates not yet timed were left out (a compile "
                        "with the cache filled times fewer)"
                    )
                    return True
                if key not in self.verdicts:
                    label = f"search/{unit.name}"  # ``placer.named``
                    if self.progress is not None:
                        self.progress(i, len(plan.partitions), f"searching: {label}")
                    try:
                        checked = check.verdict(ledger, unit, key, trials[unit.name], self.fallback)
                    except ByocError:  # a candidate only: its failure costs nothing
                        continue
                    self.verdicts[key] = replace(checked.verdict, partition=label)
                    self.options[key] = checked.options
                    if checked.verdict.kept and checked.made is not None:
                        ledger.built[key] = checked.made
                m = self.verdicts[key]
                if not m.kept:  # nothing builds or times it: its weights go now
                    ledger.built.pop(key, None)
                    trials.pop(unit.name, None)
                else:
                    candidates[id(m)] = m
                    made.setdefault(id(m), (unit, key))
                    trial_of[key] = trials[unit.name]
        return False

    def _challengers_first(
        self, ranked: list[Measurement], current: list[Measurement], on: dict[int, float]
    ) -> list[Measurement]:
        """``ranked`` with each partition of the plan preceded by a candidate of another
        backend for nearly its region that it does not clearly beat (on the savings as timed
        and on the shared bases): that near tie then goes to the end-to-end check, which keeps
        the plan unless the candidate's is faster by the margin, rather than staying with
        whichever ranked first."""
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
                    and rules.near(a, b)
                    and not all(rules.clearly_better([a], [b], x) for x in ({}, on))
                ),
                None,
            )
            if rival is not None and at(rival) > at(a):
                order.insert(at(a), order.pop(at(rival)))
        return order

    def _faster_whole(self, vetoes: Vetoes) -> bool:
        """A near tie between partitions, decided end to end: the search's plan and the
        priority plan, both built (with what was compiled already) and timed against each other
        in alternating blocks as the whole-model check; the search's must be faster by the
        margin. Partition savings each rest on an onnxruntime time of their own region, timed
        apart: a near tie between them can flip from compile to compile where end to end one
        plan is clearly the faster."""
        ledger, feeds = self.ledger, self.feeds

        def reuse(unit: Partition) -> Made | None:
            return ledger.built.get(ledger.key(unit)) if unit.backend != FALLBACK else None

        plans = (partition(ledger.read, ledger.ctx, vetoes=vetoes), self.plan)
        try:
            theirs, ours = (build(plan, ledger.ctx, reuse=reuse) for plan in plans)
            once = time.perf_counter()
            theirs.run(feeds), ours.run(feeds)
            once = (time.perf_counter() - once) / 2
        except ByocError:  # the whole-model check and the next rounds say what failed
            return False
        if self.progress is not None:
            self.progress(1, 1, "searching: the two plans end to end")
        margin = ledger.margin

        def alone() -> Timing:  # both built again on one thread (Ledger.undisturbed)
            backends = {p.backend for plan in plans for p in plan.partitions}
            if not all(ledger.threaded(b) for b in backends):  # as whole._alone
                raise BackendError("a backend of the plans runs no threads of its own")
            one = ledger.one_thread_context()
            mine, other = (build(plan, one) for plan in plans)
            return timing.time_pair(
                lambda _: mine.run(feeds),
                lambda _: other.run(feeds),
                [],
                lambda a, b: 1 - rules.margin_of("cpu", margin),
                budget=timing.whole_budget(once),
                on_one_thread=True,
            )

        timed = ledger.undisturbed(
            lambda: timing.time_blocks(
                lambda _: theirs.run(feeds),
                lambda _: ours.run(feeds),
                [],
                lambda a, b: 1 - margin,
                budget=timing.whole_budget(once),
            ),
            alone,
        )
        return not timing.busy(timed) and timed.interval[1] < 1 - rules.margin_of(
            timed.clock, margin
        )

    def _sharpen(
        self,
        ms: list[Measurement],
        made: dict[int, tuple[Partition, str]],
        trials: dict[str, Trial],
    ) -> dict[int, Measurement]:
        """These partitions timed again, longer (60 pairs, up to 4 s each), so that their
        intervals narrow: a near tie on the first timings is decided by more samples, not by
        the first ones' noise.
        Returns the new verdicts by the ``id`` of the ones they replace (a disturbed timing is
        no evidence: the first stands), each cached and in this search's verdicts."""
        again: dict[int, Measurement] = {}
        for m in ms:
            unit, key = made.get(id(m), (None, ""))
            runtime, trial = self.ledger.built.get(key), trials.get(key)
            reduced = m.precision not in ("fp32", "int8")  # timed under another key
            if unit is None or runtime is None or trial is None or reduced:
                continue
            timed = self.ledger.time_unit(
                unit, runtime[1], trial, self.fallback, budget=4.0, pairs=60
            )
            if timed.disturbed:
                continue
            sharp = replace(
                m,
                backend_ms=timed.backend_ms,
                onnxruntime_ms=timed.onnxruntime_ms,
                call_ms=timed.call_ms,
                interval=timed.interval,
                samples=timed.samples,
                measured_at=timed.measured_at,
                cached=False,
                kept=timed.kept,
            )
            self.ledger.cache.put(key, replace(sharp, partition=unit.name))
            self.verdicts[key] = again[id(m)] = sharp
        return again

    def _contest(
        self,
        m: Measurement,
        current: list[Measurement],
        made: dict[int, tuple[Partition, str]],
        trial_of: dict[str, Trial],
    ) -> Measurement:
        """``m``, or the partition of the plan it would replace: a candidate for the same
        region (same nodes and inputs) on another backend is timed head to head against it,
        in turn on the same inputs, and replaces it only if clearly faster by the margin (a
        near tie keeps the priority plan, on every compile)."""
        rival = next((c for c in current if c is not m and set(c.nodes) == set(m.nodes)), None)
        if rival is None or id(m) not in made or id(rival) not in made:
            return m
        (unit, key), (other, other_key) = made[id(m)], made[id(rival)]
        mine, theirs = self.ledger.built.get(key), self.ledger.built.get(other_key)
        if unit.inputs != other.inputs or mine is None or theirs is None or key not in trial_of:
            return m
        margin = self.ledger.margin
        args = list(trial_of[key].args)
        timed = self.ledger.undisturbed(
            lambda: timing.time_pair(mine[1].run, theirs[1].run, args, lambda a, b: 1 - margin)
        )
        return m if not timing.busy(timed) and timed.interval[1] < 1 - margin else rival
