"""Measured placement: a partition that loses to onnxruntime goes back to it, with the reason."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time

import byoc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from byoc import host, placement, plugins
from byoc.cli import main
from byoc.explain import explain_text
from byoc.plan import Measurement, Partition, Placement
from byoc.testing.build import make_model, node
from onnx.reference import ReferenceEvaluator

MEASURED = {"compile": {"placement": "measured"}}
X = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)


class Runtime:
    """relu(-x), after ``sleep`` seconds; ``fake_ms`` is what the fake clock says it takes."""

    def __init__(self, sleep: float, fake_ms: float) -> None:
        self.sleep, self.fake_ms = sleep, fake_ms
        self.calls = 0
        self.lock = threading.Lock()

    def run(self, inputs):
        with self.lock:
            self.calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        return [np.maximum(-inputs[0], 0)]


class Plugin:
    """A test backend claiming Neg and Relu, registered on a fresh registry."""

    def __init__(
        self,
        name: str,
        priority: int,
        sleep: float = 0.0,
        fake_ms: float = 0.0,
        threaded: bool = True,
    ):
        self.name, self.priority = name, priority
        self.runtime = Runtime(sleep, fake_ms)
        self.native = "build 1"  # what its build() says its native part is
        self.threaded = threaded  # restates `threads`: runs threads of its own

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        threads = byoc.Option(int, 0, "threads per run", range(0, 1 << 16))
        register(
            self.name,
            priority=self.priority,
            build=lambda: self.native,
            description="placement test backend",
            options={"threads": threads} if self.threaded else {},
        )

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        return {"Neg": None, "Relu": None} if backend == self.name else None

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        return b"neg-relu" if backend == self.name else None

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        return self.runtime if backend == self.name else None

    @byoc.hookimpl
    def byoc_serialize(self, backend, artifact):
        return bytes(artifact) if backend == self.name else None

    @byoc.hookimpl
    def byoc_deserialize(self, backend, data):
        return bytes(data) if backend == self.name else None


@pytest.fixture
def install(monkeypatch, tmp_path):
    """Register test backends on a fresh registry; measurements go to a fresh cache."""
    monkeypatch.setattr(placement.cache, "cache_root", lambda: tmp_path / "placement")

    def install(*found: Plugin) -> None:
        reg = plugins.Registry(only=[])
        for p in found:
            reg._add(p, f"byoc-{p.name}-test", "0.0")
        monkeypatch.setattr(plugins, "_cache", {k: reg for k in (None, *plugins._cache)})

    return install


@pytest.fixture
def fake_clock(monkeypatch):
    """Timings by decree: a test backend takes its ``fake_ms``, onnxruntime 1 ms, and the whole
    compiled model ``clock["byoc"]`` ms against 1 ms for plain onnxruntime, the interval of its
    ratio ``clock["interval"]`` (default: the ratio itself); the search's plan against the
    priority plan, end to end, ``clock["plans"]`` (default: a tie); the share of the CPUs other
    processes took, timing by timing, ``clock["others"]`` (then none); timed on one thread (in
    CPU time), the same. Both still run."""
    clock = {"byoc": 0.5, "call": 0.0, "interval": None, "plans": (0.95, 1.05), "others": []}
    clock["now"] = None  # what other processes take of the CPUs between timings

    def others():
        return clock["others"].pop(0) if clock["others"] else None

    def time_pair(first, second, args, threshold=None, on_one_thread=False, **_):
        first(args), second(args)
        kind = "cpu" if on_one_thread else "wall"
        if not hasattr(first, "__self__") and not args:  # two plans, on one thread
            return placement.Timing(1.0, 1.0, clock["plans"], 8, others(), kind)
        if not hasattr(first, "__self__"):  # the whole model, on one thread (whole._alone)
            byoc = clock["byoc"]() if callable(clock["byoc"]) else clock["byoc"]
            return placement.Timing(byoc, 1.0, clock["interval"] or (byoc, byoc), 8, others(), kind)
        ms = first.__self__.fake_ms
        if hasattr(second.__self__, "fake_ms"):  # two backends head to head
            ratio = ms / second.__self__.fake_ms
            interval = getattr(first.__self__, "contest", (ratio, ratio))
            return placement.Timing(ms, second.__self__.fake_ms, interval, 8, others())
        ort = getattr(first.__self__, "ort_ms", 1.0)  # onnxruntime as timed beside it
        spread = getattr(first.__self__, "spread", (ms / ort, ms / ort))
        return placement.Timing(ms, ort, spread, 8, others(), kind)

    def time_blocks(first, second, args, threshold=None, **_):
        first(args), second(args)
        if not args:  # two compiled models, each running its own feeds
            return placement.Timing(1.0, 1.0, clock["plans"], 6, others())
        byoc = clock["byoc"]() if callable(clock["byoc"]) else clock["byoc"]
        interval = clock["interval"] or (byoc, byoc)
        return placement.Timing(byoc, 1.0, interval, 3, others())

    monkeypatch.setattr(placement.timing, "PAUSE", 0.0)
    monkeypatch.setattr(host, "others_since", lambda mark, window=0.25: clock["now"])
    monkeypatch.setattr(placement.timing, "time_pair", time_pair)
    monkeypatch.setattr(placement.timing, "time_blocks", time_blocks)
    monkeypatch.setattr(placement.timing, "session_call_ms", lambda config, reg=None: clock["call"])
    return clock


def unbuildable(ledger, backend, table):
    """Ledger.one_thread for a backend that cannot be built to run on one thread."""
    raise byoc.errors.BackendError(f"{backend} cannot run on one thread")


def model():
    """x -> Neg -> Relu -> Sigmoid: the test backends claim Neg and Relu."""
    return make_model(
        [node("Neg", ["x"], ["n"]), node("Relu", ["n"], ["r"]), node("Sigmoid", ["r"], ["y"])],
        {"x": [1, 4]},
        ["y"],
    )


def expected(x=X):
    return 1 / (1 + np.exp(-np.maximum(-x, 0)))


def backends_of(compiled):
    return [s.unit.backend for s in compiled.steps]


def test_a_slow_partition_goes_back_to_onnxruntime_and_explain_says_why(install):
    slow = Plugin("sleepy", 5, sleep=0.02)
    install(slow)
    compiled = byoc.compile(model(), {"backends": ["sleepy"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"]
    (m,) = compiled.plan.placement.measurements
    assert (m.backend, m.kept, m.cached) == ("sleepy", False, False)
    assert m.backend_ms >= 20 > m.onnxruntime_ms
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    text = explain_text(compiled.plan)
    assert "sleepy: returned to onnxruntime: " in text
    assert f"{m.backend_ms:.3g} ms on sleepy vs {m.onnxruntime_ms:.3g} ms on onnxruntime" in text


def test_a_segment_onnxruntime_cannot_load_sends_the_model_to_onnxruntime(
    install, fake_clock, monkeypatch
):
    """A segment byoc made that onnxruntime refuses (a bug in byoc: a weight read back wrong
    failed so) fails safe under measured placement: the model runs as read, and one line says
    why and that it is a bug to report, instead of the compile failing."""
    install(Plugin("quick", 5, fake_ms=0.5))
    made = placement.ledger.compile_unit

    def refuse_segments(reg, backend, unit, table):
        if unit.backend == "onnxruntime" and len(unit.model.graph.node) == 1:  # Sigmoid's
            raise byoc.BackendError(f"partition {unit.name}: creating the runtime failed: boom")
        return made(reg, backend, unit, table)

    monkeypatch.setattr(placement.ledger, "compile_unit", refuse_segments)
    said = r"runs on onnxruntime: onnxruntime cannot load onnxruntime_\d, .*boom \(a bug in byoc"
    with pytest.warns(UserWarning, match=said):
        compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"]
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)


def test_too_little_memory_to_measure_sends_the_model_to_onnxruntime(install, monkeypatch):
    """Measuring holds many copies of the weights at once (up to 16x): where the machine has
    less memory free than that, measured placement does not start and run out of it (the
    kernel kills the process, unsaid); one line says why and what to do. Static placement is
    the user's choice and is not held back."""
    quick = Plugin("quick", 5)
    install(quick)
    monkeypatch.setattr(host, "available_memory", lambda: 300 << 20)  # 0.3 GB free
    with pytest.warns(UserWarning, match=r"measuring needs about 0\.5 GB .*0\.3 GB is avail"):
        compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"] and quick.runtime.calls == 0
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    assert "of memory" in compiled.plan.placement.note  # explain says so too
    static = byoc.compile(model(), {"backends": ["quick"], "compile": {"placement": "static"}})
    assert backends_of(static) == ["quick", "onnxruntime"]


def test_running_low_on_memory_while_checking_sends_the_model_to_onnxruntime(install, monkeypatch):
    """The partitions' real inputs and outputs are kept until each is checked: on a model of
    large activations and many partitions (a video transformer: past 12 GB) checking stops
    when less than half the memory it started with is left, and the model runs on
    onnxruntime, which frees each value after its last reader, instead of being killed."""
    quick = Plugin("quick", 5)
    install(quick)
    free = iter([20 << 30, 20 << 30])  # the weights check and the start; then 9 GB left
    monkeypatch.setattr(host, "available_memory", lambda: next(free, 9 << 30))
    with pytest.warns(UserWarning, match=r"ran low on memory .*9\.0 GB left after 1 of"):
        compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"] and quick.runtime.calls == 0
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)


def test_static_placement_keeps_every_claimed_partition(install):
    install(Plugin("sleepy", 5, sleep=0.02))
    compiled = byoc.compile(model(), {"backends": ["sleepy"], "compile": {"placement": "static"}})
    assert backends_of(compiled) == ["sleepy", "onnxruntime"]
    assert compiled.plan.placement.mode == "static"
    assert not compiled.plan.placement.measurements


