"""The tuner on synthetic traces with an injected clock: when it scales, to what, and why."""

from __future__ import annotations

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.planning.envelope import envelope, window_lengths
from headway.planning.plan_file import PlanFile, PlannedStage
from headway.planning.tuner import Tuner

RATE = 8.0  # queries per second the plan was made for (exact in binary: 1/8 s apart)
LENGTHS = window_lengths(0.5)  # 0.5, 1, 2, ... 32, 60 s


def steady(start: float, end: float, rate: float) -> np.ndarray:
    return start + np.arange(int((end - start) * rate)) / rate


def plan() -> PlanFile:
    """One stage: 2 replicas of 8 queries/s each at 50% planned utilisation."""
    stage = PlannedStage("m", "m", "cpu1", 1, 2, 1.0, throughput_qps=8.0, utilisation=0.5)
    return PlanFile("app", 100.0, RATE, envelope(steady(0, 60, RATE), LENGTHS), (stage,))


def replay(times: np.ndarray, until: float, tick: float = 0.5) -> tuple[Tuner, list[float]]:
    """Feed `times` to a tuner, deciding every `tick` s; returns it and its replicas per tick."""
    clock = ManualClock()
    tuner = Tuner(plan(), clock)
    counts = []
    cursor = 0
    for now in np.arange(tick, until + 1e-9, tick):
        while cursor < len(times) and times[cursor] < now:
            clock.set(float(times[cursor]))
            tuner.arrived()
            cursor += 1
        clock.set(float(now))
        tuner.tick()
        counts.append(tuner.replicas["m"])
    return tuner, counts


def test_traffic_as_planned_changes_nothing() -> None:
    tuner, counts = replay(steady(0, 120, RATE), 120)
    assert set(counts) == {2} and tuner.changes == []


def test_a_3x_spike_scales_up_at_once_then_down_after_the_hold_down() -> None:
    spike = np.repeat(steady(60, 70, RATE), 3)  # three at each instant: exactly 3x
    times = np.concatenate([steady(0, 60, RATE), spike, steady(70, 180, RATE)])
    tuner, counts = replay(times, 180)
    at = {round(t, 1): c for t, c in zip(np.arange(0.5, 180.01, 0.5), counts, strict=True)}
    assert at[59.5] == 2
    # within the first decision of the spike: lambda' = 3 lambda, k = ceil(3 * 8 / (8 * 0.5))
    assert at[60.5] == 6
    first = tuner.changes[0]
    assert (first.before, first.after, first.direction) == (2, 6, "up")
    assert first.at == pytest.approx(60.5) and "over the plan's 8.0" in first.reason
    # still 6 well after the spike: the hold-down, then the trailing 30 s still see it
    assert at[95.0] == 6
    # back to the plan once the minute-long window no longer holds the spike either
    assert at[180.0] == 2
    downs = [c for c in tuner.changes if c.direction == "down"]
    assert downs and all("trailing 30 s" in c.reason for c in downs)
    assert downs[0].at >= 70 + 15  # not before the hold-down after the last change
    # never down and up again: each scale-down is final for this trace
    assert [c.direction for c in tuner.changes] == ["up"] + ["down"] * len(downs)


def test_a_drop_in_traffic_scales_below_the_plan_but_not_below_one() -> None:
    times = np.concatenate([steady(0, 60, RATE), steady(60, 200, RATE / 8)])
    tuner, counts = replay(times, 200)
    assert counts[-1] == 1
    assert all(c.after >= 1 for c in tuner.changes)


def test_a_scale_down_keeps_a_margin_so_one_more_query_does_not_scale_up_again() -> None:
    # after a 2x spike, 1.5x the plan's rate: exactly 3 replicas' worth (k = ceil(2 * 1.5));
    # then one query more in a 0.5 s window (1.75x) and, last, the plan's rate again
    times = np.sort(
        np.concatenate(
            [
                steady(0, 60, RATE),
                np.repeat(steady(60, 70, RATE), 2),
                steady(70, 240, RATE * 1.5),
                [170 + 1 / 48],
                steady(240, 360, RATE),
            ]
        )
    )
    tuner, counts = replay(times, 360)
    at = {round(t, 1): c for t, c in zip(np.arange(0.5, 360.01, 0.5), counts, strict=True)}
    # without a margin: 4 -> 3 once the trailing 30 s show 1.5x, and 3 -> 4 at the extra query
    directions = [c.direction for c in tuner.changes]
    assert directions[0] == "up" and "up" not in directions[1:]
    assert at[60.5] == 4 and at[239.5] == 4  # held through 1.5x and the extra query
    assert at[360.0] == 2  # and back to the plan once traffic is
    assert all(c.at >= 240 and "trailing 30 s" in c.reason for c in tuner.changes[1:])


def test_no_scale_down_within_the_hold_down_after_a_scale_up() -> None:
    clock = ManualClock()
    tuner = Tuner(plan(), clock, hold_down=40.0)
    for now in steady(0, 60, RATE):
        clock.set(float(now))
        tuner.arrived()
    clock.set(60.0)
    tuner.arrived(10)  # a burst: up
    assert tuner.tick()[0].direction == "up"
    for now in np.arange(60.5, 100.0, 0.5):  # silence, but within the hold-down
        clock.set(float(now))
        assert tuner.tick() == []
    clock.set(100.5)
    assert tuner.tick()[0].direction == "down"
