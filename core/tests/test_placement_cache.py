"""The measurement cache is data with a schema: an entry byoc would not have written (about
other nodes, a field of the wrong type, not a regular file, too large) reads as missing with one
warning, never as a hang or a crash, and the next measurement replaces it. Placement's rounds
of partitioning are bounded: where they cannot end, the model runs on onnxruntime."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import warnings
from pathlib import Path

import byoc
import numpy as np
import pytest
from byoc import compiler, placement, plugins
from byoc.plan import Measurement
from byoc.testing.build import make_model, node

MEASURED = {"compile": {"placement": "measured"}}
X = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)
HANG = 60  # seconds a compile of the tiny model may take before the test calls it a hang


class Runtime:
    """relu(-x); ``fake_ms`` is what the fake clock says it takes (onnxruntime: 1 ms)."""

    def __init__(self, fake_ms: float) -> None:
        self.fake_ms = fake_ms

    def run(self, inputs):
        return [np.maximum(-inputs[0], 0)]


class Plugin:
    """A test backend claiming Neg and Relu."""

    def __init__(self, name: str, priority: int, fake_ms: float, refuse: str = "") -> None:
        self.name, self.priority, self.refuse = name, priority, refuse
        self.runtime = Runtime(fake_ms)

    @byoc.hookimpl
    def byoc_register_backends(self, register):
        register(self.name, priority=self.priority, description="cache test backend")

    @byoc.hookimpl
    def byoc_supported_ops(self, backend, config):
        return {"Neg": None, "Relu": None} if backend == self.name else None

    @byoc.hookimpl
    def byoc_codegen(self, backend, partition, config):
        if backend != self.name:
            return None
        if self.refuse in partition.nodes:
            raise byoc.NodesRefused({self.refuse: "refused by the test"})
        return b"neg-relu"

    @byoc.hookimpl
    def byoc_create_runtime(self, backend, artifact, config):
        return self.runtime if backend == self.name else None


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    root = tmp_path / "placement"
    monkeypatch.setattr(placement.cache, "cache_root", lambda: root)
    return root


@pytest.fixture
def install(monkeypatch, cache):
    """Register test backends on a fresh registry, with timings by decree: a backend takes
    its ``fake_ms`` against onnxruntime's 1 ms, the compiled model 0.5 ms against 1 ms, and
    two plans end to end tie."""

    def time_pair(first, second, args, threshold=None, **_):
        first(args), second(args)
        ms = first.__self__.fake_ms
        other = getattr(second.__self__, "fake_ms", 1.0)
        return placement.Timing(ms, other, (ms / other, ms / other), 8)

    def time_blocks(first, second, args, threshold=None, **_):
        first(args), second(args)
        if not args:  # two compiled models, each running its own feeds
            return placement.Timing(1.0, 1.0, (0.95, 1.05), 6)
        return placement.Timing(0.5, 1.0, (0.5, 0.5), 6)

    monkeypatch.setattr(placement.timing, "time_pair", time_pair)
    monkeypatch.setattr(placement.timing, "time_blocks", time_blocks)
    monkeypatch.setattr(placement.timing, "session_call_ms", lambda config, reg=None: 0.0)

    def install(*found: Plugin) -> None:
        reg = plugins.Registry(only=[])
        for p in found:
            reg._add(p, f"byoc-{p.name}-test", "0.0")
        monkeypatch.setattr(plugins, "_cache", {k: reg for k in (None, *plugins._cache)})

    return install


class Hung(BaseException):
    """Raised where a test hangs: a BaseException, which no ``except Exception`` keeps."""


@pytest.fixture(autouse=True)
def no_hang():
    """A compile that hangs fails the test (SIGALRM interrupts it) instead of blocking."""

    def hung(signum, frame):
        signal.alarm(1)  # again, should it land in a bare except
        raise Hung(f"hung for {HANG} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def model():
    """x -> Neg -> Relu -> Sigmoid: the test backends claim Neg and Relu."""
    return make_model(
        [node("Neg", ["x"], ["n"]), node("Relu", ["n"], ["r"]), node("Sigmoid", ["r"], ["y"])],
        {"x": [1, 4]},
        ["y"],
    )


def check(compiled, backends):
    """``compiled`` runs ``backends`` and computes the model."""
    assert [s.unit.backend for s in compiled.steps] == backends
    want = 1 / (1 + np.exp(-np.maximum(-X, 0)))
    np.testing.assert_allclose(compiled.run({"x": X})["y"], want, rtol=1e-6)


def compiled_warning(config, match: str):
    """Compile once, recording warnings: the compiled model and the warnings about ``match``."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compiled = byoc.compile(model(), config)
    return compiled, [str(w.message) for w in seen if match in str(w.message)]


