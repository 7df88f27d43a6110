"""The scheduler, worked by hand with a manual clock: what runs where, when, and what is refused.

Estimates are seeded with `scheduler.estimator.observe` (three samples per size, so a model counts
as profiled); times are in seconds, written as milliseconds (`ms(10)`) for legibility.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD, UNLOAD, Dispatch
from headway.control.jobs import Job
from headway.control.request import priority_level
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import DeadlineUnmeetable, Overloaded
from tests.control.helpers import ms, request, scheduler, seed, tags


def submit(s: Scheduler, *requests: Job) -> None:
    for r in requests:
        s.submit(r)


# -- dispatch: idle workers, one action each, control first -----------------------------------


def test_dispatches_only_to_idle_workers_hosting_the_model(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"], 2: ["n"]})
    submit(s, request(clock, "r1", 1.0))
    decisions = s.poll()
    assert [(d.worker, d.kind, d.model, tags(d)) for d in decisions.dispatches] == [
        (1, INFER, "m", ["r1"])
    ]
    first = decisions.dispatches[0]
    assert first.rows == 1
    assert first.sent_at == 0.0

    submit(s, request(clock, "r2", 1.0))
    assert s.poll().dispatches == []  # worker 1 is busy and worker 2 does not host m
    assert s.placement.busy_workers() == 1
    assert s.queue_length("m") == 1

    clock.advance(ms(1))
    assert s.complete(first.id, ms(1)) is first
    assert s.placement.busy_workers() == 0
    [second] = s.poll().dispatches
    assert (second.worker, tags(second)) == (1, ["r2"])


def test_one_action_per_worker_at_a_time(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m", "n"]})
    submit(s, request(clock, "m1", ms(500), model="m"), request(clock, "n1", ms(200), model="n"))
    [first] = s.poll().dispatches
    assert (first.model, tags(first)) == ("n", ["n1"])  # the more urgent model goes first
    assert s.poll().dispatches == []
    assert s.queue_length("m") == 1
    s.complete(first.id, ms(1))
    [second] = s.poll().dispatches
    assert (second.model, tags(second)) == ("m", ["m1"])


def test_control_actions_run_before_inference(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    submit(s, request(clock, "r1", 1.0))
    load = s.control(1, LOAD, "n", payload="n")
    unload = s.control(1, UNLOAD, "old")
    [first] = s.poll().dispatches
    assert first is load
    assert (first.worker, first.kind, first.model, first.payload) == (1, LOAD, "n", "n")
    assert s.poll().dispatches == []  # the worker is loading: nothing else runs there
    s.complete(load.id, ms(50))
    [second] = s.poll().dispatches
    assert second is unload
    s.complete(unload.id, ms(1))
    [third] = s.poll().dispatches
    assert (third.kind, tags(third)) == (INFER, ["r1"])


def test_control_action_waits_for_the_action_in_flight(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    submit(s, request(clock, "r1", 1.0))
    [infer] = s.poll().dispatches
    load = s.control(1, LOAD, "n")
    submit(s, request(clock, "r2", 1.0))
    assert s.poll().dispatches == []
    s.complete(infer.id, ms(1))
    assert s.poll().dispatches == [load]  # the LOAD goes before the queued r2
    s.complete(load.id, ms(1))
    assert [tags(d) for d in s.poll().dispatches] == [["r2"]]


def test_control_only_goes_to_its_worker(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"], 2: ["m"]})
    load = s.control(2, LOAD, "n")
    submit(s, request(clock, "r1", 1.0))
    decisions = s.poll().dispatches
    assert {(d.worker, d.kind) for d in decisions} == {(1, INFER), (2, LOAD)}
    assert load in decisions


# -- batch size: profiles, AIMD, batch delay ---------------------------------------------------

TABLE = {1: ms(10), 2: ms(15), 4: ms(25), 8: ms(45), 16: ms(90)}


@pytest.mark.parametrize(
    ("budget", "rows"),
    [(ms(100), 16), (ms(50), 8), (ms(31), 5), (ms(21), 3), (ms(12), 1)],
)
def test_batch_is_the_largest_predicted_to_meet_the_earliest_deadline(
    clock: ManualClock, budget: float, rows: int
) -> None:
    s = scheduler(clock, {1: ["m"]}, place=False, max_batch=16)
    seed(s, "m", TABLE)
    submit(s, *(request(clock, f"r{i}", budget) for i in range(20)))
    s.placed("m", 1)
    [dispatch] = s.poll().dispatches
    assert dispatch.rows == rows
    assert tags(dispatch) == [f"r{i}" for i in range(rows)]
    assert dispatch.expected == pytest.approx(s.estimator.estimate("m", rows))
    assert dispatch.expected <= budget
    assert s.queue_length("m") == 20 - rows


def test_batch_takes_the_earliest_deadlines(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, place=False, max_batch=16)
    seed(s, "m", TABLE)
    order = list(range(20))
    random.Random(7).shuffle(order)
    submit(s, *(request(clock, f"r{i}", ms(50 + i)) for i in order))
    s.placed("m", 1)
    [dispatch] = s.poll().dispatches
    assert tags(dispatch) == [f"r{i}" for i in range(8)]  # budget 50 ms: 8 rows (45 ms)


def test_batch_counts_rows_not_requests(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, place=False, max_batch=16)
    seed(s, "m", TABLE)
    submit(
        s,
        request(clock, "a", ms(50), rows=3),
        request(clock, "b", ms(51), rows=3),
        request(clock, "c", ms(52), rows=3),  # 9 rows would need 90 ms
        request(clock, "d", ms(53), rows=1),
    )
    s.placed("m", 1)
    [dispatch] = s.poll().dispatches
    assert (tags(dispatch), dispatch.rows) == (["a", "b"], 6)


def test_batch_meets_the_earliest_deadline_in_it_across_priority_levels(
    clock: ManualClock,
) -> None:
    s = scheduler(clock, {1: ["m"]}, place=False, max_batch=8)
    seed(s, "m", {1: ms(10), 2: ms(40)})
    urgent_level = request(clock, "p1", ms(100), priority=priority_level(1))
    tight = request(clock, "tight", ms(30))  # default level, but the earlier deadline
    submit(s, urgent_level, tight)
    s.placed("m", 1)
    [dispatch] = s.poll().dispatches
    # Two rows take 40 ms: together they would finish after `tight`'s deadline.
    assert tags(dispatch) == ["p1"]
    assert s.queue_length("m") == 1


def test_without_a_profile_aimd_grows_and_backs_off_on_a_miss(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, min_samples=1000, max_batch=8)  # never profiled
    submit(s, *(request(clock, f"r{i}", 1.0) for i in range(9)))
    sizes = []
    for _ in range(3):
        [dispatch] = s.poll().dispatches
        sizes.append(dispatch.rows)
        clock.advance(ms(1))
        s.complete(dispatch.id, ms(1))  # in time: +1
    assert sizes == [1, 2, 3]
    assert s.model_statistics("m").aimd_limit == 4.0

    submit(s, *(request(clock, f"late{i}", ms(5)) for i in range(4)))
    [late] = s.poll().dispatches
    assert tags(late) == ["late0", "late1", "late2", "late3"]  # earliest deadlines, 4 rows
    clock.advance(ms(10))
    s.complete(late.id, ms(10))  # finished after their deadlines: x0.9
    stats = s.model_statistics("m")
    assert stats.aimd_limit == pytest.approx(3.6)
    assert (stats.batches, stats.late_batches) == (4, 1)
    [after] = s.poll().dispatches
    assert after.rows == 3


def test_lone_request_is_not_held_without_batch_delay(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=8, batch_delay=0.0)
    seed(s, "m", TABLE)
    submit(s, request(clock, "r1", 1.0))
    decisions = s.poll()
    assert [tags(d) for d in decisions.dispatches] == [["r1"]]
    assert decisions.wakeup is None  # nothing left waiting


def test_batch_delay_holds_a_small_batch_until_its_head_waited_long_enough(
    clock: ManualClock,
) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=4, batch_delay=ms(5))
    seed(s, "m", {1: ms(1), 4: ms(2)})
    submit(s, request(clock, "r1", 1.0))
    decisions = s.poll()
    assert decisions.dispatches == []
    assert decisions.wakeup == pytest.approx(ms(5))
    clock.advance(ms(2))
    submit(s, request(clock, "r2", 1.0))
    decisions = s.poll()
    assert decisions.dispatches == []
    assert decisions.wakeup == pytest.approx(ms(5))  # r1 arrived first: its delay counts
    clock.set(ms(5))
    [dispatch] = s.poll().dispatches
    assert tags(dispatch) == ["r1", "r2"]


def test_a_wakeup_at_time_zero_is_a_real_time() -> None:
    clock = ManualClock(start=-ms(10))  # a monotonic clock may read anything, 0.0 included
    s = scheduler(clock, {1: ["m"]}, max_batch=4, batch_delay=ms(10))
    submit(s, request(clock, "r1", 1.0))
    decisions = s.poll()
    assert decisions.dispatches == []
    assert decisions.wakeup == 0.0  # not the later drop time


def test_batch_delay_ends_once_the_batch_is_full(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=2, batch_delay=ms(5))
    seed(s, "m", {1: ms(1), 2: ms(2)})
    submit(s, request(clock, "r1", 1.0), request(clock, "r2", 1.0))
    [dispatch] = s.poll().dispatches
    assert tags(dispatch) == ["r1", "r2"]


def test_batch_delay_never_holds_a_request_into_rejection(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=8, batch_delay=ms(50))
    seed(s, "m", {1: ms(5)})
    submit(s, request(clock, "r1", ms(20)))  # must start by 15 ms: 50 ms of delay is too long
    decisions = s.poll()
    assert decisions.rejected == []
    assert [tags(d) for d in decisions.dispatches] == [["r1"]]


# -- rejection: at submit, and of hopeless requests while queued --------------------------------


def busy(s: Scheduler, clock: ManualClock, worker_model: str = "m") -> Dispatch:
    """Occupy the model's only worker with a request that has time to spare."""
    submit(s, request(clock, "blocker", 10.0, model=worker_model))
    [dispatch] = s.poll().dispatches
    return dispatch