def test_a_second_compile_reads_the_cache_and_times_nothing(install, fake_clock):
    fast = Plugin("quick", 5, fake_ms=0.5)
    install(fast)
    config = {"backends": ["quick"], **MEASURED}
    first = byoc.compile(model(), config)
    assert backends_of(first) == ["quick", "onnxruntime"]
    assert fast.runtime.calls > 0
    fast.runtime.calls = 0
    again = byoc.compile(model(), config)
    assert backends_of(again) == ["quick", "onnxruntime"]
    assert fast.runtime.calls == 2  # checked: run once alone and once in the model; untimed
    placed = again.plan.placement
    assert [m.cached for m in placed.measurements] == [True] and placed.whole.cached
    np.testing.assert_allclose(again.run({"x": X})["y"], expected(), rtol=1e-6)


def test_other_threading_settings_are_measured_again(install, fake_clock, monkeypatch):
    fast = Plugin("quick", 5, fake_ms=0.5)
    install(fast)
    config = {"backends": ["quick"], **MEASURED}
    byoc.compile(model(), config)
    fast.runtime.calls = 0
    other = "ACTIVE" if os.environ.get("OMP_WAIT_POLICY") == "PASSIVE" else "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", other)  # OpenMP threads spin or sleep: other timings
    again = byoc.compile(model(), config)
    assert fast.runtime.calls > 0
    assert [m.cached for m in again.plan.placement.measurements] == [False]


def test_a_rebuilt_native_part_is_measured_again(install, fake_clock):
    """A backend whose build() changes (its native library rebuilt from other sources, at the
    same version) is timed again, not judged by verdicts on its old build."""
    fast = Plugin("quick", 5, fake_ms=0.5)
    install(fast)
    config = {"backends": ["quick"], **MEASURED}
    byoc.compile(model(), config)
    fast.runtime.calls = 0
    byoc.compile(model(), config)
    assert fast.runtime.calls == 2  # the check runs, not timed
    fast.native = "build 2"
    again = byoc.compile(model(), config)
    assert fast.runtime.calls > 4
    assert [m.cached for m in again.plan.placement.measurements] == [False]


def test_search_gives_a_region_to_the_backend_that_saves_most(install, fake_clock):
    """Both backends win against onnxruntime (1 ms); the lower-priority one wins by more, so
    the search gives it the nodes and explain says why the first lost them."""
    install(Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3))
    config = {"backends": ["first", "second"], **MEASURED}
    compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["second", "onnxruntime"]
    reasons = dict(compiled.plan.decisions["r"].refusals)
    assert reasons["first"] == (
        "search: second's partition of 2 node(s) saves 0.7 ms; round1/first_0 saves 0.2 ms on first"
    )
    assert "beat first: search: second's partition of 2 node(s) saves 0.7 ms" in explain_text(
        compiled.plan
    )
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    greedy = {**config, "compile": {**MEASURED["compile"], "search": False}}
    assert backends_of(byoc.compile(model(), greedy)) == ["first", "onnxruntime"]


def test_a_second_compile_reuses_the_search(install, fake_clock, monkeypatch):
    """The search's outcome is cached with the model and settings: a second compile applies
    it without partitioning per backend again (P2: 2.7 s of a 3.2 s cached compile), still
    checks the chosen partitions, and explain still shows the candidates."""
    first, second = Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3)
    install(first, second, Plugin("slow", 10, fake_ms=3.0))  # loses first: vetoes to key on
    config = {"backends": ["slow", "first", "second"], **MEASURED}
    searched = []
    anew = placement.search.Search.anew
    monkeypatch.setattr(placement.search.Search, "anew", lambda *a: searched.append(1) or anew(*a))
    before = byoc.compile(model(), config)
    second.runtime.calls = 0
    again = byoc.compile(model(), config)
    assert searched == [1]
    assert backends_of(again) == backends_of(before) == ["second", "onnxruntime"]
    assert second.runtime.calls == 2  # checked alone and in the model, as any cached verdict
    shown = {(m.backend, m.kept, m.cached) for m in again.plan.placement.measurements}
    assert shown == {("slow", False, True), ("first", True, True), ("second", True, True)}
    assert "beat first: search: second's partition of 2 node(s) saves 0.7 ms" in explain_text(
        again.plan
    )
    names = {m.partition for m in again.plan.placement.measurements}
    assert names == {"round1/slow_0", "round2/first_0", "second_0"}
    remeasure = {**config, "compile": {**MEASURED["compile"], "remeasure": True}}
    assert backends_of(byoc.compile(model(), remeasure)) == ["second", "onnxruntime"]
    assert searched == [1, 1]


def test_running_low_on_memory_in_the_search_keeps_the_checked_plan(
    install, fake_clock, monkeypatch
):
    """The search runs each backend's own plan of the model on onnxruntime; where the machine
    runs low on memory meanwhile, the plan checked before the search stays (it went all to
    onnxruntime), and one line says so."""
    install(Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3))
    anew = placement.search.Search.anew

    def short_of_memory(*args):
        monkeypatch.setattr(host, "available_memory", lambda: 1 << 30)  # 1 GB left
        return anew(*args)

    monkeypatch.setattr(placement.search.Search, "anew", short_of_memory)
    said = r"search for faster partitions stopped \(the machine ran low on memory.*stays"
    with pytest.warns(UserWarning, match=said):
        compiled = byoc.compile(model(), {"backends": ["first", "second"], **MEASURED})
    assert backends_of(compiled) == ["first", "onnxruntime"]
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)


def test_a_segment_of_a_search_plan_onnxruntime_cannot_load_keeps_the_checked_plan(
    install, fake_clock, monkeypatch
):
    """A segment of a candidate plan that onnxruntime refuses is byoc's bug: the search stops,
    the checked plan stays, and the one line asks for a report."""
    install(Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3))
    anew, made = placement.search.Search.anew, placement.ledger.compile_unit

    def refusing(reg, backend, unit, table):
        if unit.backend == "onnxruntime":
            raise byoc.BackendError(f"partition {unit.name}: creating the runtime failed: boom")
        return made(reg, backend, unit, table)

    def search(*args):
        monkeypatch.setattr(placement.ledger, "compile_unit", refusing)
        try:
            return anew(*args)
        finally:
            monkeypatch.setattr(placement.ledger, "compile_unit", made)

    monkeypatch.setattr(placement.search.Search, "anew", search)
    said = r"search for faster partitions stopped \(onnxruntime cannot load .*boom \(a bug in byoc"
    with pytest.warns(UserWarning, match=said):
        compiled = byoc.compile(model(), {"backends": ["first", "second"], **MEASURED})
    assert backends_of(compiled) == ["first", "onnxruntime"]


def test_a_candidate_other_processes_disturbed_is_timed_on_one_thread(install, fake_clock):
    """The candidate that would win is timed while other processes take the CPUs: timed again
    on one thread in CPU time, it wins as on a quiet machine; that verdict is cached, and the
    next compile on the busy machine reads it, timing nothing."""
    install(Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3))
    config = {"backends": ["first", "second"], **MEASURED}
    fake_clock["others"] = [0.0, 0.6, 0.6, 0.6]  # first_0; second_0 twice; then on one thread
    with pytest.warns(UserWarning, match="took up to 60% of the CPUs, so 1 partition.s. were "):
        busy = byoc.compile(model(), config)
    assert backends_of(busy) == ["second", "onnxruntime"]
    (m,) = [m for m in busy.plan.placement.measurements if m.backend == "second"]
    assert (m.clock, m.kept, m.disturbed) == ("cpu", True, False)
    assert "timed on one thread in CPU time: other processes took 60% of the CPUs" in m.summary()
    assert busy.plan.placement.whole.clock == "wall"  # the burst had passed
    fake_clock["others"] = [0.6] * 20
    again = byoc.compile(model(), config)
    assert backends_of(again) == ["second", "onnxruntime"]
    assert all(m.cached for m in again.plan.placement.measurements)


