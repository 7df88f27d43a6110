"""Duration estimates: rolling windows per (model, batch size), predicted by a high percentile."""

from __future__ import annotations

import math

import pytest

from headway.control.estimates.profiles import LatencyEstimator, percentile


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert percentile(values, 50) == 5.0
    assert percentile(values, 99) == 10.0  # 10 samples: p99 is the maximum
    assert percentile(values, 100) == 10.0
    assert percentile(values, 0) == 1.0
    assert percentile(list(reversed(values)), 90) == 9.0  # order of input does not matter


@pytest.mark.parametrize(
    ("q", "n", "rank"), [(55, 100, 55), (7, 100, 7), (28, 25, 7), (56, 25, 14)]
)
def test_percentile_exact_ranks_do_not_round_up(q: float, n: int, rank: int) -> None:
    # 55 / 100 * 100 is 55.00000000000001 in floating point: the rank must still be 55, not 56.
    assert percentile([float(v) for v in range(1, n + 1)], q) == float(rank)


def test_percentile_of_nothing_raises() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 99)


def test_no_estimate_without_measurements() -> None:
    estimator = LatencyEstimator()
    assert estimator.estimate("m", 1) is None
    assert not estimator.profiled("m")
    assert estimator.largest_measured("m") == 0


def test_estimate_is_a_high_percentile_of_the_window() -> None:
    estimator = LatencyEstimator(window=10, quantile=90.0)
    for ms in (1, 2, 3, 4, 5, 6, 7, 8, 9, 50):
        estimator.observe("m", 4, ms / 1000)
    assert estimator.estimate("m", 4) == pytest.approx(0.009)  # p90 of 10: the 9th
    estimator_p99 = LatencyEstimator(window=10, quantile=99.0)
    for ms in (1, 2, 3, 4, 5, 6, 7, 8, 9, 50):
        estimator_p99.observe("m", 4, ms / 1000)
    assert estimator_p99.estimate("m", 4) == pytest.approx(0.050)


def test_window_rolls_old_measurements_out() -> None:
    estimator = LatencyEstimator(window=3, quantile=99.0)
    for seconds in (0.100, 0.010, 0.010):
        estimator.observe("m", 1, seconds)
    assert estimator.estimate("m", 1) == pytest.approx(0.100)
    estimator.observe("m", 1, 0.010)  # pushes the slow one out
    assert estimator.estimate("m", 1) == pytest.approx(0.010)


def test_unmeasured_size_is_interpolated_between_the_measured_sizes_around_it() -> None:
    estimator = LatencyEstimator()
    estimator.observe("m", 2, 0.020)
    estimator.observe("m", 8, 0.080)
    assert estimator.estimate("m", 1) == pytest.approx(0.020)  # below the smallest: bounded by it
    assert estimator.estimate("m", 3) == pytest.approx(0.030)
    assert estimator.estimate("m", 5) == pytest.approx(0.050)
    assert estimator.estimate("m", 8) == pytest.approx(0.080)


def test_size_beyond_the_largest_measured_is_extrapolated_per_row() -> None:
    estimator = LatencyEstimator()
    estimator.observe("m", 4, 0.040)
    assert estimator.estimate("m", 8) == pytest.approx(0.080)
    assert estimator.estimate("m", 6) == pytest.approx(0.060)
    assert estimator.largest_measured("m") == 4


def test_new_measurements_change_cached_estimates() -> None:
    estimator = LatencyEstimator(window=10, quantile=99.0)
    estimator.observe("m", 4, 0.040)
    assert estimator.estimate("m", 2) == pytest.approx(0.040)  # bounded by size 4 (cached now)
    estimator.observe("m", 2, 0.015)
    assert estimator.estimate("m", 2) == pytest.approx(0.015)
    estimator.observe("m", 4, 0.100)
    estimator.observe("m", 4, 0.100)  # size 4 measured three times: its window is trusted
    assert estimator.estimate("m", 8) == pytest.approx(0.200)


def test_the_ceiling_of_a_bigger_trusted_size_follows_its_measurements() -> None:
    estimator = LatencyEstimator(window=3, quantile=99.0, min_samples=3)

    def measure(size: int, seconds: float) -> None:
        for _ in range(3):
            estimator.observe("m", size, seconds)

    measure(2, 0.030)
    measure(8, 0.020)  # more rows never run faster: size 2 takes no more than 8
    assert estimator.estimate("m", 2) == pytest.approx(0.020)
    measure(8, 0.050)  # 8 got slower: the ceiling rises, and 2 is its own again
    assert estimator.estimate("m", 2) == pytest.approx(0.030)
    measure(16, 0.010)  # a bigger size, faster still, bounds both below it
    assert (estimator.estimate("m", 2), estimator.estimate("m", 8)) == pytest.approx((0.010, 0.010))
    measure(4, 0.005)  # a size between them bounds only those not bigger than it
    assert estimator.estimate("m", 2) == pytest.approx(0.005)
    assert estimator.estimate("m", 8) == pytest.approx(0.010)


def test_models_are_independent_and_can_be_forgotten() -> None:
    estimator = LatencyEstimator()
    estimator.observe("a", 1, 0.010)
    estimator.observe("b", 1, 0.500)
    assert estimator.estimate("a", 1) == pytest.approx(0.010)
    estimator.forget("a")
    assert estimator.estimate("a", 1) is None
    assert estimator.estimate("b", 1) == pytest.approx(0.500)


