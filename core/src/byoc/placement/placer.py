"""The placer: one compile's placement, in the order its steps run. It never partitions:
where the plan must change it answers ``Repartition`` (every veto, and what to do with the
plan cut with them), and ``byoc.compiler``, which owns the only loop that partitions again,
hands it the next plan. Its steps are modules that read the ledger and return values: the
check (``check.verdict``), the search (``search.Search``), the whole-model check
(``whole``), and the rules they apply (``rules``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from byoc import host
from byoc.compiled import CompiledModel
from byoc.context import Context
from byoc.errors import InputError
from byoc.placement import check, rules, whole
from byoc.placement.ledger import (
    GIVE_INPUTS,
    REPORT,
    STATIC_ADVICE,
    Ledger,
    Unrunnable,
    Unsettled,
    Vetoes,
    warn,
)
from byoc.placement.search import Search
from byoc.plan import FALLBACK, Measurement, Partition, Placement, Plan
from byoc.progress import ProgressFn


@dataclass(frozen=True)
class Repartition:
    """Placement's answer where the plan must change: partition the model again with
    ``vetoes`` (every veto, not only new ones), and give the plan to ``then``, which answers
    again (a plan to build, or another ``Repartition``)."""

    vetoes: Vetoes
    then: Callable[[Plan], Plan | Repartition]


@dataclass(frozen=True)
class Verified:
    """The whole-model check of a built plan: the ``placement`` the built model's plan shows
    (with the check's verdict), and ``then``: None to keep the model, else the next plan."""

    placement: Placement | None
    then: Repartition | None = None


class Placer:
    """One compile's placement: ``decide`` answers for a plan (rounds of check, veto and
    partition; measured, the search), ``reuse`` gives the build what deciding made, and
    ``verify`` checks the built model. ``first``: the plan as first partitioned."""

    def __init__(self, first: Plan, ctx: Context, progress: ProgressFn | None) -> None:
        self.ledger = ledger = Ledger(first, ctx)
        self.cfg = cfg = ctx.config
        self.progress = progress
        self.mode = "measured" if ledger.measured else "static"
        self.plan = first
        self.vetoes: Vetoes = {}  # what the current plan was partitioned with
        self.slower: dict[str, set[str]] = {}  # node -> backends a partition of it lost on
        self.verdicts: dict[str, Measurement] = {}  # by key: each partition once, first verdict
        self.options: dict[str, dict[str, Any]] = {}  # by key: the options it runs with
        self.narrow: dict[str, tuple[str, ...]] = {}  # by key: a failure that vetoes these alone
        self.shown: dict[str, Measurement] = {}  # a cached search's candidates, for explain
        self.feeds: dict[str, Any] | None = None  # the measurement inputs, once decided
        self._feeds: dict[str, Any] = {}
        self._given = False  # the user gave the inputs
        self.rounds = 0  # of checking, since the first plan or the search's
        self.plans_checked = 0  # every plan checked: names its verdicts (``named``)
        self.searched = False
        self.second_chance_taken = False  # verify tried one backend's whole region
        if cfg.compile["precision"] != "fp32" and not host.cpu().has_bf16():
            warn(
                f'[compile] precision = "{cfg.compile["precision"]}": this CPU has neither '
                "AVX512_BF16 nor AMX; every partition computes in fp32"
            )

    def decide(
        self, plan: Plan, vetoes: Vetoes, inputs: Mapping[str, Any] | None
    ) -> Plan | Repartition:
        """The plan to build, or the vetoes to partition again with first: every backend
        partition checked (and, measured, timed and searched), with ``plan.placement`` saying
        how each was decided. ``vetoes``: what ``plan`` was partitioned with."""
        self.plan, self.vetoes = plan, vetoes
        if not plan.partitions:
            return self._placed(plan, Placement(self.mode))
        short = self.ledger.short_of_memory()
        if short is not None:
            return self._unchecked(short, STATIC_ADVICE)
        self.ledger.watch_memory()
        try:
            self._feeds = self.ledger.model_inputs(plan, inputs)
        except InputError as exc:
            if inputs is not None:
                raise
            return self._unchecked(f"no inputs to run the partitions on ({exc})")
        self._given = inputs is not None
        return self._round(plan)

    def reuse(self, unit: Partition) -> tuple[Any, Any] | None:
        """The artifact and runtime made while deciding, for ``build`` (each taken once)."""
        if unit.backend == FALLBACK:
            return None
        return self.ledger.built.pop(self.ledger.key(unit), None)

    def verify(self, compiled: CompiledModel) -> Verified:
        """Measured placement's last word on the built model: keep it, or the next plan to
        build and verify: once, one backend's whole region (``whole.second_chance``), else
        the plan that runs the model as plain onnxruntime (it failed, or does not beat
        onnxruntime; it has no partitions, so its check keeps it). The placement of a kept
        model names its verdicts (``named``)."""
        verified = self._verify(compiled)
        if verified.then is not None or verified.placement is None:
            return verified
        return Verified(named(verified.placement, self.plan, self.verdicts, self.ledger.key))

    def _verify(self, compiled: CompiledModel) -> Verified:
        self.ledger.built.clear()  # what deciding made and the build did not take
        placement = self.plan.placement
        if not self.ledger.measured or self.feeds is None or not self.plan.partitions:
            return Verified(placement)
        assert placement is not None
        checked = whole.measure(
            self.ledger, self.plan, compiled, self.feeds, self.verdicts, self.progress
        )
        placement = dataclasses.replace(placement, whole=checked)
        unexplained = None
        if checked.kept:
            parts = [self.verdicts.get(self.ledger.key(u)) for u in self.plan.partitions]
            unexplained = rules.unexplained(checked, parts, self.ledger.margin)
            if unexplained is None:
                return Verified(placement)
        fallback = self.cfg.compile["whole_model_fallback"]
        if not checked.kept and not checked.disturbed and fallback:
            second = self._second_chance(placement)
            if second is not None:
                return Verified(placement, second)
        slower = whole.lost(checked, unexplained, fallback)
        if slower is None:
            return Verified(placement)
        placement = dataclasses.replace(placement, whole=dataclasses.replace(checked, kept=False))
        reason = f"the whole model runs on onnxruntime: {slower}"
        return Verified(placement, self._on_onnxruntime(reason, placement))

    # -- rounds -------------------------------------------------------------------------------

    def _round(self, plan: Plan) -> Plan | Repartition:
        """One round of checking ``plan``: its answer, or the plan as the user's inputs or
        the machine allow (``Unrunnable``), or on onnxruntime where rounds cannot settle."""
        self.plan = plan
        try:
            return self._check(plan)
        except Unrunnable as exc:  # the model fails on these inputs, or a segment on load
            given = self._given and exc.advice is GIVE_INPUTS  # the user's: say no more
            return self._unchecked(str(exc), "" if given else exc.advice)
        except Unsettled as exc:  # in either mode: what kept nothing it checked keeps nothing
            note = f"every partition runs on onnxruntime: {exc}"
            warn(f"placement: {note}{REPORT}")
            return self._on_onnxruntime(
                f"returned to onnxruntime: {exc}", Placement(self.mode, note=note)
            )

    def _check(self, plan: Plan) -> Plan | Repartition:
        """Try (and time) every partition of ``plan`` not checked yet; veto, for its backend,
        the nodes of every partition that lost (of one that quantized with its backend's own
        arithmetic and failed: its quantizers alone, ``Checked.vetoes``). Each round vetoes a
        backend on nodes it claimed, so there are at most as many rounds as nodes times
        backends. A round that vetoes nothing new of the model's nodes cannot change the plan,
        and would repeat for ever: that (a bug, or a verdict about other nodes, which
        ``read_entry`` keeps out of the cache) ends placement with ``Unsettled``, as does
        reaching the bound."""
        ledger = self.ledger
        bound = len(ledger.read.decisions) * max(1, len(ledger.tables)) + 1
        if self.rounds == bound:
            raise Unsettled(f"the plan did not settle in {bound} rounds of partitioning")
        self.rounds += 1
        if not plan.partitions:
            return self._settled()
        self.plans_checked += 1
        fallback = ledger.quiet_fallback(plan)
        trials = ledger.reference(self._feeds, plan, fallback)
        round_: list[tuple[str, Measurement]] = []
        for i, unit in enumerate(plan.partitions, start=1):
            key = ledger.key(unit)
            ledger.trials[key] = trials[unit.name]
            if key not in self.verdicts:
                label = f"round{self.plans_checked}/{unit.name}"  # ``named``
                if self.progress is not None and ledger.measured:
                    self.progress(i, len(plan.partitions), f"measuring {label}")
                checked = check.verdict(ledger, unit, key, trials[unit.name], fallback)
                self.verdicts[key] = dataclasses.replace(checked.verdict, partition=label)
                self.options[key] = checked.options
                if checked.vetoes is not None:
                    self.narrow[key] = checked.vetoes
                if checked.made is not None:
                    ledger.built[key] = checked.made
                ledger.enough_memory(f"checking {label}")
            round_.append((key, self.verdicts[key]))
            if not self.verdicts[key].kept:  # nothing builds or times it: its weights go now
                ledger.built.pop(key, None)
                ledger.trials.pop(key, None)
        losers = [(key, m) for key, m in round_ if not m.kept]
        if not losers:
            return self._settled()
        vetoes = {node: dict(by) for node, by in self.vetoes.items()}
        for key, m in losers:
            for node in self.narrow.get(key, m.nodes):
                if node not in ledger.read.decisions:  # a verdict about other nodes: a bug
                    continue
                vetoes.setdefault(node, {})[m.backend] = m.summary()
                if m.failure is None:
                    self.slower.setdefault(node, set()).add(m.backend)
        if sum(map(len, vetoes.values())) == sum(map(len, self.vetoes.values())):
            first = losers[0][1]
            raise Unsettled(
                f"{first.partition} ({first.backend}) lost on nodes its backend "
                "may not claim already, so partitioning again cannot change the plan"
            )
        return self._again(vetoes, self._round)

    def _settled(self) -> Plan | Repartition:
        """Every partition of the plan is kept: measured, search once (its vetoes start the
        rounds again), then place."""
        if self.ledger.measured and not self.searched:
            self.searched = True
            found = Search(
                self.ledger,
                self.plan,
                self.verdicts,
                self.vetoes,
                self.slower,
                self._feeds,
                self.progress,
            ).run()
            self.verdicts.update(found.verdicts)
            self.options.update(found.options)
            self.shown = found.shown
            if found.vetoes is not None:
                self.rounds = 0
                return self._again(found.vetoes, self._round)
        for key, m in self.shown.items():  # a cached search's candidates, for explain
            self.verdicts.setdefault(key, m)
        tried = list(self.verdicts.values())
        failed = [m for m in tried if m.failure is not None]
        if failed:
            warn(
                f"{len(failed)} partition(s) returned to onnxruntime at compile; first: "
                f"{failed[0].partition} ({failed[0].backend}) {failed[0].failure}"
            )
        self.feeds = self._feeds
        busy = [m for m in tried if m.disturbed]
        if busy:
            warn(
                f"measured placement: other processes took up to "
                f"{max(m.others or 0 for m in busy):.0%} of the CPUs while {len(busy)} "
                "partition(s) were timed; those run on onnxruntime and their timings are not "
                "cached (compile again on a quieter machine)"
            )
        alone = [m for m in tried if m.clock == "cpu" and not m.cached]
        if alone:
            warn(
                f"measured placement: other processes took up to "
                f"{max(m.others or 0 for m in alone):.0%} of the CPUs, so {len(alone)} "
                "partition(s) were timed on one thread in CPU time (a backend whose kernels "
                "split better across threads than onnxruntime's wins by less there)"
            )
        noted = [m for m in tried if m.failure is None and m.precision_note]
        shown = tried if self.ledger.measured else failed + noted
        return self._placed(self.plan, Placement(self.mode, shown))

    # -- answers ------------------------------------------------------------------------------

    def _again(self, vetoes: Vetoes, then: Callable[[Plan], Plan | Repartition]) -> Repartition:
        """Ask for the plan partitioned with ``vetoes`` (the next plan's, from now on)."""
        self.vetoes = vetoes
        return Repartition(vetoes, then)

    def _second_chance(self, placement: Placement) -> Repartition | None:
        """Once per compile, ``whole.second_chance``: the plan of one backend's whole region."""
        if self.second_chance_taken:
            return None
        self.second_chance_taken = True
        assert placement.whole is not None
        vetoes = whole.second_chance(
            self.plan, self.verdicts, placement.whole, self.ledger.tables, self.vetoes
        )
        if vetoes is None:
            return None
        return self._again(vetoes, lambda plan: self._placed(plan, placement))

    def _unchecked(self, why: str, advice: str = GIVE_INPUTS) -> Plan | Repartition:
        """Nothing could be run: with measured placement every partition goes back to
        onnxruntime (the path that cannot be wrong or slow); static placement keeps them."""
        if not self.ledger.measured:  # the user's choice: a note in explain, no warning
            note = f"partitions kept unchecked: {why}"
            return self._placed(self.plan, Placement("static", note=note))
        note = f"every partition runs on onnxruntime: {why}"
        warn(f"measured placement: {note}{advice}")
        return self._on_onnxruntime(
            f"returned to onnxruntime: {why}", Placement("measured", note=note)
        )

    def _on_onnxruntime(self, reason: str, placement: Placement) -> Repartition:
        """The model as plain onnxruntime: every claimed node vetoed for every backend."""
        vetoes = {node: dict(by) for node, by in self.vetoes.items()}
        for node in self.plan.decisions:
            vetoes[node] = dict.fromkeys(self.ledger.tables, reason)
        return self._again(vetoes, lambda plan: self._placed(plan, placement))

    def _placed(self, plan: Plan, placement: Placement) -> Plan:
        """``plan`` as placement leaves it: a copy with ``placement``, each partition with the
        options (the precision) it was decided in."""
        swap: dict[int, Partition] = {}
        for unit in plan.partitions:
            key = self.ledger.key(unit)
            options = self.options.get(key)
            if options:
                swap[id(unit)] = copy = dataclasses.replace(unit, options=dict(options))
                self.ledger.alias(copy, key)
        self.plan = dataclasses.replace(
            plan,
            partitions=[swap.get(id(u), u) for u in plan.partitions],
            schedule=[swap.get(id(u), u) for u in plan.schedule],
            placement=placement,
        )
        return self.plan


def named(
    placement: Placement,
    plan: Plan,
    verdicts: Mapping[str, Measurement],
    key: Callable[[Partition], str],
) -> Placement:
    """``placement`` with each verdict named after the unit of ``plan`` it decided. Every
    plan checked names its units ``<backend>_<n>`` afresh, and so does each backend's plan in
    the search: a verdict of a partition the final plan does not hold keeps the name of where
    it was measured, ``round<k>/<name>`` (the k-th plan checked) or ``search/<name>``, so that
    no name is shown twice and none is taken for another partition's."""
    final = {key(u): u.name for u in plan.partitions}
    key_of = {id(m): k for k, m in verdicts.items()}
    measurements = []
    for m in placement.measurements:
        name = final.get(key_of.get(id(m), ""))
        measurements.append(m if name is None else dataclasses.replace(m, partition=name))
    return dataclasses.replace(placement, measurements=measurements)