def entry_of(cache: Path, backend: str) -> Path:
    """The cache file of ``backend``'s measurement."""
    (path,) = [p for p in cache.glob("*.json") if json.loads(p.read_text())["backend"] == backend]
    return path


def cached(compiled) -> list[bool]:
    return [m.cached for m in compiled.plan.placement.measurements]


@pytest.mark.parametrize(
    ("forged", "why"),
    [  # a loss on nodes the model has not: once a compile that hung
        ({"nodes": ["ghost"]}, "it names the node 'ghost', which the model has not"),
        ({"nodes": ["n"]}, "its nodes ['n'] are not the 2 node(s) ['n', 'r']"),
        ({"nodes": ["r", "n"]}, "its nodes ['r', 'n'] are not the 2 node(s) ['n', 'r']"),
        ({"backend": "elsewhere"}, "its backend 'elsewhere' is not slow"),
    ],
)
def test_a_verdict_about_other_nodes_is_a_miss_not_a_hang(install, cache, forged, why):
    install(Plugin("slow", 5, fake_ms=3.0))
    config = {"backends": ["slow"], **MEASURED}
    check(byoc.compile(model(), config), ["onnxruntime"])
    path = entry_of(cache, "slow")
    path.write_text(json.dumps({**json.loads(path.read_text()), **forged}))
    again, said = compiled_warning(config, "measurement cache")
    check(again, ["onnxruntime"])
    assert cached(again) == [False]
    assert len(said) == 1 and f"{path} is ignored: {why}" in said[0], said
    assert cached(byoc.compile(model(), config)) == [True]  # the next measurement replaced it


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("measured_at", "yesterday", "measured_at is 'yesterday', not a finite number"),
        ("measured_at", 1e300, "measured_at is 1e+300, not a finite number from 0 to"),
        ("interval", "wide", "interval is 'wide', not null or [low, high]"),
        ("interval", [0.9, 0.1], "its low end is above its high end"),
        ("interval", [0.5, None], "interval is None, not a finite number"),
        ("samples", True, "samples is True, not a count"),
        ("backend_ms", math.nan, "backend_ms is nan, not a finite number"),
        ("backend_ms", "fast", "backend_ms is 'fast', not a finite number"),
        ("backend_ms", 10**400, "backend_ms is 1000"),
        ("onnxruntime_ms", 1e400, "onnxruntime_ms is inf, not a finite number"),
        ("kept", 1, "kept is 1, not true or false"),
        ("failure", ["no"], "failure is ['no'], not a string"),
        ("cached", True, "it has the field 'cached'"),
        ("nodes", "nr", "nodes is 'nr', not a list of node names"),
        ("clock", "sundial", "clock is 'sundial', not one of wall, cpu"),
    ],
)
def test_a_field_of_the_wrong_type_is_a_miss_with_one_warning(install, cache, field, value, why):
    install(Plugin("quick", 5, fake_ms=0.5))
    config = {"backends": ["quick"], **MEASURED}
    check(byoc.compile(model(), config), ["quick", "onnxruntime"])
    path = entry_of(cache, "quick")
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, field: value}))
    again, said = compiled_warning(config, "measurement cache")
    check(again, ["quick", "onnxruntime"])
    assert cached(again) == [False]
    assert len(said) == 1 and why in said[0], said
    placement.read_entry(path.read_bytes(), nodes=["n", "r"])  # replaced by a good one


