"""Estimates that cannot lock themselves in: the warm-up sweep, the line beyond the largest
measured size, and probes after a refusal that the measurements do not confirm.

The issue's case: the demo's 50-row request to a forest that answers 150 rows in ~100 ms was
refused for ever ("needs ~4424.85 ms"), because batch 1 alone was measured and 50 rows were
estimated per row from it; refused sizes never run, so never get measured. Times are seconds,
written as milliseconds (`ms(10)`); the clock is injected.
"""

from __future__ import annotations

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.estimates.profiles import LatencyEstimator
from headway.control.jobs import Job
from headway.control.scheduling.probes import PROBE_PRIORITY, next_sweep_size
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import DeadlineUnmeetable
from tests.control.helpers import Tag, ms, scheduler


def forest(rows: int) -> float:
    """What a batch of the issue's forest takes: mostly per call, a little per row."""
    return ms(40) + ms(0.4) * rows


def request(clock: ManualClock, rows: int, deadline_in: float, **options: int) -> Job:
    now = clock.now()
    inputs = {"x": np.zeros((rows, 4))}
    return Job("forest", inputs, rows, now, now + deadline_in, **options)  # type: ignore[arg-type]


def server(clock: ManualClock, *models: str) -> Scheduler:
    return scheduler(clock, {1: list(models or ("forest",))}, max_batch=32)


def run(s: Scheduler, clock: ManualClock, took: float) -> None:
    """Let the worker run what the scheduler sends next, taking `took` seconds."""
    [dispatch] = s.poll().dispatches
    clock.advance(took)
    s.complete(dispatch.id, took)


def warm_up_at_batch_one(s: Scheduler) -> None:
    for _ in range(3):
        s.estimator.observe("forest", 1, forest(1))


def test_beyond_the_largest_size_the_estimate_follows_the_line_through_the_two_largest() -> None:
    estimator = LatencyEstimator()
    estimator.observe("m", 16, ms(46))
    estimator.observe("m", 32, ms(53))
    # 53 ms + 18 rows x 7/16 ms, not 53 x 50 / 32 = 83 ms
    assert estimator.estimate("m", 50) == pytest.approx(ms(53 + 18 * 7 / 16))
    estimator.observe("m", 64, ms(40))  # a faster run of more rows: the line does not fall
    assert estimator.estimate("m", 100) == pytest.approx(ms(40))


def test_the_fastest_a_size_can_run_is_its_largest_measured_size_below() -> None:
    estimator = LatencyEstimator()
    assert estimator.fastest("m", 4) is None
    for seconds in (ms(12), ms(10), ms(30)):
        estimator.observe("m", 2, seconds)
    assert estimator.fastest("m", 1) is None  # nothing that small measured: no bound
    assert estimator.fastest("m", 2) == estimator.fastest("m", 50) == pytest.approx(ms(10))


def test_the_warm_up_sweep_lets_the_demo_request_in(clock: ManualClock) -> None:
    s = server(clock)
    warm_up_at_batch_one(s)
    with pytest.raises(DeadlineUnmeetable):  # per row from batch 1: 50 x 40 ms
        s.submit(request(clock, 50, 1.0))
    rows: int | None = 1
    swept = []
    while rows := next_sweep_size(s.durations, "forest", rows, max_batch=32, slo=1.0):
        s.submit(request(clock, rows, 30.0, priority=PROBE_PRIORITY))
        run(s, clock, forest(rows))
        swept.append(rows)
    assert swept == [2, 4, 8, 16, 32]
    s.submit(request(clock, 50, 1.0))  # ~60 ms now, along the line through 16 and 32 rows
    assert s.durations.service_time("forest", 50) == pytest.approx(forest(50), rel=0.01)


def test_the_sweep_stops_at_a_size_that_takes_half_the_slo(clock: ManualClock) -> None:
    s = server(clock)
    s.estimator.observe("forest", 1, ms(300))
    assert next_sweep_size(s.durations, "forest", 1, max_batch=32, slo=1.0) == 2
    s.estimator.observe("forest", 2, ms(510))
    assert next_sweep_size(s.durations, "forest", 2, max_batch=32, slo=1.0) is None
    s.estimator.observe("forest", 16, ms(100))
    assert next_sweep_size(s.durations, "forest", 16, max_batch=20, slo=1.0) == 20
    assert next_sweep_size(s.durations, "forest", 20, max_batch=20, slo=1.0) is None
    # in the frontend's own process (the inline engine) a run holds up every request
    s.estimator.observe("forest", 4, ms(4))
    assert next_sweep_size(s.durations, "forest", 4, max_batch=32, slo=1.0, inline=True) == 8
    s.estimator.observe("forest", 8, ms(6))
    assert next_sweep_size(s.durations, "forest", 8, max_batch=32, slo=1.0, inline=True) is None