def test_hopeless_request_is_dropped_at_deadline_minus_estimate(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    seed(s, "m", {1: ms(10)})
    blocker = busy(s, clock)
    submit(s, request(clock, "r1", ms(30)))
    decisions = s.poll()
    assert (decisions.dispatches, decisions.rejected) == ([], [])
    assert decisions.wakeup == pytest.approx(ms(20))  # the last moment r1 could start

    clock.set(ms(19))
    assert s.poll().rejected == []  # still feasible, were the worker free
    clock.set(ms(20))
    decisions = s.poll()
    [(dropped, error)] = decisions.rejected
    assert dropped.receiver == "r1"
    assert isinstance(error, DeadlineUnmeetable)
    assert error.message == (
        "model 'm': rejected before running: its deadline passed while queued "
        "(needs ~10.00 ms to run)"
    )
    assert s.queue_length("m") == 0
    assert decisions.wakeup is None

    s.complete(blocker.id, ms(10))
    assert s.poll().dispatches == []  # r1 never runs late


def test_hopeless_multi_row_request_is_dropped_by_its_own_estimate(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    seed(s, "m", {1: ms(10), 4: ms(40)})
    busy(s, clock)
    submit(s, request(clock, "big", ms(60), rows=4))  # 4 rows take 40 ms: start by 20 ms
    assert s.poll().wakeup == pytest.approx(ms(20))
    clock.set(ms(25))
    decisions = s.poll()
    assert [r.receiver for r, _ in decisions.rejected] == ["big"]
    assert "needs ~40.00 ms to run" in decisions.rejected[0][1].message


def test_only_hopeless_requests_are_dropped(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    seed(s, "m", {1: ms(10)})
    blocker = busy(s, clock)
    submit(s, request(clock, "soon", ms(30)), request(clock, "later", ms(80)))
    clock.set(ms(20))
    decisions = s.poll()
    assert [r.receiver for r, _ in decisions.rejected] == ["soon"]
    assert decisions.wakeup == pytest.approx(ms(70))  # next: the last start for "later"
    s.complete(blocker.id, ms(10))
    assert [tags(d) for d in s.poll().dispatches] == [["later"]]


def test_request_without_a_ready_replica_is_dropped_at_its_deadline(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, place=False)  # m is still loading
    submit(s, request(clock, "r1", ms(30)))
    decisions = s.poll()
    assert decisions.dispatches == []
    assert decisions.wakeup == pytest.approx(ms(30))  # no estimate: the deadline itself
    clock.set(ms(30))
    [(dropped, error)] = s.poll().rejected
    assert dropped.receiver == "r1"
    assert error.message == "model 'm': rejected before running: no replica became ready in time"


def test_submit_rejects_a_request_that_is_already_late(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    clock.set(1.0)
    late = Job("m", {"x": np.zeros((1, 1))}, 1, 0.5, 1.0)
    with pytest.raises(DeadlineUnmeetable) as info:
        s.submit(late)
    assert info.value.message == (
        "model 'm': deadline cannot be met: the request is already late, 0.00 ms left; "
        "raise the timeout or slo_ms"
    )
    assert s.queue_length("m") == 0


def test_submit_rejects_a_request_shorter_than_its_estimate(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    seed(s, "m", {1: ms(10)})
    with pytest.raises(DeadlineUnmeetable) as info:
        s.submit(request(clock, "r1", ms(5)))
    assert info.value.message == (
        "model 'm': deadline cannot be met: the request needs ~10.00 ms, 5.00 ms left; "
        "raise the timeout or slo_ms"
    )
    s.submit(request(clock, "r2", ms(10)))  # exactly enough is enough
    assert s.queue_length("m") == 1


def test_submit_accepts_a_burst_that_fits_one_batch(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=8)
    seed(s, "m", {1: ms(10), 4: ms(20), 8: ms(40)})
    burst = [request(clock, f"r{i}", ms(24)) for i in range(5)]
    submit(s, *burst[:4])  # together they run as one batch of 4 in 20 ms
    assert s.queue_length("m") == 4
    with pytest.raises(DeadlineUnmeetable) as info:
        s.submit(burst[4])  # a batch of 5 takes 25 ms (between 4 and 8 rows)
    assert info.value.message == (
        "model 'm': deadline cannot be met: 4 rows queued ahead; with them it needs "
        "~25.0 ms, 24.0 ms left"
    )
    [dispatch] = s.poll().dispatches
    assert tags(dispatch) == ["r0", "r1", "r2", "r3"]


def test_submit_counts_only_the_rows_queued_ahead(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=8)
    seed(s, "m", {1: ms(10), 4: ms(20), 8: ms(40)})
    submit(s, *(request(clock, f"relaxed{i}", 10.0) for i in range(20)))
    urgent = request(clock, "urgent", ms(30))  # its deadline puts it at the head
    s.submit(urgent)
    dispatch = s.poll().dispatches[0]
    assert tags(dispatch)[0] == "urgent"


def test_submit_rejects_when_rows_ahead_cannot_all_run_in_time(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"], 2: ["m"]}, max_batch=8)
    seed(s, "m", {1: ms(10), 8: ms(40)})
    submit(s, *(request(clock, f"relaxed{i}", 10.0) for i in range(10)))  # behind: no delay
    submit(s, *(request(clock, f"a{i}", ms(60)) for i in range(16)))  # two batches at once
    with pytest.raises(DeadlineUnmeetable, match="16 rows queued ahead"):
        s.submit(request(clock, "a16", ms(60)))  # a third batch of 8 waits for a second round
    # 16 rows ahead + 1: three batches over two replicas, two rounds of 40 ms.
    s.submit(request(clock, "fits", ms(80)))
    with pytest.raises(DeadlineUnmeetable) as info:
        s.submit(request(clock, "tight", ms(79)))
    assert info.value.message == (
        "model 'm': deadline cannot be met: 16 rows queued ahead; with them it needs "
        "~80.0 ms, 79.0 ms left"
    )


def test_full_queue_sheds_at_once(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_queue=2)
    submit(s, request(clock, "r1", 1.0), request(clock, "r2", 1.0))
    with pytest.raises(Overloaded) as info:
        s.submit(request(clock, "r3", 1.0))
    assert info.value.message == (
        "model 'm': queue is full (2 requests); retry later or add replicas"
    )
    assert s.queue_length("m") == 2
    s.poll()  # r1 leaves for the worker
    s.submit(request(clock, "r4", 1.0))
    assert s.queue_length("m") == 2


# -- priorities and replicas ------------------------------------------------------------------


def test_priority_level_first_then_deadline(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, min_samples=1000)  # AIMD at 1: one request per batch
    submit(
        s,
        request(clock, "default", ms(100), priority=priority_level(0)),
        request(clock, "p1", ms(900), priority=priority_level(1)),
        request(clock, "p2", ms(200), priority=priority_level(2)),
        request(clock, "unset", ms(50), priority=priority_level(None)),
    )
    order = []
    for _ in range(4):
        [dispatch] = s.poll().dispatches
        order.extend(tags(dispatch))
        s.complete(dispatch.id, None)  # a failed action: the limit stays at 1
    assert order == ["p1", "p2", "unset", "default"]


def test_replicas_share_the_model_queue(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"], 2: ["m"]}, max_batch=2)
    seed(s, "m", {1: ms(1), 2: ms(2)})
    assert s.placement.replicas("m") == {1, 2}
    submit(s, *(request(clock, f"r{i}", ms(100 + i)) for i in range(5)))
    dispatches = s.poll().dispatches
    assert sorted(d.worker for d in dispatches) == [1, 2]
    assert sorted(tags(d) for d in dispatches) == [["r0", "r1"], ["r2", "r3"]]
    assert s.queue_length("m") == 1
    assert s.placement.busy_workers() == 2


def test_unplaced_worker_stops_getting_the_model(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"], 2: ["m"]})
    s.unplaced("m", 1)
    assert s.placement.replicas("m") == {2}
    submit(s, request(clock, "r1", 1.0))
    assert [d.worker for d in s.poll().dispatches] == [2]


# -- worker failure ---------------------------------------------------------------------------


def test_lost_worker_requests_are_retried_once_then_failed(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"], 2: ["m"]})
    r1 = request(clock, "r1", 1.0)
    submit(s, r1)
    [first] = s.poll().dispatches
    assert first.worker == 1

    retried, failed = s.worker_lost(1)
    assert (retried, failed) == ([r1], [])
    assert r1.attempts == 1
    assert s.placement.replicas("m") == {2}
    assert s.complete(first.id, ms(1)) is None  # a late reply from the dead worker is ignored

    [second] = s.poll().dispatches
    assert (second.worker, tags(second)) == (2, ["r1"])
    retried, failed = s.worker_lost(2)
    assert (retried, failed) == ([], [r1])
    assert s.queue_length("m") == 0
    assert s.placement.replicas("m") == set()


def test_retried_request_keeps_its_deadline_order(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"], 2: ["m"]}, min_samples=1000)
    submit(s, request(clock, "early", ms(100)), request(clock, "mid", ms(200)))
    dispatches = s.poll().dispatches
    early = next(d for d in dispatches if tags(d) == ["early"])
    submit(s, request(clock, "late", ms(300)))
    s.worker_lost(early.worker)
    other = next(d for d in dispatches if d is not early)
    s.complete(other.id, None)
    [dispatch] = s.poll().dispatches
    assert tags(dispatch) == ["early"]


def test_losing_an_idle_or_unknown_worker(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    assert s.worker_lost(1) == ([], [])
    assert s.worker_lost(99) == ([], [])
    assert s.placement.replicas("m") == set()


def test_removed_model_returns_its_queue(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, place=False)
    submit(s, request(clock, "r1", 1.0), request(clock, "r2", 1.0))
    assert sorted(r.receiver for r in s.remove_model("m")) == ["r1", "r2"]
    assert not s.placement.has_model("m")
    assert s.remove_model("m") == []
    assert s.poll().dispatches == []


# -- completion: estimates and overhead ------------------------------------------------------


def test_complete_feeds_the_estimator_and_the_rpc_overhead(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, min_samples=1)  # profiled once measured: no stretch
    submit(s, request(clock, "pair", 1.0, rows=2))
    [dispatch] = s.poll().dispatches
    assert dispatch.expected is None  # nothing measured yet
    clock.set(ms(12))
    s.complete(dispatch.id, ms(10))  # the worker measured 10 ms; 2 ms went elsewhere
    assert s.estimator.estimate("m", 2) == pytest.approx(ms(10))
    assert s.statistics().overhead_s == pytest.approx(ms(2))
    assert s.durations.service_time("m", 2) == pytest.approx(ms(12))
    assert s.model_statistics("m").estimates_s == {2: pytest.approx(ms(10))}
    assert s.complete(dispatch.id, ms(10)) is None  # completed once only

    # The overhead now counts in when a queued request must be dropped.
    busy(s, clock)
    submit(s, request(clock, "r", ms(100)))
    assert s.poll().wakeup == pytest.approx(ms(12) + ms(100) - ms(12))


def test_an_unprofiled_models_estimate_is_stretched_until_it_has_min_samples(
    clock: ManualClock,
) -> None:
    s = scheduler(clock, {1: ["m"]}, min_samples=3)
    s.estimator.observe("m", 1, ms(1))  # its load's warm-up run, say
    # 1 ms measured once: 2 x 1 ms + 2 ms, no RPC overhead measured yet.
    assert s.durations.service_time("m", 1) == pytest.approx(ms(4))
    assert s.durations.service_time("m", 4) == pytest.approx(ms(10))  # 4 ms extrapolated, stretched
    s.estimator.observe("m", 1, ms(1))
    assert s.durations.service_time("m", 1) == pytest.approx(ms(4))
    s.estimator.observe("m", 1, ms(1))  # three measurements: its own window is trusted
    assert s.durations.service_time("m", 1) == pytest.approx(ms(1))


def test_failed_action_leaves_estimates_and_aimd_alone(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, min_samples=1000)
    submit(s, request(clock, "r", 1.0))
    [dispatch] = s.poll().dispatches
    clock.advance(ms(5))
    assert s.complete(dispatch.id, None) is dispatch
    assert s.estimator.estimate("m", 1) is None
    stats = s.model_statistics("m")
    assert stats.aimd_limit == 1.0
    assert stats.batches == 0
    assert s.placement.busy_workers() == 0


def test_control_completion_does_not_touch_estimates(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    load = s.control(1, LOAD, "m")
    [dispatch] = s.poll().dispatches
    assert dispatch is load
    clock.advance(1.0)
    s.complete(load.id, 0.5)
    assert s.estimator.estimate("m", 1) is None
    assert s.statistics().overhead_s == 0.0


# -- a request that finds the server idle --------------------------------------------------------


def test_start_now_runs_a_lone_request_on_an_idle_profiled_model(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]})
    seed(s, "m", {1: ms(10)})
    dispatch = s.start_now(request(clock, "alone", ms(100)))
    assert dispatch is not None and tags(dispatch) == ["alone"]
    assert (dispatch.worker, dispatch.rows, dispatch.expected) == (1, 1, pytest.approx(ms(10)))
    assert dispatch.latest == pytest.approx(ms(90))  # its worker refuses it after that
    assert s.placement.busy_workers() == 1 and s.queue_length("m") == 0
    assert s.start_now(request(clock, "second", ms(100))) is None  # the worker is busy now
    clock.set(ms(10))
    assert s.complete(dispatch.id, ms(10)) is dispatch
    assert s.placement.busy_workers() == 0
    clock.set(ms(14))  # it ran until 10 ms: idle for less than half a run (5 ms), a wave
    assert s.start_now(request(clock, "wave", ms(100))) is None
    clock.set(ms(16))
    assert s.start_now(request(clock, "after a pause", ms(100))) is not None


def test_start_now_queues_a_request_that_arrived_with_the_last_one_started_alone(
    clock: ManualClock,
) -> None:
    """Requests read in one turn of the loop share their arrival. Reading each can take longer
    than half a run, so the idle time since the last run would let every one of them run
    alone, one run each, and never batch them (at 32 connections, once low load had measured
    the size-1 run short): the second and later of a turn are queued, to be batched."""
    s = scheduler(clock, {1: ["m"]})
    seed(s, "m", {1: ms(10)})
    turn = [request(clock, f"read {i}", ms(100)) for i in range(3)]  # one turn: arrived at 0
    first = s.start_now(turn[0])
    assert first is not None and tags(first) == ["read 0"]
    clock.set(ms(10))
    s.complete(first.id, ms(10))
    clock.set(ms(20))  # idle for a run: long enough, but these came with the one that ran
    assert s.start_now(turn[1]) is None and s.start_now(turn[2]) is None
    submit(s, turn[1], turn[2])
    batch = s.poll().dispatches
    assert [tags(d) for d in batch] == [["read 1", "read 2"]]
    clock.set(ms(40))
    s.complete(batch[0].id, ms(20))
    clock.set(ms(50))  # read in a later turn: it may run alone again
    later = s.start_now(request(clock, "next turn", ms(100)))
    assert later is not None and tags(later) == ["next turn"]


def test_start_now_declines_what_the_queue_must_decide(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, min_samples=3)
    s.estimator.observe("m", 1, ms(10))
    assert s.start_now(request(clock, "unprofiled", ms(100))) is None
    seed(s, "m", {1: ms(10)})
    assert s.start_now(request(clock, "hopeless", ms(5))) is None  # 10 ms > its 5 ms
    s.placement.add_model("cold")
    seed(s, "cold", {1: ms(1)})
    assert s.start_now(request(clock, "unplaced", ms(100), model="cold")) is None
    submit(s, request(clock, "queued", ms(100)))  # something queued: it goes behind, in order
    assert s.start_now(request(clock, "later", ms(100))) is None


def test_a_queued_models_drop_time_is_its_earliest_requests_latest_start(
    clock: ManualClock,
) -> None:
    """Admission's prediction for a request is the one its drop time counts from: each model's
    drop time is the latest start of its most urgent request, as asked afresh of the
    estimates, and a worker's requeued request (not admitted again) counts alike."""
    s = scheduler(clock, {0: ["m", "n"]})
    seed(s, "m", {1: ms(2), 2: ms(3)})
    s.submit(request(clock, "a", ms(40)))
    s.submit(request(clock, "b", ms(30), rows=2))
    s.submit(request(clock, "c", ms(50)))
    slot = s._models["m"]
    service = s.durations.service_time
    assert slot.drop_at == clock.now() + ms(30) - service("m", 2)
    s.submit(request(clock, "d", ms(20), "n"))  # no estimate yet: it may start until its deadline
    assert s._models["n"].drop_at == clock.now() + ms(20)
    requeued = request(clock, "e", ms(10))
    s._queued.push(slot, requeued)
    assert slot.drop_at == clock.now() + ms(10) - service("m", 1)
