"""``byoc bench``: latency of a compiled model against plain onnxruntime, and where it goes.

Runs alternate in blocks (byoc's, onnxruntime's, then onnxruntime's, byoc's, ...) after a
warm-up, so both see the same machine state; each byoc run is timed per step with
``CompiledModel.profile``. Reports the median and the 10th/90th percentiles.

Both run in this process, so each block starts after an idle gap and an untimed run of its own:
the gap lets the other side's threads stop spinning (a plain onnxruntime session spins between
its runs; OpenMP threads spin after a parallel region), the untimed run wakes this side's. Runs
alternated one by one timed byoc's dnnl partitions while the reference session's threads spun: on
2 cores CRNN (conv + LSTM) read 2.18x onnxruntime, against 1.02x in separate processes. Runs
each after a gap instead measured how a partition starts from idle: OpenMP's fixed split of the
work waits for its slowest thread, and on a shared virtual machine a core that idled can run
slowly for tens of milliseconds (P5 on dnnl 9 to 25 ms a run, onnxruntime 10 ms). The blocks
measure runs that follow runs, as ``bench/zoo.py`` does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from byoc import host
from byoc.compare import with_reference
from byoc.config import load_config
from byoc.context import ConfigLike
from byoc.errors import ConfigError
from byoc.fallback import session_options
from byoc.pipeline import ModelLike
from byoc.progress import ProgressFn


@dataclass(frozen=True)
class Stats:
    """Median and 10th/90th percentiles of some timings, in seconds."""

    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Stats:
        p10, median, p90 = np.percentile(np.asarray(seconds, dtype=np.float64), [10, 50, 90])
        return cls(float(median), float(p10), float(p90))

    def to_json(self) -> dict[str, float]:
        return {"median_ms": self.median * 1e3, "p10_ms": self.p10 * 1e3, "p90_ms": self.p90 * 1e3}


@dataclass(frozen=True)
class StepTiming:
    """The time one unit of the schedule (a partition or a fallback segment) takes; its
    ``nodes`` that compute and the ``constants`` bound inside it, as ``partition`` counts
    them (``Plan.work``)."""

    name: str
    backend: str
    nodes: int
    stats: Stats
    constants: int = 0


@dataclass
class BenchReport:
    """What ``bench`` measured; ``table()`` and ``to_json()`` show it."""

    runs: int
    warmup: int
    byoc: Stats
    onnxruntime: Stats
    steps: list[StepTiming]
    overhead: Stats  # byoc's total minus the sum of its steps: the executor's own time
    others: float | None = None  # the share of the CPUs other processes took meanwhile

    @property
    def ratio(self) -> float:
        """byoc's median latency over onnxruntime's (below 1: byoc is faster)."""
        return self.byoc.median / self.onnxruntime.median if self.onnxruntime.median else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "warmup": self.warmup,
            "byoc": self.byoc.to_json(),
            "onnxruntime": self.onnxruntime.to_json(),
            "ratio": self.ratio,
            "steps": [
                {
                    "name": s.name,
                    "backend": s.backend,
                    "nodes": s.nodes,
                    "constants": s.constants,
                    **s.stats.to_json(),
                    "share": s.stats.median / self.byoc.median if self.byoc.median else 0.0,
                }
                for s in self.steps
            ],
            "overhead": self.overhead.to_json(),
            "others": self.others,
        }

    def table(self) -> str:
        head = [("", "median", "p10", "p90")]
        head += [(k, _ms(s.median), _ms(s.p10), _ms(s.p90)) for k, s in self._totals()]
        lines = _columns(head, right=(1, 2, 3))
        lines.append(
            f"byoc / onnxruntime = {self.ratio:.2f}x (median of {self.runs} runs in alternating "
            f"blocks, after {self.warmup} warm-up)"
        )
        if host.busy(self.others):
            lines.append(
                f"other processes took {self.others:.0%} of the CPUs meanwhile: they slow the "
                "two sides unequally, so run it again on a quieter machine"
            )
        rows = [("unit", "backend", "nodes", "median", "p10", "p90", "share")]
        for s in self.steps:
            share = s.stats.median / self.byoc.median if self.byoc.median else 0.0
            rows.append(
                (
                    s.name,
                    s.backend,
                    str(s.nodes),
                    _ms(s.stats.median),
                    _ms(s.stats.p10),
                    _ms(s.stats.p90),
                    f"{share:.0%}",
                )
            )
        o = self.overhead
        share = o.median / self.byoc.median if self.byoc.median else 0.0
        rows.append(("(executor)", "", "", _ms(o.median), _ms(o.p10), _ms(o.p90), f"{share:.0%}"))
        return "\n".join([*lines, "", *_columns(rows, right=(2, 3, 4, 5, 6))])

    def _totals(self) -> list[tuple[str, Stats]]:
        return [("byoc", self.byoc), ("onnxruntime", self.onnxruntime)]


def bench(
    model: ModelLike,
    config: ConfigLike = None,
    *,
    runs: int = 20,
    warmup: int = 3,
    inputs: Mapping[str, np.ndarray] | None = None,
    progress: ProgressFn | None = None,
    gap: float = 0.05,
    block: int = 5,
) -> BenchReport:
    """Compile ``model``, then time it and plain onnxruntime on the same inputs.

    Inputs are random (``[shapes]``, ``[compare] seed``) unless given. onnxruntime runs the
    whole model with the ``[fallback]`` session options, so thread settings match. ``gap``:
    idle seconds before each block of ``block`` runs back to back (see the module's docstring).
    """
    if runs < 1 or warmup < 0 or block < 1:
        raise ConfigError(
            f"bench needs runs >= 1, warmup >= 0 and block >= 1, got {runs}, {warmup}, {block}"
        )
    cfg = load_config(config)
    _, compiled, feeds, session = with_reference(
        model, cfg, inputs, progress, session_options(cfg.fallback)
    )
    inputs = feeds
    for _ in range(warmup):
        compiled.run(inputs)
        session.run(None, feeds)
    totals: list[float] = []
    reference: list[float] = []
    per_step: list[list[float]] = [[] for _ in compiled.steps]
    mark = host.cpu_mark()
    for b in range(-(-runs // block)):
        count = min(block, runs - b * block)
        for which in ("byoc", "ort") if b % 2 == 0 else ("ort", "byoc"):
            time.sleep(gap)
            if which == "ort":
                session.run(None, feeds)
                for _ in range(count):
                    start = time.perf_counter()
                    session.run(None, feeds)
                    reference.append(time.perf_counter() - start)
                continue
            compiled.run(inputs)
            for _ in range(count):
                start = time.perf_counter()
                _, times = compiled.profile(inputs)
                totals.append(time.perf_counter() - start)
                for k, (_, seconds) in enumerate(times):
                    per_step[k].append(seconds)
    steps = []
    for s, t in zip(compiled.steps, per_step, strict=True):
        nodes = s.unit.nodes
        work = compiled.plan.work(nodes) if compiled.plan is not None else len(nodes)
        steps.append(StepTiming(s.unit.name, s.unit.backend, work, Stats.of(t), len(nodes) - work))
    overhead = [total - sum(t[i] for t in per_step) for i, total in enumerate(totals)]
    others = host.others_since(mark)
    return BenchReport(
        runs, warmup, Stats.of(totals), Stats.of(reference), steps, Stats.of(overhead), others
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _columns(rows: Sequence[tuple[str, ...]], right: tuple[int, ...] = ()) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]
