"""Estimates under overload: neither locked in by a few slow runs nor summed pessimistically.

The overload scenario's case (bench/RESULTS.md, issue 11): after the warm-up sweep each size
above batch 1 had one run, and one slow run (a stall, or a new shape's first call) became the
estimate of its size and, as the bound of every unmeasured size below it, of half the sizes; the
rows queued ahead of a request were predicted at the high percentile of each batch, as if every
batch would stall. Both refused requests that the queue would have served on time. Times are
seconds, written as milliseconds (`ms(10)`); the clock is injected.
"""

from __future__ import annotations

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.jobs import Job
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import DeadlineUnmeetable
from tests.control.helpers import ms, scheduler


def mlp(rows: int) -> float:
    """What a batch of a compute-bound MLP takes: 1 ms a call, 0.1 ms a row."""
    return ms(1) + ms(0.1) * rows


def server(clock: ManualClock) -> Scheduler:
    return scheduler(clock, {1: ["mlp"]}, max_batch=64)


def request(clock: ManualClock, rows: int, deadline_in: float) -> Job:
    now = clock.now()
    return Job("mlp", {"x": np.zeros((rows, 4))}, rows, now, now + deadline_in)


def swept(s: Scheduler, *, stalled: int) -> None:
    """The warm-up: three runs of batch 1, then one of each size 2 ... 64, the one of `stalled`
    rows slowed to 30 ms."""
    for _ in range(3):
        s.estimator.observe("mlp", 1, mlp(1))
    for size in (2, 4, 8, 16, 32, 64):
        s.estimator.observe("mlp", size, ms(30) if size == stalled else mlp(size))


def test_one_slow_sweep_run_of_the_largest_size_does_not_refuse_big_requests(
    clock: ManualClock,
) -> None:
    s = server(clock)
    swept(s, stalled=64)
    # 48 rows take 5.8 ms: between 32 and 64 rows on the line the other sizes draw, not the
    # stalled run's 30 ms
    assert s.estimator.estimate("mlp", 48) == pytest.approx(mlp(48))
    s.submit(request(clock, 48, ms(20)))  # refused before: "the request needs ~30.00 ms"
    [dispatch] = s.poll().dispatches
    assert dispatch.rows == 48


def test_a_slow_run_of_a_middle_size_is_bounded_by_the_line_of_its_neighbours(
    clock: ManualClock,
) -> None:
    s = server(clock)
    swept(s, stalled=32)
    assert s.estimator.estimate("mlp", 32) == pytest.approx(mlp(32))
    assert s.estimator.estimate("mlp", 24) == pytest.approx(mlp(24))
    s.submit(request(clock, 24, ms(10)))  # refused before: 24 rows bounded by 32's 30 ms


def test_real_batches_refine_the_estimate_both_ways(clock: ManualClock) -> None:
    s = server(clock)
    swept(s, stalled=64)
    for _ in range(3):  # the size runs three times: its own window is trusted now
        s.estimator.observe("mlp", 64, ms(30))
    assert s.estimator.estimate("mlp", 64) == pytest.approx(ms(30))
    with pytest.raises(DeadlineUnmeetable):  # really 30 ms: refused, as it should be
        s.submit(request(clock, 64, ms(20)))
    s2 = server(clock)
    swept(s2, stalled=64)
    for _ in range(10):  # really 7.4 ms: the stall leaves the window (its p99 is its maximum)
        s2.estimator.observe("mlp", 64, mlp(64))
    assert s2.estimator.estimate("mlp", 64) == pytest.approx(mlp(64))


def test_no_size_is_estimated_above_a_bigger_trusted_one(clock: ManualClock) -> None:
    s = server(clock)
    swept(s, stalled=0)
    for _ in range(3):  # size 40 caught a stall three times; 64 ran three times at 7.4 ms
        s.estimator.observe("mlp", 40, ms(30))
        s.estimator.observe("mlp", 64, mlp(64))
    assert s.estimator.estimate("mlp", 40) == pytest.approx(mlp(64))  # more rows never faster
    assert s.estimator.estimate("mlp", 48) == pytest.approx(mlp(64))


