"""Batch sizing: the largest batch meeting the budget, or Clipper's AIMD without a profile."""

from __future__ import annotations

import pytest

from headway.control.estimates.batch_size import AIMD, largest_batch
from headway.control.estimates.profiles import LatencyEstimator


def profiled(table: dict[int, float]) -> LatencyEstimator:
    estimator = LatencyEstimator(window=10, quantile=99.0, min_samples=3)
    for size, seconds in table.items():
        for _ in range(3):
            estimator.observe("m", size, seconds)
    return estimator


def test_aimd_starts_at_one_and_adds_one_per_met_batch() -> None:
    aimd = AIMD(max_batch=8)
    assert aimd.size == 1
    sizes = []
    for _ in range(4):
        aimd.on_batch(met_deadlines=True)
        sizes.append(aimd.size)
    assert sizes == [2, 3, 4, 5]


def test_aimd_never_grows_past_max_batch() -> None:
    aimd = AIMD(max_batch=3)
    for _ in range(10):
        aimd.on_batch(met_deadlines=True)
    assert aimd.limit == 3.0
    assert aimd.size == 3


def test_aimd_backs_off_by_ten_percent_on_a_miss() -> None:
    aimd = AIMD(max_batch=32)
    for _ in range(9):
        aimd.on_batch(met_deadlines=True)
    assert aimd.limit == 10.0
    aimd.on_batch(met_deadlines=False)
    assert aimd.limit == pytest.approx(9.0)
    aimd.on_batch(met_deadlines=False)
    assert aimd.limit == pytest.approx(8.1)
    assert aimd.size == 8
    aimd.on_batch(met_deadlines=True)
    assert aimd.limit == pytest.approx(9.1)


def test_aimd_never_drops_below_one() -> None:
    aimd = AIMD(max_batch=32)
    for _ in range(50):
        aimd.on_batch(met_deadlines=False)
    assert aimd.limit == 1.0
    assert aimd.size == 1


def test_without_a_profile_aimd_decides() -> None:
    estimator = LatencyEstimator(min_samples=3)
    estimator.observe("m", 16, 0.001)  # one sample: not profiled yet
    aimd = AIMD(max_batch=32)
    for _ in range(4):
        aimd.on_batch(met_deadlines=True)
    assert largest_batch(estimator, "m", budget=10.0, cap=32, aimd=aimd) == 5
    assert largest_batch(estimator, "m", budget=10.0, cap=3, aimd=aimd) == 3


@pytest.mark.parametrize(
    ("budget", "expected"),
    [(0.100, 16), (0.050, 8), (0.045, 8), (0.031, 5), (0.021, 3), (0.012, 1), (0.001, 1)],
)
def test_largest_batch_meeting_the_budget(budget: float, expected: int) -> None:
    # sizes between measured ones are interpolated: 5 rows 30 ms, 3 rows 20 ms, 9 rows 50.6 ms
    estimator = profiled({1: 0.010, 2: 0.015, 4: 0.025, 8: 0.045, 16: 0.090})
    aimd = AIMD(max_batch=64)  # its limit (1) must not matter once profiled
    assert largest_batch(estimator, "m", budget=budget, cap=16, aimd=aimd) == expected


def test_largest_batch_respects_the_cap() -> None:
    estimator = profiled({1: 0.001, 64: 0.002})
    assert largest_batch(estimator, "m", budget=1.0, cap=12, aimd=AIMD(64)) == 12
    assert largest_batch(estimator, "m", budget=1.0, cap=1, aimd=AIMD(64)) == 1


def test_overhead_counts_against_the_budget() -> None:
    estimator = profiled({1: 0.010, 2: 0.015, 4: 0.025, 8: 0.045})
    aimd = AIMD(max_batch=8)
    assert largest_batch(estimator, "m", budget=0.050, cap=8, aimd=aimd) == 8
    # 40 ms left for the run: 6 rows, interpolated between 4 and 8, take 35 ms; 7 take 40 ms
    assert largest_batch(estimator, "m", budget=0.050, cap=8, aimd=aimd, overhead=0.011) == 6


def test_a_smaller_size_estimated_above_a_bigger_one_does_not_bound_the_batch() -> None:
    # size 4's window caught a stall; 8 rows were measured since at 8 ms: a batch of 8 fits a
    # 10 ms budget, and scanning up from 2 must not stop at 4 (8 would then never run again)
    estimator = profiled({1: 0.002, 2: 0.003, 4: 0.050})
    estimator.observe("m", 8, 0.008)
    aimd = AIMD(max_batch=8)
    assert largest_batch(estimator, "m", budget=0.010, cap=8, aimd=aimd) == 8