def test_a_backend_without_threads_of_its_own_is_held_to_onnxruntimes_threads(
    install, fake_clock, monkeypatch
):
    """A backend that runs on the calling thread alone, timed on one thread under load beside
    onnxruntime on one: onnxruntime's time counts as if its threads all worked (0.5 ms
    against 1 ms on one thread is a loss against two), and the whole model is not timed so."""
    install(Plugin("single", 5, fake_ms=0.5, threaded=False))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    fake_clock["others"] = [0.6, 0.6, 0.6]  # the partition twice, then on one thread
    compiled = byoc.compile(model(), {"backends": ["single"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"]
    (m,) = compiled.plan.placement.measurements
    assert (m.clock, m.kept, m.onnxruntime_ms) == ("cpu", False, 0.5)
    faster = Plugin("single", 5, fake_ms=0.2, threaded=False)
    faster.native = "build 2"  # timed afresh
    install(faster)
    fake_clock["others"] = [0.6, 0.6, 0.6, 0.6, 0.6]  # ...; the whole model twice
    with pytest.warns(UserWarning, match="the whole-model check: other processes took 60%"):
        compiled = byoc.compile(model(), {"backends": ["single"], **MEASURED})
    assert compiled.plan.placement.measurements[0].kept  # 0.2 ms beats 1 ms / 2
    assert compiled.plan.placement.whole.disturbed  # not timed on one thread: no evidence
    assert backends_of(compiled) == ["onnxruntime"]


def test_while_other_processes_still_take_the_cpus_the_rest_is_timed_on_one_thread(
    install, fake_clock
):
    """After a timing stayed disturbed, a timing while the CPUs are still busy goes to one
    thread at once (no wall-time timing that would be thrown away)."""
    install(Plugin("quick", 5, fake_ms=0.5))
    fake_clock["others"] = [0.6, 0.6, 0.6, 0.0]  # the partition twice, alone; the whole model
    fake_clock["now"] = 0.6
    compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert fake_clock["others"] == []
    assert [m.clock for m in compiled.plan.placement.measurements] == ["cpu"]
    assert compiled.plan.placement.whole.clock == "cpu"


def test_a_search_other_processes_disturbed_is_not_cached(install, fake_clock, monkeypatch):
    """Where the candidate cannot be built on one thread either, its disturbed timing is no
    evidence: the priority plan stays, and the next compile, quiet, searches again."""
    install(Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3))
    config = {"backends": ["first", "second"], **MEASURED}
    searched = []
    anew = placement.search.Search.anew
    monkeypatch.setattr(placement.search.Search, "anew", lambda *a: searched.append(1) or anew(*a))

    one_thread = placement.ledger.Ledger.one_thread
    monkeypatch.setattr(placement.ledger.Ledger, "one_thread", unbuildable)
    fake_clock["others"] = [0.0, 0.6, 0.6]  # first_0; then second_0, twice
    with pytest.warns(UserWarning, match="other processes took up to 60% of the CPUs"):
        busy = byoc.compile(model(), config)
    assert backends_of(busy) == ["first", "onnxruntime"]
    monkeypatch.setattr(placement.ledger.Ledger, "one_thread", one_thread)
    quiet = byoc.compile(model(), config)
    assert searched == [1, 1]
    assert backends_of(quiet) == ["second", "onnxruntime"]


def test_a_region_the_search_chose_is_closed_to_every_other_backend(install, fake_clock):
    """A backend with no winning candidate there (third: too slow) does not claim part of the
    chosen region again: its nodes carry the search's reason for every other backend."""
    first, second = Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3)
    install(first, second, Plugin("third", 5, fake_ms=1.5))
    config = {"backends": ["first", "third", "second"], **MEASURED}  # in priority order
    compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["second", "onnxruntime"]
    reasons = dict(compiled.plan.decisions["r"].refusals)
    assert reasons["third"] == "search: second's partition of 2 node(s) saves 0.7 ms"
    assert [m.backend for m in compiled.plan.placement.measurements].count("third") == 1


class Evaluated:
    """Runs a partition's model (onnx's reference evaluator); the fake clock says it takes
    ``fake_ms``."""

    def __init__(self, model: onnx.ModelProto, fake_ms: float) -> None:
        self.session, self.fake_ms = ReferenceEvaluator(model), fake_ms
        self.names = [i.name for i in model.graph.input]

    def run(self, inputs):
        return self.session.run(None, dict(zip(self.names, inputs, strict=True)))


class Pieces(Plugin):
    """A test backend claiming ``ops``; a partition of n nodes takes ``ms[n]`` by the fake
    clock, other sizes 5 ms (a backend that is slow on a fragment and fast on the region
    around it)."""

    def __init__(
        self, name: str, priority: int, ops: list[str], ms: dict[int, float], spread=None, ort=None
    ):
        super().__init__(name, priority)
        self.ops, self.ms, self.spread = ops, ms, spread  # by size: the ratio's interval
        self.ort = ort or {}  # by size: onnxruntime's time beside it (default 1 ms)

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        return dict.fromkeys(self.ops) if backend == self.name else None

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        return partition.model.SerializeToString() if backend == self.name else None

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        if backend != self.name:
            return None
        model = onnx.load_from_string(bytes(artifact))
        runtime = Evaluated(model, self.ms.get(len(model.graph.node), 5.0))
        if len(model.graph.node) in (self.spread or {}):
            runtime.spread = self.spread[len(model.graph.node)]
        if len(model.graph.node) in self.ort:
            runtime.ort_ms = self.ort[len(model.graph.node)]
        return runtime


def test_a_piece_that_lost_does_not_hide_the_region_around_it(install, fake_clock):
    """By priority, first takes Neg and second only the Relu after it, which loses alone (2
    ms); the search still offers second the whole region, where it saves the most (whisper on
    dnnl and OpenVINO: OpenVINO's fragments lost, OpenVINO on the whole model won)."""
    install(
        Pieces("first", 9, ["Neg"], {1: 0.5}),
        Pieces("second", 1, ["Neg", "Relu"], {1: 2.0, 2: 0.1}),
    )
    config = {"backends": ["first", "second"], **MEASURED}
    compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["second", "onnxruntime"]
    assert [p.nodes for p in compiled.plan.partitions] == [["n", "r"]]
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    greedy = {**config, "compile": {**MEASURED["compile"], "search": False}}
    assert backends_of(byoc.compile(model(), greedy)) == ["first", "onnxruntime"]


def test_a_search_win_within_the_timings_noise_keeps_the_priority_plan(install, fake_clock):
    """second's region saves 0.6 ms at its median against first's 0.5, but its ratio's
    interval reaches 0.6 (saving 0.4) and first's reaches 0.45 (saving 0.55): the gain is
    within the noise, so the priority plan stays, on every compile (bert-enc: dnnl and OpenVINO
    within 7% of each other on neighbouring regions flipped between compiles)."""
    first = Pieces("first", 9, ["Neg"], {1: 0.5}, spread={1: (0.45, 0.55)})
    second = Pieces("second", 1, ["Neg", "Relu"], {2: 0.4}, spread={2: (0.25, 0.6)})
    install(first, second)
    config = {"backends": ["first", "second"], **MEASURED}
    assert backends_of(byoc.compile(model(), config)) == ["first", "onnxruntime"]
    second.spread = {2: (0.3, 0.4)}  # clearly better: saves at least 0.6, first at most 0.55
    remeasure = {**config, "compile": {**MEASURED["compile"], "remeasure": True}}
    assert backends_of(byoc.compile(model(), remeasure)) == ["second", "onnxruntime"]


def test_a_near_tie_faster_end_to_end_takes_the_search_plan(install, fake_clock):
    """The same near tie of partition savings, but the search's plan runs clearly faster than
    the priority plan end to end (bert-enc: OpenVINO's encoder with its token-id Gathers at
    0.66-0.71 of onnxruntime, dnnl's at 0.75-0.79): the search's plan, on every compile."""
    first = Pieces("first", 9, ["Neg"], {1: 0.5}, spread={1: (0.45, 0.55)})
    second = Pieces("second", 1, ["Neg", "Relu"], {2: 0.4}, spread={2: (0.25, 0.6)})
    install(first, second)
    fake_clock["plans"] = (0.85, 0.9)
    config = {"backends": ["first", "second"], **MEASURED}
    remeasure = {**config, "compile": {**MEASURED["compile"], "remeasure": True}}
    for settings in (config, config, remeasure):
        compiled = byoc.compile(model(), settings)
        assert backends_of(compiled) == ["second", "onnxruntime"]
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    fake_clock["plans"] = (0.95, 0.99)  # faster, but not by the margin: a tie
    assert backends_of(byoc.compile(model(), remeasure)) == ["first", "onnxruntime"]


def near_chain():
    """x -> Neg -> Relu -> Neg -> Neg -> Abs: a backend of Neg and Relu claims the first four
    nodes, one that also runs Abs all five (nearly one region)."""
    return make_model(
        [
            node("Neg", ["x"], ["a"]),
            node("Relu", ["a"], ["b"]),
            node("Neg", ["b"], ["c"]),
            node("Neg", ["c"], ["d"]),
            node("Abs", ["d"], ["y"]),
        ],
        {"x": [1, 4]},
        ["y"],
    )


def test_candidates_for_nearly_one_region_are_compared_by_ratio_not_by_drifted_times(
    install, fake_clock
):
    """first's partition (4 of the 5 nodes) runs at 0.74 of onnxruntime, timed while
    onnxruntime read 6.31 ms: it saves 1.64 ms; second's (all 5) runs at 0.71, timed while
    onnxruntime read 5.29 ms: 1.54. The machine drifted between the two timings, not the
    regions (bert-enc: dnnl kept that way ran 0.78 of onnxruntime end to end, OpenVINO 0.69):
    on their shared basis second saves more, the two disagree, and the end-to-end check
    decides: second's plan, faster there, takes the region; a tie keeps the priority plan; at
    a worse ratio second is not asked."""
    chain = near_chain()
    first = Pieces("first", 9, ["Neg", "Relu"], {4: 4.67}, ort={4: 6.31})
    second = Pieces("second", 1, ["Neg", "Relu", "Abs"], {5: 3.75}, ort={5: 5.29})
    install(first, second)
    config = {"backends": ["first", "second"], **MEASURED}
    remeasure = {**config, "compile": {**MEASURED["compile"], "remeasure": True}}
    fake_clock["plans"] = (0.85, 0.9)  # second's plan against first's, end to end
    compiled = byoc.compile(chain, config)
    assert backends_of(compiled) == ["second"]
    np.testing.assert_allclose(compiled.run({"x": X})["y"], np.maximum(-X, 0), rtol=1e-6)
    fake_clock["plans"] = (0.95, 1.05)  # a tie end to end
    assert backends_of(byoc.compile(chain, remeasure)) == ["first", "onnxruntime"]
    fake_clock["plans"] = (0.85, 0.9)
    second.ms = {5: 4.1}  # 0.775 of onnxruntime: worse than first's 0.74
    assert backends_of(byoc.compile(chain, remeasure)) == ["first", "onnxruntime"]


def test_a_near_tie_the_plan_ranks_first_in_is_still_decided_end_to_end(install, fake_clock):
    """first's partition saves 0.30 ms (0.26 to 0.34), second's for nearly the same region
    0.28 (0.24 to 0.32): first ranks first but does not clearly beat second, so the two plans
    are timed end to end (bert-enc: dnnl's and OpenVINO's encoders at 0.72-0.74 of onnxruntime
    each, OpenVINO's plan at 0.88-0.92 of dnnl's end to end): second's, faster there by the
    margin, wins; a tie keeps first."""
    chain = near_chain()
    first = Pieces("first", 9, ["Neg", "Relu"], {4: 0.7}, spread={4: (0.66, 0.74)})
    second = Pieces("second", 1, ["Neg", "Relu", "Abs"], {5: 0.72}, spread={5: (0.68, 0.76)})
    install(first, second)
    config = {"backends": ["first", "second"], **MEASURED}
    remeasure = {**config, "compile": {**MEASURED["compile"], "remeasure": True}}
    fake_clock["plans"] = (0.85, 0.9)
    assert backends_of(byoc.compile(chain, config)) == ["second"]
    fake_clock["plans"] = (0.95, 1.05)
    assert backends_of(byoc.compile(chain, remeasure)) == ["first", "onnxruntime"]
    fake_clock["plans"] = (0.85, 0.9)
    first.spread = {4: (0.5, 0.55)}  # first clearly better: no end-to-end check
    first.ms = {4: 0.52}
    assert backends_of(byoc.compile(chain, remeasure)) == ["first", "onnxruntime"]


def test_two_fast_pieces_split_by_onnxruntime_lose_to_one_medium_region(install, fake_clock):
    """Each partition is charged the onnxruntime session call its return would save. At 0.1
    ms a call, first's two pieces around a Sigmoid it cannot run save 2 x (1 - 0.1 - 0.4) = 1
    ms against 1 - 0.1 - 0.2 = 0.7 for second's one partition of all three nodes; at 0.5 ms,
    0.2 against 0.3 ms: one medium region beats two fast pieces."""
    chain = make_model(
        [node("Neg", ["x"], ["n"]), node("Sigmoid", ["n"], ["s"]), node("Relu", ["s"], ["y"])],
        {"x": [1, 4]},
        ["y"],
    )
    install(
        Pieces("first", 9, ["Neg", "Relu"], {1: 0.4}),
        Pieces("second", 1, ["Neg", "Sigmoid", "Relu"], {3: 0.2}),
    )
    config = {"backends": ["first", "second"], **MEASURED}
    fake_clock["call"] = 0.1
    assert backends_of(byoc.compile(chain, config)) == ["first", "onnxruntime", "first"]
    fake_clock["call"] = 0.5
    compiled = byoc.compile(chain, {**config, "compile": {**config["compile"], "remeasure": True}})
    assert backends_of(compiled) == ["second"]
    np.testing.assert_allclose(compiled.run({"x": X})["y"], 1 / (1 + np.exp(X)), rtol=1e-6)


def test_the_search_never_makes_a_cycle(install, fake_clock):
    """first runs Neg and Add fast, but Relu sits between them (n -> Relu -> Add, and n ->
    Add): one partition of Neg and Add would need its own output back. The search's choice
    is cut acyclically, and the model gives onnxruntime's answer."""
    diamond = make_model(
        [node("Neg", ["x"], ["n"]), node("Relu", ["n"], ["r"]), node("Add", ["n", "r"], ["y"])],
        {"x": [1, 4]},
        ["y"],
    )
    install(
        Pieces("first", 9, ["Neg", "Add"], {1: 0.3, 2: 0.3}),
        Pieces("second", 1, ["Relu"], {1: 0.5}),
    )
    compiled = byoc.compile(diamond, {"backends": ["first", "second"], **MEASURED})
    assert backends_of(compiled) == ["first", "second", "first"]
    order = [n for p in compiled.plan.partitions for n in p.nodes]
    assert order == ["n", "r", "y"]
    np.testing.assert_allclose(compiled.run({"x": X})["y"], -X + np.maximum(-X, 0), rtol=1e-6)


def test_search_seconds_caps_the_search(install, fake_clock):
    install(Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3))
    config = {
        "backends": ["first", "second"],
        "compile": {**MEASURED["compile"], "search_seconds": 0},
    }
    with pytest.warns(UserWarning, match="the search stopped after"):
        compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["first", "onnxruntime"]  # second was never timed


