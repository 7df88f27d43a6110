"""The rate search decides which open-loop rate to try next from the trials so far: here against
servers described by a function of the rate, without sockets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from headway.loadgen.rate_search import (
    GENERATOR_LATE,
    MISSED,
    PASSED,
    RateSearch,
    Trial,
    judge,
)

SLO_MS = 50.0


def figures(attainment: float, own_late_p99_ms: float = 0.5) -> dict[str, Any]:
    """The part of `report.summarize`'s figures that a verdict reads."""
    return {
        "slo_ms": SLO_MS,
        "slo_attainment": attainment,
        "own_send_lateness_ms": {"p50": 0.1, "p99": own_late_p99_ms},
    }


def server(capacity: float, generator_limit: float = float("inf")) -> Callable[[float], Trial]:
    """A server that answers everything within the SLO up to `capacity` req/s and a share
    capacity/rate above it, measured by a generator that is late above `generator_limit`."""

    def measure(rate: float) -> Trial:
        late = 20.0 if rate > generator_limit else 0.5
        return judge(rate, figures(min(1.0, capacity / rate), late))

    return measure


def search(start: float, measure: Callable[[float], Trial], **options: Any) -> RateSearch:
    rates = RateSearch(start, **options)
    while (rate := rates.next_rate()) is not None:
        rates.record(measure(rate))
    return rates


def test_a_trial_passes_with_enough_answers_in_time_from_a_generator_on_time() -> None:
    assert judge(100.0, figures(0.95)).verdict == PASSED
    assert judge(100.0, figures(0.9)).verdict == PASSED
    assert judge(100.0, figures(0.89)).verdict == MISSED
    assert judge(100.0, figures(None)).verdict == MISSED  # type: ignore[arg-type]
    # late sends (over a tenth of the SLO) invalidate a trial, however good its goodput
    assert judge(100.0, figures(1.0, own_late_p99_ms=5.1)).verdict == GENERATOR_LATE
    assert judge(100.0, figures(1.0, own_late_p99_ms=5.0)).verdict == PASSED
    assert judge(100.0, figures(0.5), share=0.5).passed
    with pytest.raises(ValueError, match="SLO"):
        judge(100.0, {**figures(1.0), "slo_ms": None})


def test_from_above_it_halves_then_bisects_to_within_the_tolerance() -> None:
    rates = search(1000.0, server(capacity=300.0), max_trials=20)
    tried = [round(t.rate, 1) for t in rates.trials]
    assert tried[:3] == [1000.0, 500.0, 250.0]  # halving until one passes
    assert [t.passed for t in rates.trials[:3]] == [False, False, True]
    assert rates.limited_by == "server"
    sustained, failed = rates.sustained, rates.failed
    assert sustained is not None and failed is not None
    # 90% of the requests in time up to capacity / 0.9
    assert 300.0 <= sustained <= 333.4 < failed.rate <= sustained * 1.05
    assert rates.next_rate() is None


def test_from_below_it_doubles_until_a_trial_fails() -> None:
    rates = search(10.0, server(capacity=300.0), max_trials=20)
    tried = [round(t.rate) for t in rates.trials]
    assert tried[:7] == [10, 20, 40, 80, 160, 320, 640]
    assert rates.limited_by == "server"
    assert rates.sustained is not None and 300.0 <= rates.sustained <= 333.4


def test_out_of_trials_it_keeps_the_bracket_it_has() -> None:
    rates = search(1000.0, server(capacity=300.0), max_trials=4)
    assert len(rates.trials) == 4
    assert rates.limited_by == "trials"
    assert rates.sustained is not None and rates.failed is not None
    assert rates.sustained < rates.failed.rate
    # every trial it kept as sustained passed; the failure bounding it failed
    assert any(t.rate == rates.sustained and t.passed for t in rates.trials)


def test_every_trial_passing_is_reported_as_a_lower_bound() -> None:
    rates = search(100.0, server(capacity=1e9), max_trials=3)
    assert [t.rate for t in rates.trials] == [100.0, 200.0, 400.0]
    assert rates.failed is None and rates.sustained == 400.0
    assert rates.limited_by == "trials"


def test_a_generator_that_cannot_keep_up_ends_the_search_as_its_limit() -> None:
    rates = search(100.0, server(capacity=1e9, generator_limit=500.0), max_trials=20)
    assert rates.limited_by == "generator"
    assert rates.failed is not None and rates.failed.verdict == GENERATOR_LATE
    assert rates.sustained is not None and 475.0 <= rates.sustained <= 500.0


def test_nothing_passing_stops_at_the_floor() -> None:
    rates = search(8.0, server(capacity=0.0), floor=1.0)
    assert [t.rate for t in rates.trials] == [8.0, 4.0, 2.0, 1.0]
    assert rates.sustained is None
    assert rates.limited_by == "floor"


def test_a_pass_above_a_failure_is_not_taken_as_sustained() -> None:
    """The machine's noise: a lower rate failed after a higher one passed. The answer must be a
    rate with no failure below it."""
    rates = RateSearch(200.0, max_trials=10)
    rates.record(judge(200.0, figures(0.95)))
    rates.record(judge(400.0, figures(0.5)))
    assert rates.next_rate() == pytest.approx(282.84, abs=0.01)
    rates.record(judge(150.0, figures(0.5)))  # below the passing 200
    assert rates.failed is not None and rates.failed.rate == 150.0
    assert rates.sustained is None
    assert rates.next_rate() == 75.0


@pytest.mark.parametrize(
    ("start", "options", "message"),
    [
        (0.0, {}, "first rate"),
        (float("inf"), {}, "first rate"),
        (10.0, {"max_trials": 0}, "at least one trial"),
        (10.0, {"tolerance": 0.0}, "tolerance"),
    ],
)
def test_bad_settings_say_what_is_wrong(
    start: float, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RateSearch(start, **options)
