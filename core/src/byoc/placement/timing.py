"""Timing statistics: two runners timed against each other (in pairs, or in alternating
blocks) until the ~95% interval of the median of their ratio is clear of a threshold, and
what other processes took of the CPUs meanwhile. A timing they disturbed (more than
``host.BUSY`` of the CPUs) is taken once more after a pause (``undisturbed``); still
disturbed, it is no evidence in wall time. Timed on one thread in its CPU time
(``time_pair(on_one_thread=True)``: each side built to run on the calling thread alone,
``ONE_THREAD_FALLBACK``), both sides' work reads as on a quiet machine, whatever others run."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from byoc import host, plugins
from byoc.plan import FALLBACK, Partition
from byoc.plugins import Registry
from byoc.units import compile_unit

Runner = Callable[[list[Any]], Any]
WHOLE_BUDGET = (4.0, 15.0)  # seconds for the whole-model check: room for ~12 rounds, within these
PAUSE = 0.5  # seconds to let a burst of theirs pass before timing once more
EXTEND = 2.0  # an unclear timing may take up to this many times its budget while narrowing
# onnxruntime settings that run a session on the calling thread alone (a backend's: its
# ``threads`` option, set to 1)
ONE_THREAD_FALLBACK = {
    "intra_op_num_threads": 1,
    "inter_op_num_threads": 1,
    "allow_spinning": False,
}


@dataclass
class Timing:
    """Two things timed against each other: median milliseconds of each, the ~95% interval of
    the median of their ratio (first / second), and how many samples made it."""

    first_ms: float
    second_ms: float
    interval: tuple[float, float]
    samples: int
    others: float | None = None  # the share of the CPUs other processes took meanwhile
    clock: str = "wall"  # "cpu": CPU time of the calling thread (each side on one thread)


def onnxruntime_threads(fallback: Mapping[str, Any]) -> int:
    """The intra-op threads an onnxruntime session with ``fallback``'s settings runs (0: one
    per CPU this process may use)."""
    n = int(fallback.get("intra_op_num_threads", 0) or 0)
    return n if n > 0 else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def whole_budget(once: float) -> float:
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


def ratios(a: list[float], b: list[float]) -> list[float]:
    """Each sample's ratio, first over second."""
    return [p / q for p, q in zip(a, b, strict=True)]


def narrowing(r: list[float], threshold: float) -> bool:
    """Whether twice as many samples would likely clear ``threshold`` of the median's interval:
    the interval narrows as one over the root of the samples, so when the median is more than
    ``1/sqrt(2)`` of the interval's half on the threshold's side from it. A near tie (the
    median at the threshold) is not worth more time; a clear win whose first samples were
    noisy is."""
    lo, hi = median_interval(r)
    median = statistics.median(r)
    half = hi - median if median < threshold else median - lo
    return abs(median - threshold) > half / math.sqrt(2)


def sequential(
    sample: Callable[[int], tuple[float, float]],
    threshold: Callable[[float, float], float],
    *,
    min_samples: int,
    budget: float,
    clock: str = "wall",
) -> Timing:
    """Draw samples (seconds of first and second) until the interval of their median ratio
    lies on one side of ``threshold(first's median, second's median)`` or ``budget`` seconds
    are spent, after at least ``min_samples`` (three when one is more than twice as fast).
    Past the budget, up to EXTEND times it, while twice the samples would likely clear the
    threshold (``narrowing``)."""
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
            r = ratios(a, b)
            lo, hi = median_interval(r)
            t = threshold(statistics.median(a) * 1e3, statistics.median(b) * 1e3)
            spent = time.perf_counter() - start
            if hi < t or lo > t or spent > EXTEND * budget:
                break
            if spent > budget and not narrowing(r, t):
                break
    return Timing(
        statistics.median(a) * 1e3,
        statistics.median(b) * 1e3,
        median_interval(ratios(a, b)),
        n,
        host.others_since(mark),
        clock,
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
    on_one_thread: bool = False,
) -> Timing:
    """``first(args)`` against ``second(args)`` in pairs, run in turn (ABBA order) after
    ``warmup`` runs each, until the ratio is clearly on one side of the threshold
    (``sequential``). ``on_one_thread``: both run on the calling thread alone, timed in its
    CPU time (``thread_time``)."""
    clock = time.thread_time if on_one_thread else time.perf_counter
    for _ in range(warmup):
        first(args)
        second(args)

    def pair(i: int) -> tuple[float, float]:
        spent = [0.0, 0.0]
        for k in (0, 1) if i % 2 == 0 else (1, 0):
            t0 = clock()
            (first if k == 0 else second)(args)
            spent[k] = clock() - t0
        return spent[0], spent[1]

    kind = "cpu" if on_one_thread else "wall"
    return sequential(pair, threshold, min_samples=min_pairs, budget=budget, clock=kind)


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
    rounds let one burst make the verdict unclear. Six rounds to stop: all six on one side of
    the threshold, as likely as 1 in 64 by chance."""

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


def busy(timing: Timing) -> bool:
    """Whether other processes took more than ``host.BUSY`` of the CPUs while timed in wall
    time (in CPU time on one thread, what they take is not counted)."""
    return timing.clock == "wall" and host.busy(timing.others)


def undisturbed(timed: Callable[[], Timing], again: bool = True) -> Timing:
    """``timed()``, and (``again``) once more after a pause when other processes took more
    than ``host.BUSY`` of the CPUs meanwhile (a burst passes). A neighbour slows the two sides
    unequally (OpenMP threads that share each primitive wait for the slowest of them, and slow
    down far more than onnxruntime's pool). Once a timing of a compile stayed disturbed the
    machine is busy: ``Ledger.undisturbed`` times nothing twice."""
    timing = timed()
    if again and busy(timing):
        time.sleep(PAUSE)
        timing = timed()
    return timing
