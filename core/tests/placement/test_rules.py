"""Placement's rules (``byoc.placement.rules``), one test per rule: each is a pure function of
measurements that returns a verdict, and changes nothing it is given."""

from __future__ import annotations

import dataclasses

import pytest
from byoc.placement import rules
from byoc.plan import Measurement

MARGIN = 0.02


def timed(
    backend_ms: float,
    onnxruntime_ms: float = 1.0,
    interval: tuple[float, float] | None = None,
    *,
    nodes: list[str] | None = None,
    call_ms: float = 0.0,
    disturbed: bool = False,
) -> Measurement:
    """A partition timed against onnxruntime (not judged yet)."""
    m = Measurement("p_0", "b", nodes or ["n"], backend_ms, onnxruntime_ms, False)
    return dataclasses.replace(m, call_ms=call_ms, interval=interval, disturbed=disturbed)


@pytest.mark.parametrize(
    ("m", "verdict"),
    [
        (timed(0.5, interval=(0.45, 0.55)), (True, True)),  # clear of 0.98: a win
        (timed(1.15, interval=(1.1, 1.2)), (False, True)),  # clear of 0.98: a loss
        # unclear, its median passes, its interval clear of onnxruntime's time: kept
        (timed(0.95, interval=(0.9, 0.99)), (True, False)),
        # unclear, and its interval reaches onnxruntime's time: a 5% median is not yet a win
        (timed(0.95, interval=(0.9, 1.02)), (False, False)),
        # no interval: the median against onnxruntime's time less the session call it saves
        (timed(0.9, call_ms=0.1), (False, True)),
        (timed(0.85, call_ms=0.1), (True, True)),
        # other processes took the CPUs meanwhile: no evidence, however large the win
        (timed(0.1, interval=(0.1, 0.1), disturbed=True), (False, False)),
    ],
)
def test_wins_keeps_a_partition_that_beats_onnxruntime_by_the_margin(m, verdict):
    assert rules.wins(m, MARGIN) == verdict


def test_judge_returns_a_judged_copy_and_leaves_the_measurement_as_it_was():
    m = timed(0.5, interval=(0.45, 0.55))
    judged = rules.judge(m, MARGIN)
    assert (judged.kept, judged.clear, judged.margin) == (True, True, MARGIN)
    assert (m.kept, m.margin) == (False, 0.0)  # the record it was given is unchanged
    assert "kept at <= 0.98 ms" in judged.summary()


def test_margin_of_a_verdict_timed_on_one_thread_is_at_least_a_tenth():
    """A 7% win is kept in wall time, not on one thread in CPU time (one thread is not two);
    a 20% win is kept either way, and a margin above the least stands."""
    assert rules.margin_of("wall", MARGIN) == MARGIN
    assert rules.margin_of("cpu", MARGIN) == rules.ONE_THREAD_MARGIN
    assert rules.margin_of("cpu", 0.25) == 0.25
    near, clear = timed(0.93, interval=(0.91, 0.95)), timed(0.8, interval=(0.78, 0.82))
    assert rules.judge(near, MARGIN).kept
    assert not rules.judge(dataclasses.replace(near, clock="cpu"), MARGIN).kept
    assert rules.judge(dataclasses.replace(clear, clock="cpu"), MARGIN).kept


def test_saved_ms_is_onnxruntime_time_less_the_call_and_the_backend_time():
    m = timed(0.5, call_ms=0.1)
    assert rules.saved_ms(m) == pytest.approx(0.4)
    # on another onnxruntime time of the region, the backend keeps its ratio
    assert rules.saved_ms(m, basis=2.0) == pytest.approx(2.0 * 0.5 - 0.1)


def test_saved_range_is_the_saving_at_each_end_of_the_ratio_interval():
    m = timed(0.5, interval=(0.4, 0.6), call_ms=0.1)
    assert rules.saved_range(m) == pytest.approx((0.3, 0.5))
    assert rules.saved_range(timed(0.5, call_ms=0.1)) == pytest.approx((0.4, 0.4))


def test_near_means_sharing_most_of_the_union_of_nodes():
    five = [f"n{i}" for i in range(5)]
    assert rules.near(timed(1, nodes=five), timed(1, nodes=[*five, "x"]))  # 5 of 6
    assert rules.near(timed(1, nodes=five), timed(1, nodes=five[:4]))  # 4 of 5: NEAR itself
    assert not rules.near(timed(1, nodes=five), timed(1, nodes=[*five[:4], "x"]))  # 4 of 6


def test_bases_compare_candidates_for_one_region_on_one_onnxruntime_time():
    """bert-enc: dnnl's encoder read onnxruntime at 6.31 ms, OpenVINO's at 5.29; on their
    shared basis OpenVINO's better ratio ranks it first, as timed dnnl's saving was larger."""
    region = [f"n{i}" for i in range(10)]
    dnnl = timed(0.74 * 6.31, 6.31, nodes=region)
    ov = timed(0.71 * 5.29, 5.29, nodes=[*region, "gather"])
    apart = timed(1.0, 2.0, nodes=["other"])
    on = rules.bases([dnnl, ov, apart])
    assert on[id(dnnl)] == on[id(ov)] == pytest.approx((6.31 + 5.29) / 2)
    assert on[id(apart)] == 2.0
    assert rules.saved_ms(dnnl) > rules.saved_ms(ov)
    assert rules.saved_ms(ov, on[id(ov)]) > rules.saved_ms(dnnl, on[id(dnnl)])


def test_clearly_better_needs_the_least_saved_above_the_most_saved():
    fast = timed(0.4, interval=(0.35, 0.45))  # saves 0.55 to 0.65
    close = timed(0.5, interval=(0.42, 0.58))  # saves 0.42 to 0.58
    slow = timed(0.7, interval=(0.65, 0.75))  # saves 0.25 to 0.35
    assert rules.clearly_better([fast], [slow], {})
    assert not rules.clearly_better([fast], [close], {})  # the intervals overlap
    assert not rules.clearly_better([slow], [fast], {})


def test_gains_needs_more_than_the_margin_of_the_plans_onnxruntime_time():
    plan = [timed(0.5, 1.0), timed(0.5, 1.0)]  # 2 ms on onnxruntime: the margin is 0.04 ms
    assert rules.gains([timed(0.45, 1.0)], [plan[0]], plan, {}, MARGIN)  # 0.05 more
    assert not rules.gains([timed(0.47, 1.0)], [plan[0]], plan, {}, MARGIN)  # 0.03 more


def test_unexplained_doubts_a_whole_model_win_its_partitions_cannot_make():
    whole = timed(7.5, 10.0, interval=(0.74, 0.76))
    small = timed(0.95, 1.0)  # saves 0.05 ms: less than 2% of 10 ms
    why = rules.unexplained(whole, [small], MARGIN)
    assert why is not None and "partitions save 0.05 ms, less than the 2% margin" in why
    assert rules.unexplained(whole, [timed(0.5, 1.0)], MARGIN) is None  # saves 0.5 ms
    assert rules.unexplained(whole, [small, None], MARGIN) is None  # one without a verdict