def test_rows_queued_ahead_count_what_a_batch_usually_takes(clock: ManualClock) -> None:
    s = server(clock)
    swept(s, stalled=0)
    for took in [mlp(64)] * 9 + [ms(20)]:  # one stall in the last ten full batches
        s.estimator.observe("mlp", 64, took)
    assert s.estimator.estimate("mlp", 64) == pytest.approx(ms(20))
    assert s.estimator.typical("mlp", 64) == pytest.approx(mlp(64))
    for _ in range(128):  # two full batches ahead, due before the new request
        s.submit(request(clock, 1, ms(30)))
    # two rounds as they usually go (7.4 ms each) and the request's own at its p99 (20 ms):
    # 34.8 ms, within 40; refused before (three rounds at 20 ms: 60 ms)
    s.submit(request(clock, 1, ms(40)))
    assert s.queue_length("mlp") == 129
    with pytest.raises(DeadlineUnmeetable, match="128 rows queued ahead"):
        s.submit(request(clock, 1, ms(34)))


def test_a_batch_sent_ahead_does_not_count_its_wait_behind_the_one_before_as_round_trip(
    clock: ManualClock,
) -> None:
    """Under overload full batches are sent to a busy worker (`full_batch_ahead`) and wait
    there for the batch before them. That wait is the earlier batch's run: counted as the
    round trip, which every prediction adds, it made every batch look ~a run longer (the
    overload scenario at 2x: p90 7.3 ms against 3.4 ms for batches sent to an idle worker),
    so admission refused, and the drop times dropped, requests that would have made it."""
    s = scheduler(clock, {1: ["mlp"]}, max_batch=4)
    for size in (1, 2, 3, 4):
        for _ in range(3):
            s.estimator.observe("mlp", size, mlp(size))
    for _ in range(4):
        s.submit(request(clock, 1, ms(50)))
    [first] = s.poll().dispatches
    for _ in range(4):
        s.submit(request(clock, 1, ms(50)))
    [ahead] = s.poll().dispatches  # a full batch, sent while the first runs
    assert first.rows == ahead.rows == 4
    for dispatch in (first, ahead):  # each runs 1.4 ms, heard 0.5 ms after it ends
        clock.advance(mlp(4) + ms(0.5))
        s.complete(dispatch.id, mlp(4))
    assert s.durations.overhead == pytest.approx(ms(0.5))


def overloaded_queue(clock: ManualClock, fresh_in: float) -> Scheduler:
    """Eight requests due in `fresh_in`, then two read late (they waited to be read), which
    only a batch of two can serve in time (1.25 ms left; two rows take 1.2 ms, four 1.4 ms):
    admitted, they go to the head of the queue."""
    s = scheduler(clock, {1: ["mlp"]}, max_batch=4)
    for size in (1, 2, 3, 4):
        for _ in range(3):
            s.estimator.observe("mlp", size, mlp(size))
    for _ in range(8):
        s.submit(request(clock, 1, fresh_in))
    for _ in range(2):
        s.submit(request(clock, 1, ms(1.25)))
    return s


def test_under_overload_a_full_batch_runs_instead_of_the_stale_head(clock: ManualClock) -> None:
    """EDF's collapse (the overload scenario at 2x: batches of 3-45 rows sized to the stale
    head while 200+ rows waited): the ten rows cannot all run by the last deadline, so the
    two stale ones, which only a batch of two could serve, are dropped, and both batches of
    fresh ones (1.4 ms each, due in 3 ms) run in time; serving the stale pair first made
    four fresh ones late."""
    s = overloaded_queue(clock, ms(3))
    decisions = s.poll()
    first, second = decisions.dispatches  # the second sent ahead: a full batch is queued
    assert [r.deadline for r, _ in decisions.rejected] == [ms(1.25), ms(1.25)]
    assert s.counters.dropped == 2
    for dispatch in (first, second):
        assert dispatch.rows == 4 and all(r.deadline == ms(3) for r in dispatch.requests)
    assert second.earliest + mlp(4) <= ms(3)  # it starts when the first ends, and is in time


def test_a_queue_that_can_all_run_in_time_serves_its_stale_head_first(clock: ManualClock) -> None:
    s = overloaded_queue(clock, ms(50))
    decisions = s.poll()
    assert decisions.dispatches[0].rows == 2 and not decisions.rejected  # the stale pair
