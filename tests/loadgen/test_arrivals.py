"""Open-loop schedules: reproducible, at the asked rate, with the asked variability."""

from __future__ import annotations

import numpy as np
import pytest

from headway.loadgen.arrivals import gaps, schedule


def test_constant_schedule_is_exact() -> None:
    times = schedule(200, 2.0, "constant")
    assert len(times) == 400
    assert times[0] == 0.0
    np.testing.assert_allclose(np.diff(times), 1 / 200)
    assert len(schedule(3, 1.0, "constant")) == 3
    assert len(schedule(10, 0.0, "constant")) == 0


@pytest.mark.parametrize(("arrival", "cv"), [("poisson", None), ("gamma", 0.5), ("gamma", 3.0)])
def test_schedule_is_seeded_sorted_and_inside_the_duration(arrival: str, cv: float | None) -> None:
    a = schedule(500, 4.0, arrival, cv, seed=7)
    assert np.array_equal(a, schedule(500, 4.0, arrival, cv, seed=7))
    assert not np.array_equal(a, schedule(500, 4.0, arrival, cv, seed=8))
    assert np.all(np.diff(a) >= 0)
    assert a[0] >= 0 and a[-1] < 4.0
    # The schedule is the running sum of the seeded gaps, cut at the duration.
    first = gaps(500, 10, arrival, cv, seed=7)
    np.testing.assert_allclose(a[:10], np.cumsum(first))


@pytest.mark.parametrize(("arrival", "cv"), [("poisson", None), ("gamma", 0.25), ("gamma", 2.0)])
def test_rate_and_coefficient_of_variation(arrival: str, cv: float | None) -> None:
    rate, count = 1000.0, 200_000
    g = gaps(rate, count, arrival, cv, seed=1)
    want_cv = 1.0 if cv is None else cv
    # Means within 5 standard errors; the CV within 3%.
    assert abs(g.mean() - 1 / rate) < 5 * (want_cv / rate) / np.sqrt(count)
    assert g.std() / g.mean() == pytest.approx(want_cv, rel=0.03)
    times = schedule(rate, 100.0, arrival, cv, seed=1)
    assert abs(len(times) - rate * 100) < 5 * want_cv * np.sqrt(rate * 100)


@pytest.mark.parametrize(
    ("rate", "arrival", "cv", "message"),
    [
        (0, "poisson", None, "rate must be a positive"),
        (-5, "poisson", None, "rate must be a positive"),
        (float("inf"), "poisson", None, "rate must be a positive"),
        (10, "uniform", None, "unknown arrival"),
        (10, "poisson", 2.0, "only applies to gamma"),
        (10, "gamma", None, "gamma arrivals need"),
        (10, "gamma", 0.0, "gamma arrivals need"),
    ],
)
def test_bad_arguments_say_what_to_fix(
    rate: float, arrival: str, cv: float | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        schedule(rate, 1.0, arrival, cv)