def test_a_newcomer_for_the_same_region_must_win_head_to_head(install, fake_clock):
    """Measured against onnxruntime apart, second saves 10% more; timed head to head against
    first on the same inputs its ratio stays unclear (0.85 to 1.02): first keeps the region,
    so measuring again cannot flip it."""
    first, second = Plugin("first", 9, fake_ms=0.5), Plugin("second", 1, fake_ms=0.4)
    install(first, second)
    config = {"backends": ["first", "second"], **MEASURED}
    assert backends_of(byoc.compile(model(), config)) == ["second", "onnxruntime"]  # clear
    second.runtime.contest = (0.85, 1.02)
    config["compile"] = {**MEASURED["compile"], "remeasure": True}
    assert backends_of(byoc.compile(model(), config)) == ["first", "onnxruntime"]


def test_a_head_to_head_other_processes_disturbed_keeps_the_priority_plan(install, fake_clock):
    """second would win head to head (0.4 against 0.5), but that timing was disturbed twice."""
    install(Plugin("first", 9, fake_ms=0.5), Plugin("second", 1, fake_ms=0.4))
    config = {"backends": ["first", "second"], **MEASURED}
    fake_clock["others"] = [0.0, 0.0, 0.6, 0.6]  # first_0, second_0, then head to head twice
    assert backends_of(byoc.compile(model(), config)) == ["first", "onnxruntime"]
    assert fake_clock["others"] == []


def test_an_end_to_end_race_other_processes_disturbed_is_run_again_on_one_thread(
    install, fake_clock, monkeypatch
):
    first = Pieces("first", 9, ["Neg"], {1: 0.5}, spread={1: (0.45, 0.55)})
    second = Pieces("second", 1, ["Neg", "Relu"], {2: 0.4}, spread={2: (0.25, 0.6)})
    install(first, second)
    fake_clock["plans"] = (0.8, 0.85)  # the search's plan clearly faster, but disturbed
    blocks = placement.timing.time_blocks

    def disturbed(first, second, args, *a, **k):
        timing = blocks(first, second, args, *a, **k)
        return timing if args else dataclasses.replace(timing, others=0.6)

    monkeypatch.setattr(placement.timing, "time_blocks", disturbed)
    config = {"backends": ["first", "second"], **MEASURED}
    assert backends_of(byoc.compile(model(), config)) == ["second", "onnxruntime"]
    config["compile"] = {**MEASURED["compile"], "remeasure": True}
    monkeypatch.setattr(placement.ledger.Ledger, "one_thread", unbuildable)
    assert backends_of(byoc.compile(model(), config)) == ["first", "onnxruntime"]


def test_search_keeps_the_priority_plan_when_it_is_as_good(install, fake_clock):
    install(Plugin("first", 9, fake_ms=0.5), Plugin("second", 1, fake_ms=0.495))
    compiled = byoc.compile(model(), {"backends": ["first", "second"], **MEASURED})
    assert backends_of(compiled) == ["first", "onnxruntime"]  # 1% better is within the margin


def test_the_next_backend_may_take_what_the_first_lost(install, fake_clock):
    install(Plugin("first", 9, fake_ms=3.0), Plugin("second", 1, fake_ms=0.5))
    compiled = byoc.compile(model(), {"backends": ["first", "second"], **MEASURED})
    assert backends_of(compiled) == ["second", "onnxruntime"]
    verdicts = [(m.backend, m.kept) for m in compiled.plan.placement.measurements]
    assert verdicts == [("first", False), ("second", True)]
    reasons = compiled.plan.decisions["r"].refusals
    assert any(
        b == "first"
        and r.startswith("returned to onnxruntime: 3 ms on first vs 1 ms on onnxruntime (kept at")
        for b, r in reasons
    )


def test_a_compiled_model_slower_than_onnxruntime_runs_as_onnxruntime(install, fake_clock):
    install(Plugin("quick", 5, fake_ms=0.5))
    fake_clock["byoc"] = 1.5
    with pytest.warns(UserWarning, match="running it as one onnxruntime session"):
        compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"]
    whole = compiled.plan.placement.whole
    assert (whole.backend_ms, whole.onnxruntime_ms, whole.kept) == (1.5, 1.0, False)
    assert "whole model: 1.5 ms compiled vs 1 ms plain onnxruntime" in explain_text(compiled.plan)
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)


def test_a_plan_that_loses_end_to_end_gives_one_backends_whole_region_a_chance(install, fake_clock):
    """Each partition of the plan won alone but the plan loses end to end: before plain
    onnxruntime, the kept candidate of another backend over the plan's nodes is built and
    checked end to end once (squeezenet-qdq: a dnnl plan 1.04x, OpenVINO's whole model 0.69x),
    and a second compile reaches the same plan from the cache."""
    first, second = Plugin("first", 10, fake_ms=0.5), Plugin("second", 5, fake_ms=0.6)
    install(first, second)
    seen = {"calls": 0}

    def whole_ms():  # the plan holding first's partition loses end to end, second's wins
        ran_first, seen["calls"] = first.runtime.calls != seen["calls"], first.runtime.calls
        return 1.5 if ran_first else 0.8

    fake_clock["byoc"] = whole_ms
    for _ in range(2):
        with pytest.warns(
            UserWarning,
            match=r"lost the whole-model check \(1\.5 ms vs 1 ms\); "
            r"trying second on its 2 nodes instead",
        ):
            compiled = byoc.compile(model(), MEASURED)
        assert backends_of(compiled) == ["second", "onnxruntime"]
        whole = compiled.plan.placement.whole
        assert (whole.backend_ms, whole.kept) == (0.8, True)
        np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    assert "first: the plan lost the whole-model check; second was tried" in explain_text(
        compiled.plan
    )


class ScaledRuntime(Runtime):
    """relu(-x) times ``scale``."""

    def __init__(self, scale: float) -> None:
        super().__init__(0.0, 0.5)
        self.scale = np.float32(scale)

    def run(self, inputs):
        return [np.maximum(-inputs[0], 0) * self.scale]