@pytest.mark.parametrize(
    ("vetoes", "why"),
    [
        ("first", "vetoes is 'first', not null or {node: {backend: reason}}"),
        (["n", "r"], "vetoes is ['n', 'r'], not null"),
        ({"n": "first"}, "not null or {node: {backend: reason}}"),
        ({"n": {"first": 3}}, "not null or {node: {backend: reason}}"),
        ({"ghost": {"first": "lost"}}, "it names the node 'ghost', which the model has not"),
    ],
)
def test_a_search_entry_of_the_wrong_shape_is_searched_again(install, cache, vetoes, why):
    install(Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3))
    config = {"backends": ["first", "second"], **MEASURED}
    check(byoc.compile(model(), config), ["second", "onnxruntime"])  # the search's choice
    (path,) = cache.glob("search-*.json")
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "vetoes": vetoes}))
    again, said = compiled_warning(config, "measurement cache")
    check(again, ["second", "onnxruntime"])
    assert len(said) == 1 and str(path) in said[0] and why in said[0], said
    assert placement.read_entry(path.read_bytes(), "search").vetoes  # searched and replaced


@pytest.mark.parametrize(
    ("field", "value"), [("measured_at", "now"), ("candidates", ["../../etc/passwd"])]
)
def test_a_search_entry_with_a_field_of_the_wrong_type_is_searched_again(
    install, cache, field, value
):
    install(Plugin("first", 9, fake_ms=0.8), Plugin("second", 1, fake_ms=0.3))
    config = {"backends": ["first", "second"], **MEASURED}
    byoc.compile(model(), config)
    (path,) = cache.glob("search-*.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    again, said = compiled_warning(config, "measurement cache")
    check(again, ["second", "onnxruntime"])
    assert len(said) == 1 and f"{field} is {value!r}" in said[0], said


@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "fifo", "directory"])
def test_an_entry_that_is_not_a_regular_file_is_a_miss_not_a_hang(install, cache, kind):
    install(Plugin("quick", 5, fake_ms=0.5))
    config = {"backends": ["quick"], **MEASURED}
    byoc.compile(model(), config)
    path = entry_of(cache, "quick")
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    again, said = compiled_warning(config, "measurement cache")
    check(again, ["quick", "onnxruntime"])
    assert cached(again) == [False]
    is_ignored = [w for w in said if f"{path} is ignored: it is not a regular file" in w]
    assert len(is_ignored) == 1, said
    if kind != "directory":  # replaced (a directory cannot be: its own warning says so)
        assert path.is_file() and not path.is_symlink()
        assert cached(byoc.compile(model(), config)) == [True]


def test_an_entry_larger_than_the_cap_is_a_miss(install, cache):
    install(Plugin("quick", 5, fake_ms=0.5))
    config = {"backends": ["quick"], **MEASURED}
    byoc.compile(model(), config)
    path = entry_of(cache, "quick")
    text = path.read_text()  # valid JSON still: only its size is wrong
    path.write_text(text + " " * (placement.MAX_ENTRY_BYTES + 1 - len(text)))
    again, said = compiled_warning(config, "measurement cache")
    assert cached(again) == [False]
    assert len(said) == 1 and "more than MAX_ENTRY_BYTES" in said[0], said
    placement.read_entry(path.read_bytes(), nodes=["n", "r"])  # replaced by a good one