def test_a_refusal_on_a_size_never_measured_is_an_occasion_to_measure(clock: ManualClock) -> None:
    s = server(clock)
    warm_up_at_batch_one(s)
    demo = request(clock, 50, 1.0)
    with pytest.raises(DeadlineUnmeetable, match="needs ~2020"):
        s.submit(demo)
    assert s.probe_size(demo) == 32  # 40 ms at batch 1 could fit: measure, up to max_batch
    assert s.probe_size(demo) is None  # once: the probe is on its way
    s.submit(request(clock, 32, 30.0, priority=PROBE_PRIORITY))
    run(s, clock, forest(32))
    s.submit(request(clock, 50, 1.0))  # on the line through 1 and 32 rows: ~60 ms, admitted


def test_a_huge_refused_request_is_reached_by_doubling_probes(clock: ManualClock) -> None:
    s = server(clock)
    warm_up_at_batch_one(s)
    huge = request(clock, 100_000, 1.0)
    with pytest.raises(DeadlineUnmeetable):
        s.submit(huge)
    assert s.probe_size(huge) == 32  # never one unbounded run of zeros
    s.submit(request(clock, 32, 30.0, priority=PROBE_PRIORITY))
    run(s, clock, forest(32))
    # the next probe waits ten times the last one's estimate (32 x 40.4 ms, per row from 1)
    clock.set(12.0)
    assert s.probe_size(request(clock, 100_000, 1.0)) is None
    clock.set(13.0)
    assert s.probe_size(request(clock, 100_000, 1.0)) == 64


def test_a_refusal_that_even_the_fastest_run_confirms_measures_nothing(clock: ManualClock) -> None:
    s = server(clock)
    for _ in range(3):
        s.estimator.observe("forest", 1, ms(600))
    hopeless = request(clock, 1, ms(1))  # 20 of these a second must not keep the worker busy
    with pytest.raises(DeadlineUnmeetable):
        s.submit(hopeless)
    assert s.probe_size(hopeless) is None


def test_probes_of_an_inflated_estimate_take_a_tenth_of_the_worker_at_most(
    clock: ManualClock,
) -> None:
    s = server(clock)
    for _ in range(9):
        s.estimator.observe("forest", 1, ms(100))
    s.estimator.observe("forest", 1, 4.0)  # one run slowed by a neighbour: the p99 of 10
    wanted = []
    for i in range(30):  # a refused request every 100 ms for 3 s
        clock.set(i * ms(100))
        refused = request(clock, 1, ms(500))
        with pytest.raises(DeadlineUnmeetable):
            s.submit(refused)
        wanted.append(s.probe_size(refused) is not None)
    # a 100 ms probe (the 4 s is the outlier it is for) at most once a second: 10% of the worker
    assert [i for i, w in enumerate(wanted) if w] == [0, 10, 20]


def test_probes_wait_behind_queued_work_of_any_model(clock: ManualClock) -> None:
    s = server(clock, "forest", "fast")
    for key, seconds in (("forest", ms(40)), ("fast", ms(1))):
        for _ in range(3):
            s.estimator.observe(key, 1, seconds)
    s.submit(request(clock, 8, 30.0, priority=PROBE_PRIORITY))
    now = clock.now()
    s.submit(Job("fast", {"x": np.zeros((1, 4))}, 1, now, now + ms(150), receiver=Tag("query")))
    [first] = s.poll().dispatches
    assert first.model == "fast" and [r.receiver for r in first.requests] == ["query"]


def test_simultaneous_requests_to_a_slow_model_are_batched_not_refused(
    clock: ManualClock,
) -> None:
    """The issue's 8 requests at once to a 0.2 s model (1 s SLO): 5 were refused, estimated
    per row from batch 1, that one batch would have served."""
    s = server(clock)
    for _ in range(2):  # its warm-up runs (the first, cold, is not a measurement)
        s.estimator.observe("forest", 1, 0.2)
    rows: int | None = 1
    while rows := next_sweep_size(s.durations, "forest", rows, max_batch=32, slo=1.0):
        s.submit(request(clock, rows, 30.0, priority=PROBE_PRIORITY))
        run(s, clock, 0.2)
    burst = [request(clock, 1, 1.0) for _ in range(8)]
    for r in burst:
        s.submit(r)  # none refused
    answered = 0
    while True:
        decisions = s.poll()
        assert not decisions.rejected
        if not decisions.dispatches:
            break
        [dispatch] = decisions.dispatches
        clock.advance(0.2)
        s.complete(dispatch.id, 0.2)
        answered += sum(clock.now() <= r.deadline for r in dispatch.requests)
    assert answered == 8