def test_a_model_whose_outputs_differ_though_each_partition_was_close_runs_as_onnxruntime(
    install, fake_clock
):
    """Each partition is checked alone, within [compare]'s tolerance; later layers may magnify
    what it allowed (a Mask R-CNN's region proposals through RoIAlign: box corners 0.1 off
    onnxruntime's). The compiled model's own outputs are checked too, and if they differ the
    model runs as onnxruntime, which compare then passes."""
    scaled = Plugin("quick", 5, fake_ms=0.5)
    scaled.runtime = ScaledRuntime(1 + 5e-5)
    install(scaled)
    amplified = make_model(
        [
            node("Neg", ["x"], ["n"]),
            node("Relu", ["n"], ["r"]),  # the backend's: 5e-5 off, within rtol 1e-4
            node("Mul", ["x", "minus"], ["m"]),
            node("Max", ["m", "zero"], ["r0"]),  # onnxruntime's relu(-x), exactly r
            node("Sub", ["r", "r0"], ["d"]),
            node("Mul", ["d", "big"], ["y"]),
        ],
        {"x": [1, 4]},
        ["y"],
        constants={"minus": np.float32(-1), "zero": np.float32(0), "big": np.float32(1e6)},
    )
    config = {"backends": ["quick"], **MEASURED}
    with pytest.warns(UserWarning, match="the compiled model's output 'y' differs from"):
        compiled = byoc.compile(amplified, config)
    assert backends_of(compiled) == ["onnxruntime"]
    assert "the compiled model's output 'y' differs" in explain_text(compiled.plan)
    with pytest.warns(UserWarning, match="differs"):
        assert byoc.compare(amplified, config).passed