@pytest.mark.parametrize("mode", ["static", "measured"])
def test_placement_that_cannot_settle_runs_the_model_on_onnxruntime(install, monkeypatch, mode):
    """A verdict that vetoes nothing the plan holds (a bug, as a cached verdict about other
    nodes once was) cannot change the plan: placement stops, and the model runs on
    onnxruntime, with one line saying why."""
    install(Plugin("slow", 5, fake_ms=3.0))
    verdict = placement.check.verdict

    def about_a_ghost(*args):
        checked = verdict(*args)
        ghost = dataclasses.replace(checked.verdict, nodes=["ghost"], kept=False)
        return dataclasses.replace(checked, verdict=ghost)

    monkeypatch.setattr(placement.check, "verdict", about_a_ghost)
    compiled, said = compiled_warning(
        {"backends": ["slow"], "compile": {"placement": mode}}, "partitioning again"
    )
    check(compiled, ["onnxruntime"])
    assert said == [
        "placement: every partition runs on onnxruntime: round1/slow_0 (slow) lost on nodes its "
        "backend may not claim already, so partitioning again cannot change the plan (a bug in "
        "byoc: please report it with the model)"
    ]
    assert "every partition runs on onnxruntime" in compiled.plan.placement.note


def test_a_check_that_never_keeps_a_plan_runs_the_model_on_onnxruntime(install, monkeypatch):
    install(Plugin("quick", 5, fake_ms=0.5))
    again = placement.Repartition({}, then=lambda plan: plan)  # the same plan, for ever
    never = lambda self, compiled: placement.Verified(compiled.plan.placement, again)  # noqa: E731
    monkeypatch.setattr(placement.Placer, "verify", never)
    compiled, said = compiled_warning({"backends": ["quick"], **MEASURED}, "plans")
    check(compiled, ["onnxruntime"])
    assert said == [
        "placement's check asked for more than 3 plans: running the model on onnxruntime (a bug "
        "in byoc: please report it with the model)"
    ]


def test_refusals_at_codegen_that_never_end_run_the_model_on_onnxruntime(install, monkeypatch):
    """``refuse`` fails a backend that refuses what it may no longer claim; were a refusal to
    veto nothing new, the rounds stop at their bound."""
    install(Plugin("picky", 5, fake_ms=0.5, refuse="r"))
    calls = iter(range(1000))

    def refuse_nothing(vetoes, exc):
        next(calls)
        return vetoes

    monkeypatch.setattr(compiler, "refuse", refuse_nothing)
    config = {"backends": ["picky"], "compile": {"placement": "static"}}
    compiled, said = compiled_warning(config, "refused")
    check(compiled, ["onnxruntime"])
    assert said == [
        "backends refused nodes at codegen in 4 rounds of partitioning: running the model on "
        "onnxruntime (a bug in byoc: please report it with the model)"
    ]
    assert next(calls) == 4


def test_an_entry_reads_back_as_it_was_written(tmp_path):
    """Every field of a Measurement survives the cache (``read_entry`` knows each one)."""
    m = Measurement("dnnl_0", "dnnl", ["n", "r"], 0.4, 1.0, True, call_ms=0.01)
    m.interval, m.samples, m.clear, m.measured_at = (0.3, 0.5), 12, False, 1.7e9
    m.failure, m.margin, m.precision, m.precision_note = None, 0.02, "bf16", "in bf16"
    m.others, m.disturbed = 0.05, False
    cache = placement.MeasurementCache(tmp_path)
    cache.put("a" * 64, m)
    back = cache.get("a" * 64, nodes=["n", "r"], backends=["dnnl"], model={"n", "r", "y"})
    assert back is not None and back.cached and dataclasses.replace(back, cached=False) == m
    raw = (tmp_path / f"{'a' * 64}.json").read_bytes()
    assert placement.read_entry(raw) == placement.read_entry(json.loads(raw)) == m


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\xff\xfe{", "it is not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "it is not JSON"),
        (b"[]", "it holds [], not a JSON object"),
        (b'{"partition": "p"}', "it has no 'backend'"),
        ({1: 2}, "it has the field 1"),
    ],
)
def test_read_entry_says_what_is_wrong_and_raises_nothing_else(raw, why):
    with pytest.raises(placement.BadEntry, match=f"^{re.escape(why)}"):
        placement.read_entry(raw)
    with pytest.raises(placement.BadEntry):
        placement.read_entry(raw, "search")