def test_profiled_needs_min_samples_at_one_size() -> None:
    estimator = LatencyEstimator(min_samples=3)
    for size in (1, 2, 4):
        estimator.observe("m", size, 0.01)  # three samples, but at three sizes
    assert not estimator.profiled("m")
    estimator.observe("m", 2, 0.01)
    estimator.observe("m", 2, 0.01)
    assert estimator.profiled("m")


def test_snapshot_lists_estimates_per_measured_size() -> None:
    estimator = LatencyEstimator(quantile=99.0)
    estimator.observe("m", 4, 0.04)
    estimator.observe("m", 1, 0.01)
    estimator.observe("m", 1, 0.02)
    snapshot = estimator.snapshot()
    assert list(snapshot["m"]) == [1, 4]
    assert snapshot["m"][1] == pytest.approx(0.02)
    assert snapshot["m"][4] == pytest.approx(0.04)


def test_window_must_hold_something() -> None:
    with pytest.raises(ValueError, match="window"):
        LatencyEstimator(window=0)


def test_trim_leaves_out_the_slowest_sample_once_three_are_kept() -> None:
    estimator = LatencyEstimator(window=10, quantile=99.0, min_samples=1, trim=1)
    estimator.observe("m", 1, 0.010)
    assert estimator.estimate("m", 1) == 0.010  # one sample: it is all there is
    estimator.observe("m", 1, 0.200)  # a load slowed by a neighbour
    assert estimator.estimate("m", 1) == 0.200  # two: no telling which is the outlier
    estimator.observe("m", 1, 0.012)
    assert estimator.estimate("m", 1) == 0.012  # three: the slowest is left out
    estimator.observe("m", 1, 0.300)  # a second outlier within the window counts again
    assert estimator.estimate("m", 1) == 0.200
    assert estimator.snapshot() == {"m": {1: 0.200}}
    assert estimator.across(100.0) == 0.200


def test_trim_drops_the_outlier_when_it_leaves_the_window() -> None:
    estimator = LatencyEstimator(window=3, quantile=99.0, min_samples=1, trim=1)
    for seconds in (0.200, 0.010, 0.011):
        estimator.observe("m", 1, seconds)
    assert estimator.estimate("m", 1) == 0.011
    estimator.observe("m", 1, 0.009)  # 0.200 leaves the window of 3
    assert estimator.estimate("m", 1) == 0.010


def test_without_trim_the_estimate_is_the_plain_percentile() -> None:
    estimator = LatencyEstimator(window=10, quantile=99.0)
    for seconds in (0.010, 0.012, 0.200):
        estimator.observe("m", 1, seconds)
    assert estimator.estimate("m", 1) == 0.200


@pytest.mark.parametrize("trim", [-1, 5])
def test_trim_must_leave_most_of_the_window(trim: int) -> None:
    with pytest.raises(ValueError, match="trim"):
        LatencyEstimator(window=10, trim=trim)


def test_recent_is_a_percentile_of_the_last_pool_measurements_of_any_model() -> None:
    estimator = LatencyEstimator(window=10, min_samples=1, pool=4)
    assert estimator.recent(90) is None
    for model, seconds in (("a", 0.5), ("b", 0.010), ("c", 0.020), ("a", 0.030)):
        estimator.observe(model, 1, seconds)
    assert estimator.recent(100) == 0.5
    assert estimator.recent(50) == 0.020
    estimator.observe("d", 1, 0.040)  # the slow one (the oldest) leaves the pool
    assert estimator.recent(100) == 0.040
    assert estimator.estimate("a", 1) == 0.5  # a model's own window keeps it


def test_without_a_pool_recent_is_none() -> None:
    estimator = LatencyEstimator()
    estimator.observe("a", 1, 0.010)
    assert estimator.recent(90) is None


@pytest.mark.parametrize(
    ("seed", "options"),
    [(seed, {"window": 5, "min_samples": 3}) for seed in range(4)]
    + [(seed, {"window": 10, "min_samples": 1, "trim": 1, "pool": 20}) for seed in range(2)],
)  # the INFER estimator's shape, and the LOAD estimator's (one sample trusted, trim, pool)
def test_estimates_kept_across_measurements_equal_those_computed_afresh(
    seed: int, options: dict[str, int]
) -> None:
    # Estimates asked for stay cached across a measurement that changes no window's estimate
    # and no size's trust: after every measurement of a random history, each size's estimate
    # equals that of an estimator given the same history and asked for nothing before.
    import random

    rng = random.Random(seed)
    history: list[tuple[int, float]] = []
    kept = LatencyEstimator(**options)
    for _ in range(300):
        size = rng.choice([1, 2, 4, 8, 9, 16, 32])
        seconds = round(0.001 * size**0.5 * rng.choice([1.0, 1.0, 1.1, 1.3, 3.0]), 6)
        history.append((size, seconds))
        kept.observe("m", size, seconds)
        afresh = LatencyEstimator(**options)
        for s, t in history:
            afresh.observe("m", s, t)
        sizes = range(1, 41)
        assert [kept.estimate("m", s) for s in sizes] == [afresh.estimate("m", s) for s in sizes]
        assert kept.across() == afresh.across() and kept.recent(90) == afresh.recent(90)
        windows = kept._models["m"]  # each ceiling as defined: the least trusted estimate above
        trusted = [s for s in windows.sizes if len(windows.by_size[s]) >= kept.min_samples]
        assert windows.ceilings == [
            min([windows.estimates[s] for s in trusted if s >= size], default=math.inf)
            for size in windows.sizes
        ]