def test_a_model_that_draws_random_values_is_not_compared_end_to_end(install, fake_clock):
    """Two runs of a model holding RandomNormalLike differ by design (a VAE's sampling), so
    its outputs are not compared with plain onnxruntime's: the partitions, each checked on
    the same inputs as onnxruntime, are kept."""
    install(Plugin("quick", 5, fake_ms=0.5))
    sampled = make_model(
        [
            node("Neg", ["x"], ["n"]),
            node("Relu", ["n"], ["r"]),
            node("RandomNormalLike", ["r"], ["e"]),
            node("Add", ["r", "e"], ["y"]),
        ],
        {"x": [1, 4]},
        ["y"],
    )
    compiled = byoc.compile(sampled, {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["quick", "onnxruntime"]


def test_a_compiled_model_whose_interval_reaches_onnxruntime_runs_as_onnxruntime(
    install, fake_clock
):
    install(Plugin("quick", 5, fake_ms=0.5))
    fake_clock["interval"] = (0.45, 1.04)  # the median wins by 50%, but unclear: it may lose
    with pytest.warns(
        UserWarning, match=r"ratio in \[0.45, 1.04\] over 3 rounds, unclear\): running it as one"
    ):
        compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"]
    text = explain_text(compiled.plan)
    assert "0.5 ms compiled vs 1 ms plain onnxruntime, ratio in [0.45, 1.04] over 3" in text


def test_an_unclear_whole_model_loss_gets_the_same_verdict_on_the_next_compile(
    install, fake_clock, monkeypatch
):
    """A check within the noise on a quiet machine sends the model to onnxruntime, the path
    that cannot be slow, and the next compile says the same: the verdict is cached as unclear
    (timing it again flipped bert-enc between kept and onnxruntime, [0.94, 1.05] then [0.92,
    0.98], on an AVX2 EPYC), and timed again after remeasure_after days or with remeasure.
    A busy machine's check is not cached (the disturbance test)."""
    install(Plugin("quick", 5, fake_ms=0.5))
    config = {"backends": ["quick"], **MEASURED}
    fake_clock["interval"] = (0.45, 1.04)
    with pytest.warns(UserWarning, match="unclear"):
        assert backends_of(byoc.compile(model(), config)) == ["onnxruntime"]
    fake_clock["interval"] = None  # 0.5, clearly, if it were timed
    with pytest.warns(UserWarning, match="unclear"):
        again = byoc.compile(model(), config)
    assert backends_of(again) == ["onnxruntime"] and again.plan.placement.whole.cached
    later = time.time() + 8 * 86400
    monkeypatch.setattr(time, "time", lambda: later)
    old = byoc.compile(model(), config)  # a week later: timed again, clearly kept
    assert backends_of(old) == ["quick", "onnxruntime"]
    assert not old.plan.placement.whole.cached
    fake_clock["interval"] = (0.45, 1.04)  # never asked: the clear verdict is cached
    assert byoc.compile(model(), config).plan.placement.whole.cached


def test_an_unclear_win_is_kept_when_no_sample_reached_onnxruntime(install, fake_clock):
    """One noisy round does not throw a win away: the interval crosses the 2% margin, but
    not onnxruntime's own time."""
    install(Plugin("quick", 5, fake_ms=0.5))
    fake_clock["byoc"], fake_clock["interval"] = 0.9, (0.85, 0.99)
    compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["quick", "onnxruntime"]
    whole = compiled.plan.placement.whole
    assert (whole.kept, whole.clear, whole.interval) == (True, False, (0.85, 0.99))


def test_a_whole_model_win_its_partitions_cannot_explain_is_not_trusted(install, fake_clock):
    """Only the partitions make the model faster than plain onnxruntime: one that saves
    0.01 ms (0.01 against 0.02, a clear win of its own) cannot make a 1 ms model 2x faster, so
    that end-to-end win was a disturbance of one side, and the model runs as one onnxruntime
    session, saying why; saving 0.03 ms, above the 2% margin of 1 ms, it is kept."""
    quick = Plugin("quick", 5, fake_ms=0.01)
    quick.runtime.ort_ms = 0.02
    install(quick)
    config = {"backends": ["quick"], **MEASURED}
    with pytest.warns(UserWarning, match="partitions save 0.01 ms, less than the 2% margin"):
        compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["onnxruntime"]
    assert not compiled.plan.placement.whole.kept
    assert "not a win to trust" in explain_text(compiled.plan)
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    quick.runtime.ort_ms = 0.04
    remeasure = {**config, "compile": {**MEASURED["compile"], "remeasure": True}}
    assert backends_of(byoc.compile(model(), remeasure)) == ["quick", "onnxruntime"]


def test_a_partition_timed_while_other_processes_took_the_cpus_runs_on_onnxruntime(
    install, fake_clock, monkeypatch
):
    """A neighbour slows the two sides unequally, so a timing it disturbed is no evidence:
    timed once more after a pause, still disturbed, and not to be built on one thread, the
    partition runs on onnxruntime, saying why, and nothing is cached: the next compile, on a
    quiet machine, times it and keeps it."""
    install(Plugin("quick", 5, fake_ms=0.5))
    config = {"backends": ["quick"], **MEASURED}
    one_thread = placement.ledger.Ledger.one_thread
    monkeypatch.setattr(placement.ledger.Ledger, "one_thread", unbuildable)
    fake_clock["others"] = [0.6, 0.55]
    with pytest.warns(UserWarning, match="other processes took up to 55% of the CPUs while 1 "):
        compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["onnxruntime"]
    assert fake_clock["others"] == []  # timed twice
    (m,) = compiled.plan.placement.measurements
    assert (m.kept, m.disturbed, m.others) == (False, True, 0.55)
    assert "took 55% of the CPUs while it was timed" in explain_text(compiled.plan)
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    monkeypatch.setattr(placement.ledger.Ledger, "one_thread", one_thread)
    quiet = byoc.compile(model(), config)
    assert backends_of(quiet) == ["quick", "onnxruntime"]
    assert [m.cached for m in quiet.plan.placement.measurements] == [False]
    assert [m.cached for m in byoc.compile(model(), config).plan.placement.measurements] == [True]


def test_a_burst_of_other_processes_is_waited_out(install, fake_clock):
    install(Plugin("quick", 5, fake_ms=0.5))
    fake_clock["others"] = [0.9, 0.02]
    compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["quick", "onnxruntime"]
    (m,) = compiled.plan.placement.measurements
    assert (m.kept, m.disturbed, m.others) == (True, False, 0.02)


def test_a_whole_model_check_other_processes_disturbed_is_taken_on_one_thread(install, fake_clock):
    install(Plugin("quick", 5, fake_ms=0.5))
    config = {"backends": ["quick"], **MEASURED}
    fake_clock["others"] = [0.0, 0.5, 0.5, 0.5]  # the partition; the whole model twice; alone
    compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["quick", "onnxruntime"]
    whole = compiled.plan.placement.whole
    assert (whole.clock, whole.kept, whole.disturbed) == ("cpu", True, False)
    text = explain_text(compiled.plan)
    assert "byoc kept (timed on one thread in CPU time: other processes took 50% of the" in text


def test_a_whole_model_check_other_processes_disturbed_is_not_trusted(
    install, fake_clock, monkeypatch
):
    """Where the plan cannot be built on one thread, the disturbed check is no evidence."""
    install(Plugin("quick", 5, fake_ms=0.5))
    config = {"backends": ["quick"], **MEASURED}

    def no_build(*args, **kwargs):
        raise byoc.errors.BackendError("quick cannot run on one thread")

    monkeypatch.setattr(placement.whole, "build", no_build)
    fake_clock["others"] = [0.0, 0.5, 0.5]  # the partition, then the whole model twice
    with pytest.warns(UserWarning, match="the whole-model check: other processes took 50% "):
        compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["onnxruntime"]
    assert compiled.plan.placement.whole.disturbed
    assert "plain onnxruntime (other processes took 50% of the CPUs)" in explain_text(compiled.plan)
    again = byoc.compile(model(), config)  # the partition's verdict cached, the check not
    assert backends_of(again) == ["quick", "onnxruntime"]
    assert [m.cached for m in again.plan.placement.measurements] == [True]
    assert not again.plan.placement.whole.cached


def test_whole_model_fallback_false_keeps_the_compiled_model(install, fake_clock):
    install(Plugin("quick", 5, fake_ms=0.5))
    fake_clock["byoc"] = 1.5
    config = {
        "backends": ["quick"],
        "compile": {"whole_model_fallback": False, **MEASURED["compile"]},
    }
    with pytest.warns(UserWarning, match="whole_model_fallback = false"):
        compiled = byoc.compile(model(), config)
    assert backends_of(compiled) == ["quick", "onnxruntime"]


def test_the_margin_decides_close_calls(install, fake_clock):
    install(Plugin("quick", 5, fake_ms=0.97))
    kept = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(kept) == ["quick", "onnxruntime"]
    config = {"backends": ["quick"], "compile": {"margin": 0.05, **MEASURED["compile"]}}
    assert backends_of(byoc.compile(model(), config)) == ["onnxruntime"]


def test_a_returned_partition_saves_an_onnxruntime_session_call(install, fake_clock):
    # 0.9 ms beats 1 ms, but not 1 ms less the 0.2 ms a separate onnxruntime call costs
    install(Plugin("quick", 5, fake_ms=0.9))
    fake_clock["call"] = 0.2
    compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"]
    (m,) = compiled.plan.placement.measurements
    assert (m.backend_ms, m.onnxruntime_ms, m.call_ms, m.kept) == (0.9, 1.0, 0.2, False)


def test_a_model_that_cannot_be_measured_runs_on_onnxruntime_and_says_why(install):
    install(Plugin("sleepy", 5, sleep=0.001))
    dynamic = make_model(
        [node("Neg", ["x"], ["n"]), node("Relu", ["n"], ["y"])], {"x": ["N", 4]}, ["y"]
    )
    with pytest.warns(UserWarning, match="every partition runs on onnxruntime.*symbolic dim"):
        compiled = byoc.compile(dynamic, {"backends": ["sleepy"], **MEASURED})
    assert backends_of(compiled) == ["onnxruntime"]
    assert "symbolic dim" in compiled.plan.placement.note
    assert "returned to onnxruntime: no inputs" in explain_text(compiled.plan)
    kept = byoc.compile(dynamic, {"backends": ["sleepy"], "compile": {"placement": "static"}})
    assert backends_of(kept) == ["sleepy"]
    assert "partitions kept unchecked" in kept.plan.placement.note


def test_given_inputs_of_the_wrong_shape_are_an_input_error(install, fake_clock):
    install(Plugin("quick", 5, fake_ms=0.5))
    with pytest.raises(byoc.InputError, match="has shape"):
        byoc.compile(model(), {"backends": ["quick"], **MEASURED}, inputs={"x": X[:, :2]})


def test_a_saved_model_keeps_the_placement_it_was_compiled_with(install, fake_clock, tmp_path):
    quick = Plugin("quick", 5, fake_ms=0.5)
    install(quick)
    compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    path = compiled.save(tmp_path / "m.byoc")
    quick.runtime.calls = 0
    loaded = byoc.load(path)
    assert backends_of(loaded) == ["quick", "onnxruntime"] and quick.runtime.calls == 0
    np.testing.assert_allclose(loaded.run({"x": X})["y"], expected(), rtol=1e-6)


def test_cli_partition_and_explain_show_the_measurements(install, tmp_path, capsys):
    install(Plugin("sleepy", 5, sleep=0.02))
    path = tmp_path / "m.onnx"
    path.write_bytes(model().SerializeToString())
    cfg = tmp_path / "byoc.toml"
    cfg.write_text('backends = ["sleepy"]\n[compile]\nplacement = "measured"\n')
    assert main(["partition", str(path), "-c", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["partitions"] == [] and plan["fallback_nodes"] == ["n", "r", "y"]
    (m,) = plan["placement"]["measurements"]
    assert m["backend"] == "sleepy" and m["verdict"] == "returned" and m["backend_ms"] >= 20
    assert main(["explain", str(path), "-c", str(cfg)]) == 0
    assert "sleepy: returned to onnxruntime" in capsys.readouterr().out


def test_a_damaged_cache_entry_is_measured_again(install, fake_clock, tmp_path):
    install(Plugin("quick", 5, fake_ms=0.5))
    config = {"backends": ["quick"], **MEASURED}
    byoc.compile(model(), config)
    entries = sorted((tmp_path / "placement").iterdir())
    for text in ("{not json", '{"partition": "x"}'):
        for entry in entries:
            entry.write_text(text)
        again = byoc.compile(model(), config)
        assert [m.cached for m in again.plan.placement.measurements] == [False]
        assert backends_of(again) == ["quick", "onnxruntime"]
    for entry in entries:  # well-formed but with a time that is not a number
        data = json.loads(entry.read_text())
        entry.write_text(json.dumps({**data, "backend_ms": "fast"}))
    again = byoc.compile(model(), config)
    assert [m.cached for m in again.plan.placement.measurements] == [False]


class NegRuntime(Runtime):
    def run(self, inputs):
        return [-inputs[0]]


class Refusing(Plugin):
    """Claims Neg and Relu, but its codegen refuses ``refuse`` (node names) in a partition."""

    def __init__(self, name: str, refuse: list[str], **kw):
        super().__init__(name, 5, **kw)
        self.refuse = refuse
        self.codegens = 0

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        if backend != self.name:
            return None
        self.codegens += 1
        refused = [n for n in self.refuse if n in partition.nodes or n == "not-in-it"]
        if refused:
            raise byoc.NodesRefused({n: "the library has only a slow kernel" for n in refused})
        return b"neg"


@pytest.mark.parametrize("mode", ["static", "measured"])
def test_nodes_refused_at_codegen_go_to_onnxruntime_and_explain_says_why(install, fake_clock, mode):
    picky = Refusing("picky", ["r"], fake_ms=0.5)
    picky.runtime = NegRuntime(0.0, 0.5)  # the partition is Neg alone once Relu is refused
    install(picky)
    compiled = byoc.compile(model(), {"backends": ["picky"], "compile": {"placement": mode}})
    assert [s.unit.nodes for s in compiled.steps] == [["n"], ["r", "y"]]
    assert backends_of(compiled) == ["picky", "onnxruntime"]
    assert picky.codegens == 2  # refused once, then the partition without Relu
    reason = ("picky", "refused at codegen: the library has only a slow kernel")
    assert reason in compiled.plan.decisions["r"].refusals
    assert "picky: refused at codegen: the library has only a slow kernel" in explain_text(
        compiled.plan
    )
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)


def test_refusing_a_node_outside_the_partition_is_the_backends_error(install):
    install(Refusing("picky", ["not-in-it"]))
    with pytest.raises(byoc.BackendError, match="refused nodes that are not in the partition"):
        byoc.compile(model(), {"backends": ["picky"], "compile": {"placement": "static"}})


def test_timing_stops_once_the_ratio_is_clear_and_says_when_it_is_not():
    def slow(_):
        time.sleep(0.002)

    timing = placement.timing.time_blocks(slow, lambda _: None, [], block_seconds=0.01)
    assert timing.first_ms >= 2 > timing.second_ms and timing.interval[0] > 10
    assert timing.samples == 3  # more than twice as fast: clear at once
    steady = placement.timing.sequential(
        lambda i: (0.9, 1.0), lambda a, b: 0.98, min_samples=8, budget=1
    )
    assert (steady.samples, steady.interval) == (8, (0.9, 0.9))
    coin = placement.timing.sequential(
        lambda i: (0.9 + 0.2 * (i % 2), 1.0), lambda a, b: 0.98, min_samples=8, budget=0.01
    )
    lo, hi = coin.interval
    assert lo < 0.98 < hi  # the budget ran out: unclear


def test_other_processes_cpu_time_is_seen_and_byocs_own_is_not(cpu_meter):
    """``host.others_since``: another process spinning takes a whole CPU of those this process
    may run on; this process spinning itself is not another process."""
    cpus = len(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", SPIN.format(1.0)])
    try:
        time.sleep(0.2)  # it starts
        mark = host.cpu_mark()
        time.sleep(0.5)
        assert host.others_since(mark) >= 0.7 / cpus
    finally:
        spinner.kill()
        spinner.wait()
    mark = host.cpu_mark()
    time.sleep(0.4)
    before = host.others_since(mark)  # what the rest of the machine does anyway
    mark = host.cpu_mark()
    exec(SPIN.format(0.4))
    assert host.others_since(mark) < before + 0.5 / cpus


SPIN = "import time\nend = time.perf_counter() + {}\nwhile time.perf_counter() < end: pass"


def test_an_apps_calls_beside_a_compile_count_as_another_processs(cpu_meter):
    """An app calling its session while byoc compiles in the same process (a session's
    background plans) slows placement's timings as another process would: the calls' time
    it notes counts as others'."""
    cpus = len(os.sched_getaffinity(0))
    mark = host.cpu_mark()
    exec(SPIN.format(0.4))  # the app's call, in this process
    host.note_app(0.4)
    assert host.others_since(mark) >= 0.3 / cpus


def test_work_timed_on_one_thread_keeps_its_ratio_beside_a_busy_process_per_cpu(cpu_meter):
    """One spinning process per CPU this process may use (a busy laptop or CI runner): two
    pieces of work, one half the other, timed on one thread in CPU time, still measure 1:2,
    where in wall time each run takes what the spinners leave it."""

    def work(n):
        def run(_):
            total = 0
            for i in range(n):
                total += i

        return run

    cpus = len(os.sched_getaffinity(0))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:
        time.sleep(0.3)
        timing = placement.timing
        timed = timing.time_pair(
            work(20_000), work(40_000), [], on_one_thread=True, budget=2.0, min_pairs=30
        )
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert host.busy(timed.others), timed  # they took the CPUs meanwhile
    assert timed.clock == "cpu" and not timing.busy(timed)
    assert 0.4 < timed.first_ms / timed.second_ms < 0.6, timed


def test_without_proc_stat_nothing_is_taken_for_a_disturbance(monkeypatch, cpu_meter):
    monkeypatch.setattr(host, "_cpu_seconds", lambda: None)
    assert host.others_since(host.cpu_mark()) is None


def test_a_neighbours_burst_spoils_a_round_or_two_not_the_whole_model_verdict(monkeypatch):
    """Byoc at 0.9x a 40 ms onnxruntime, on a machine where a neighbour triples every run for
    0.6 s out of each 2 s: the whole-model timing is still clear within its budget."""
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(time, "sleep", lambda s: now.__setitem__(0, now[0] + s))

    def runner(ms):
        def run(_):
            busy = now[0] % 2.0 >= 1.4
            now[0] += ms / 1e3 * (3 if busy else 1)

        return run

    timing = placement.timing.time_blocks(runner(36), runner(40), [], lambda a, b: 0.98, budget=4.0)
    assert timing.interval[1] < 0.98, timing


def test_an_unclear_timing_goes_on_past_its_budget_only_while_it_would_clear(monkeypatch):
    """0.1 s a sample, a 1 s budget, runs 10% apart: a 6% win (threshold 0.98) still unclear
    at the budget, whose median is far enough from the threshold for twice the samples to
    clear it, is timed on until clear (within twice the budget); ties stop at the budget."""
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    def sampler(ratio, seed):
        rng = np.random.default_rng(seed)

        def sample(i):
            now[0] += 0.1
            return ratio * rng.uniform(0.9, 1.1), rng.uniform(0.9, 1.1)

        return sample

    sequential = placement.timing.sequential
    win = sequential(sampler(0.94, 2), lambda a, b: 0.98, min_samples=8, budget=1.0)
    assert 11 < win.samples <= 21 and win.interval[1] < 0.98, win
    for seed in range(10):
        now[0] = 0.0
        tie = sequential(sampler(0.98, seed), lambda a, b: 0.98, min_samples=8, budget=1.0)
        assert tie.samples <= 11, (seed, tie)


@pytest.mark.parametrize("ratio, kept", [(0.9, True), (1.05, False)])
def test_the_same_partition_measured_twice_gets_the_same_verdict(ratio, kept):
    """On a noisy machine (runs 20% apart, one run in eight three times as slow), twenty
    measurements of a 10% win, and of a 5% loss, all agree."""
    verdicts = set()
    for seed in range(20):
        rng = np.random.default_rng(seed)

        def sample(i, rng=rng):
            burst = lambda: 3.0 if rng.random() < 1 / 8 else 1.0  # noqa: E731
            return ratio * rng.uniform(0.9, 1.1) * burst(), rng.uniform(0.9, 1.1) * burst()

        timing = placement.timing.sequential(sample, lambda a, b: 0.98, min_samples=8, budget=10)
        verdicts.add(timing.interval[1] < 0.98 if kept else timing.interval[0] > 0.98)
    assert verdicts == {True}


class Unfused:
    """Runs the partition as onnxruntime does with its graph optimizations off (DequantizeLinear,
    Conv, QuantizeLinear in float32, not a fused QLinearConv), then adds ``off`` to one value."""

    fake_ms = 0.5

    def __init__(self, model, off: float) -> None:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.session = ort.InferenceSession(model.SerializeToString(), options)
        self.off = off

    def run(self, inputs):
        (y,) = self.session.run(None, {"x": inputs[0]})
        y.reshape(-1)[0] += self.off
        return [y]


class Quantizing(Plugin):
    """Claims a QDQ convolution; its runtime rounds as unfused onnxruntime does."""

    def __init__(self, off: float) -> None:
        super().__init__("qdq", 5)
        self.off = off

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        ops = ("QuantizeLinear", "DequantizeLinear", "Conv")
        return dict.fromkeys(ops) if backend == self.name else None

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        return partition.model if backend == self.name else None

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        return Unfused(artifact, self.off) if backend == self.name else None


def qdq_conv(span=63):
    """x -> Q/DQ -> Conv (int8 weights) -> Q/DQ -> y: onnxruntime fuses it into a QLinearConv
    and rounds some values a quantum (0.05) away from its unoptimized run. The weights stay within
    +-``span``, by default 63 so that an AVX2 CPU without VNNI, which adds pairs of uint8 x int8
    products in int16, cannot saturate: with +-127 its fused run is 88 quanta off, and any
    backend would pass."""
    rng = np.random.default_rng(0)
    nodes = [
        node("QuantizeLinear", ["x", "s", "z"], "q"),
        node("DequantizeLinear", ["q", "s", "z"], "dq"),
        node("DequantizeLinear", ["wq", "ws", "wz"], "w"),
        node("Conv", ["dq", "w"], "c", pads=[1, 1, 1, 1]),
        node("QuantizeLinear", ["c", "s2", "z"], "q2"),
        node("DequantizeLinear", ["q2", "s2", "z"], "y"),
    ]
    weights = rng.integers(-span, span + 1, (8, 8, 3, 3)).astype(np.int8)
    constants = {"s": np.float32(0.02), "z": np.uint8(128), "s2": np.float32(0.05)}
    constants |= {"wq": weights, "ws": np.float32(0.01), "wz": np.int8(0)}
    return make_model(nodes, {"x": [1, 8, 16, 16]}, ["y"], constants)


def half_chain(dtype=np.float16):
    """x (8x64) -> MatMul -> Tanh -> MatMul -> Mul 3 -> y, in ``dtype``: in float16 onnxruntime
    rounds each of the four values it writes to float16."""
    rng = np.random.default_rng(1)
    nodes = [
        node("MatMul", ["x", "w1"], "a"),
        node("Tanh", ["a"], "b"),
        node("MatMul", ["b", "w2"], "c"),
        node("Mul", ["c", "three"], "y"),
    ]
    weights = {k: rng.normal(0, 0.3, (64, 64)).astype(dtype) for k in ("w1", "w2")}
    constants = {**weights, "three": np.array(3.0, dtype)}
    return make_model(nodes, {"x": (dtype, [8, 64])}, ["y"], constants)


class InFloat32:
    """Runs the float16 chain as a backend that keeps float32 between its ops: rounds only its
    output to float16, then adds ``off`` to one value."""

    fake_ms = 0.5

    def __init__(self, off: float) -> None:
        self.session = ort.InferenceSession(half_chain(np.float32).SerializeToString())
        self.off = off

    def run(self, inputs):
        (y,) = self.session.run(None, {"x": inputs[0].astype(np.float32)})
        y = y.astype(np.float16)
        y.reshape(-1)[0] += self.off
        return [y]


class Widening(Plugin):
    """Claims the float16 chain; its runtime is ``InFloat32``."""

    def __init__(self, off: float) -> None:
        super().__init__("wide", 5)
        self.off = off

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        return dict.fromkeys(("MatMul", "Tanh", "Mul")) if backend == self.name else None

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        return partition.model if backend == self.name else None

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        return InFloat32(self.off) if backend == self.name else None


@pytest.mark.parametrize(("off", "passed"), [(0.0, True), (0.25, False)])
def test_a_float16_model_may_round_as_far_from_onnxruntime_as_float32_does(
    install, fake_clock, off, passed
):
    """onnxruntime rounds every value of a float16 model it writes; a backend that keeps float32
    between its ops lands some outputs an ulp or two away, beyond rtol/atol. Both compare and
    measured placement allow twice what onnxruntime's float16 run differs from the same graph
    in float32 by; a value 0.25 off (over 30 ulps) is still a mismatch."""
    install(Widening(off))
    static = {"backends": ["wide"], "compile": {"placement": "static"}}
    report = byoc.compare(half_chain(), static)
    (out,) = report.outputs
    assert report.passed == passed, report.table()
    assert out.max_abs > report.atol + report.rtol * 10  # beyond rtol/atol alone
    assert 0 < out.spread < 0.02
    assert "a float16 model against float32" in report.table()
    assert "rtol at least one ulp of a float16" in report.table()
    compiled = byoc.compile(half_chain(), {"backends": ["wide"], **MEASURED})
    (m,) = compiled.plan.placement.measurements
    assert (m.failure is None) == passed, m.failure
    assert [p.backend for p in compiled.plan.partitions] == (["wide"] if passed else [])


@pytest.mark.parametrize(
    ("flags", "span", "hinted"),
    [(("avx2",), 127, True), (("avx2",), 63, False), (("avx2", "avx512_vnni"), 127, False)],
)
def test_a_mismatch_on_int8_products_says_when_onnxruntime_saturates(
    install, monkeypatch, flags, span, hinted
):
    """On an x86 CPU without VNNI onnxruntime's own uint8 x int8 products saturate: a compare
    that fails on a model with int8 weights says so (and what avoids it); with VNNI it does not,
    nor with 7-bit weights (reduce_range=True), which cannot saturate."""
    install(Quantizing(50.0))  # off by more than a saturating onnxruntime is from itself
    cpu = dataclasses.replace(host.cpu(), machine="x86_64", flags=flags)
    monkeypatch.setattr(host, "cpu", lambda: cpu)
    config = {"backends": ["qdq"], "compile": {"placement": "static"}}
    report = byoc.compare(qdq_conv(span), config)
    assert not report.passed
    assert ("no VNNI" in report.table()) == hinted, report.table()
    assert ("read by DequantizeLinear here" in report.hint) == hinted
    assert ("reduce_range=True" in report.to_json()["hint"]) == hinted


@pytest.mark.parametrize(("off", "kept"), [(0.0, True), (0.2, False)])
def test_a_partition_may_round_as_far_from_onnxruntime_as_onnxruntime_does(
    install, fake_clock, off, kept
):
    """Fused and unfused onnxruntime differ by a quantum on this QDQ convolution: a backend
    that rounds as unfused onnxruntime does is kept; one 4 quanta off is returned."""
    install(Quantizing(off))
    compiled = byoc.compile(qdq_conv(), {"backends": ["qdq"], **MEASURED})
    (m,) = compiled.plan.placement.measurements
    assert (m.failure is None) == kept, m.failure
    if not kept:
        assert "twice the 0.05 that onnxruntime's own runs differ by" in m.failure


@pytest.mark.parametrize(("off", "passed"), [(0.0, True), (0.2, False)])
def test_compare_judges_as_placement_does(install, off, passed):
    """byoc compare allows an output twice what onnxruntime's optimized and unoptimized runs
    differ by, as measured placement does: the backend that rounds as unfused onnxruntime
    passes (and says it needed the spread); one 4 quanta off fails."""
    install(Quantizing(off))
    report = byoc.compare(qdq_conv(), {"backends": ["qdq"], "compile": {"placement": "static"}})
    (out,) = report.outputs
    assert report.passed == passed
    assert out.max_abs > report.atol + report.rtol * 10  # beyond rtol/atol alone
    assert out.spread == pytest.approx(0.05, rel=1e-3)
    table = report.table()
    assert "twice onnxruntime's own spread" in table and "differ by 0.05" in table
    assert report.to_json()["outputs"][0]["onnxruntime_spread"] == out.spread


@pytest.mark.parametrize(("off", "passed"), [(0.05, True), (0.12, False)])
def test_a_dequantized_output_may_be_one_quantum_off(install, fake_clock, off, passed):
    """An output DequantizeLinear writes holds steps of its scale (0.05); a sum taken in
    another order may tip a value on a tie into the next step, so one step is allowed where
    onnxruntime's own runs agree (spread 0): by compare and by measured placement alike."""
    model = make_model(
        [
            node("QuantizeLinear", ["x", "s", "z"], "q"),
            node("DequantizeLinear", ["q", "s", "z"], "y"),
        ],
        {"x": [1, 8, 16, 16]},
        ["y"],
        {"s": np.float32(0.05), "z": np.uint8(128)},
    )
    install(Quantizing(off))
    report = byoc.compare(model, {"backends": ["qdq"], "compile": {"placement": "static"}})
    (out,) = report.outputs
    assert (report.passed, out.spread, out.quantum) == (passed, 0.0, pytest.approx(0.05))
    assert "rounding ties may move it 0.05, allowed" in report.table()
    (m,) = byoc.compile(model, {"backends": ["qdq"], **MEASURED}).plan.placement.measurements
    assert (m.failure is None) == passed, m.failure


def test_a_verdict_shows_every_term_of_the_decision(install, fake_clock):
    fake_clock["call"] = 0.1
    install(Plugin("quick", 5, fake_ms=0.9))
    compiled = byoc.compile(model(), {"backends": ["quick"], **MEASURED})
    (m,) = compiled.plan.placement.measurements
    assert m.summary() == (
        "returned to onnxruntime: 0.9 ms on quick vs 1 ms on onnxruntime (kept at <= 0.882 ms: "
        "onnxruntime's time less its 0.1 ms session call, less the 2% margin, ratio in "
        "[0.9, 0.9] over 8 pairs)"
    )


def test_an_unclear_cached_verdict_is_timed_again_when_old(install, fake_clock, monkeypatch):
    fast = Plugin("quick", 5, fake_ms=0.97)  # 0.97 against 0.98 needed
    install(fast)
    config = {"backends": ["quick"], **MEASURED}
    real = placement.timing.time_pair
    monkeypatch.setattr(
        placement.timing,
        "time_pair",
        lambda *a, **k: dataclasses.replace(real(*a, **k), interval=(0.9, 1.05)),
    )
    first = byoc.compile(model(), config)
    (m,) = first.plan.placement.measurements
    assert (m.clear, m.kept) == (False, False)
    again = byoc.compile(model(), config)  # young: cached
    assert [m.cached for m in again.plan.placement.measurements] == [True]
    later = time.time() + 8 * 86400
    monkeypatch.setattr(time, "time", lambda: later)
    old = byoc.compile(model(), config)  # a week later: timed again
    assert [m.cached for m in old.plan.placement.measurements] == [False]


def test_remeasure_times_again_instead_of_reading_the_cache(install, fake_clock):
    fast = Plugin("quick", 5, fake_ms=0.5)
    install(fast)
    config = {"backends": ["quick"], **MEASURED}
    byoc.compile(model(), config)
    fast.runtime.calls = 0
    again = byoc.compile(model(), {**config, "compile": {**MEASURED["compile"], "remeasure": True}})
    assert [m.cached for m in again.plan.placement.measurements] == [False]
    assert fast.runtime.calls > 2  # the check runs and the timing runs


class OffRuntime(Runtime):
    def __init__(self, off: float) -> None:
        super().__init__(0.0, 0.5)
        self.off = off

    def run(self, inputs):
        return [np.maximum(-inputs[0], 0) + self.off]


class Careless(Plugin):
    """Rounds 0.01 off unless its ``careful`` option is set; registers it as its ``exact``
    option when ``exact`` is true. With ``hopeless``, careful runs are off too."""

    def __init__(self, exact: bool, hopeless: bool = False) -> None:
        super().__init__("careless", 5, fake_ms=0.5)
        self.exact, self.hopeless = exact, hopeless
        self.made: list[bool] = []

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        register(
            self.name,
            priority=self.priority,
            options={"careful": (bool, False, "round as the direct algorithm does")},
            exact={"careful": True} if self.exact else {},
            description="placement test backend",
        )

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        if backend != self.name:
            return None
        self.made.append(config["careful"])
        return OffRuntime(0.0 if config["careful"] and not self.hopeless else 0.01)


@pytest.mark.parametrize("exact", [False, True])
def test_a_partition_off_with_fast_kernels_is_tried_with_the_exact_ones(install, fake_clock, exact):
    """A partition 0.01 off onnxruntime is compiled once more with its backend's ``exact``
    options when it has some: then kept, running with them, and explain says why; without
    them it goes back to onnxruntime."""
    careless = Careless(exact)
    install(careless)
    compiled = byoc.compile(model(), {"backends": ["careless"], **MEASURED})
    (m,) = compiled.plan.placement.measurements
    if not exact:
        assert careless.made == [False] and "differs from onnxruntime's" in m.failure
        assert backends_of(compiled) == ["onnxruntime"]
        return
    assert careless.made[:2] == [False, True] and m.failure is None and m.kept
    assert backends_of(compiled) == ["careless", "onnxruntime"]
    assert compiled.steps[0].unit.options == {"careful": True}
    np.testing.assert_allclose(compiled.run({"x": X})["y"], expected(), rtol=1e-6)
    text = explain_text(compiled.plan)
    assert "with careful = True (with its faster kernels: output 'r' differs" in text, text


def test_a_partition_off_with_its_exact_kernels_too_is_returned_with_both_reasons(
    install, fake_clock
):
    install(Careless(exact=True, hopeless=True))
    compiled = byoc.compile(model(), {"backends": ["careless"], **MEASURED})
    (m,) = compiled.plan.placement.measurements
    assert backends_of(compiled) == ["onnxruntime"]
    assert m.failure.count("differs from onnxruntime's") == 2, m.failure
    assert "; with careful = True: output 'r'" in m.failure, m.failure


def test_verdicts_name_units_of_the_final_plan_only(install, fake_clock, tmp_path, capsys):
    """By priority, first takes Neg and second the Relu, which loses alone; the search gives
    second the whole region. Three partitions were named second_0 or first_0 along the way
    (PP-OCRv4's detector showed openvino_0 three times, 3, 8 and 330 nodes): the verdicts
    name only the final plan's units as the table does, the others by the round of
    partitioning or the search that measured them, and every name once."""
    install(
        Pieces("first", 9, ["Neg"], {1: 0.5}),
        Pieces("second", 1, ["Neg", "Relu"], {1: 2.0, 2: 0.1}),
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(model().SerializeToString())
    cfg = tmp_path / "byoc.toml"
    cfg.write_text('backends = ["first", "second"]\n[compile]\nplacement = "measured"\n')
    assert main(["partition", str(path), "-c", str(cfg), "-v"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if re.search(r" nodes?\): ", ln)]
    verdicts = [ln.split(" (")[0].strip() for ln in lines]
    assert verdicts == ["round1/first_0", "round1/second_0", "second_0"]
    assert out.splitlines()[2].split()[:3] == ["second_0", "second", "2"]  # the table's unit
    assert "second_0 (2 nodes): kept" in out and "round1/second_0 (1 node): returned" in out
    assert main(["partition", str(path), "-c", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    (unit,) = plan["partitions"]
    assert unit["name"] == unit["measured"]["partition"] == "second_0"
    names = [m["partition"] for m in plan["placement"]["measurements"]]
    assert sorted(names) == ["round1/first_0", "round1/second_0", "second_0"]
    assert main(["explain", str(path), "-c", str(cfg), "-v"]) == 0
    assert (
        "beat first: search: second's partition of 2 node(s) saves 0.9 ms; round1/first_0 saves"
        in capsys.readouterr().out
    )


def test_a_unit_shows_its_own_verdict_where_another_round_measured_the_same_nodes():
    """Two partitions of one backend held the same nodes in different rounds (other inputs
    or outputs): explain's ``measured:`` line of the final unit is its own verdict."""
    lost = Measurement("round1/first_0", "first", ["n"], 2.0, 1.0, False)
    kept = Measurement("first_0", "first", ["n"], 0.5, 1.0, True)
    unit = Partition("first_0", "first", ["n"], ["x"], ["n"], model())
    assert Placement("measured", [lost, kept]).of(unit) is kept
    assert Placement("measured", [lost]).of(unit) is lost  # a verdict named otherwise
