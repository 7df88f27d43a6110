"""Demand loading, worked by hand with a manual clock: what is loaded where, what is evicted to
make room, what is refused because a load would take too long, and the timed windows of actions.

Estimates are seeded by hand: INFER durations with `estimator.observe` (three samples per size,
so a model counts as profiled), LOAD durations with `loads.observe` or by completing a LOAD.
Times are seconds written as milliseconds (`ms(10)`); memory is in MB.
"""

from __future__ import annotations

import pytest

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD, Dispatch
from headway.control.estimates.durations import DEFAULT_LOAD_SECONDS, RECENT_LOADS
from headway.control.placement.slots import MAX_IN_FLIGHT
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import ColdStartTooSlow, DeadlineUnmeetable
from tests.control.helpers import demand, loaded, ms, request, seed, tags


def actions(dispatches: list[Dispatch]) -> list[tuple[int, str, str]]:
    return [(d.worker, d.kind, d.model) for d in dispatches]


def counters(s: Scheduler) -> dict[str, int]:
    return {k: v for k, v in vars(s.counters).items() if v}


# -- LOAD follows unmet demand ------------------------------------------------------------------


def test_a_model_without_queued_requests_is_never_loaded(clock: ManualClock) -> None:
    s = demand(clock, {1: None, 2: 100.0}, {"a": 10.0, "b": 10.0})
    decisions = s.poll()
    assert (decisions.dispatches, decisions.wakeup) == ([], None)
    clock.advance(10.0)
    assert s.poll().dispatches == []
    assert s.placement.worker_memory() == {1: (0.0, None, 0), 2: (0.0, 100.0, 0)}
    assert counters(s) == {}


def test_a_request_for_an_unloaded_model_loads_it_then_runs_there(clock: ManualClock) -> None:
    s = demand(clock, {1: 100.0}, {"m": 40.0})
    seed(s, "m", {1: ms(10)})
    s.submit(request(clock, "r1", 1.0, model="m"))
    assert s.durations.load_time("m") is None
    [load] = s.poll().dispatches
    assert (load.worker, load.kind, load.model, load.requests, load.evict) == (1, LOAD, "m", [], [])
    assert load.expected == DEFAULT_LOAD_SECONDS  # nothing measured yet
    assert (load.earliest, load.latest) == (0.0, None)
    assert s.poll().dispatches == []  # the worker is loading: nothing else runs there

    clock.set(ms(30))
    loaded(s, load, ms(30))
    assert s.durations.load_time("m") == pytest.approx(ms(30))
    assert s.placement.replicas("m") == {1}
    [infer] = s.poll().dispatches
    assert (infer.worker, infer.kind, tags(infer)) == (1, INFER, ["r1"])
    assert infer.earliest == pytest.approx(ms(30))
    assert infer.latest == pytest.approx(1.0 - ms(10))
    assert counters(s) == {"loads": 1, "cold_starts": 1}

    s.complete(infer.id, ms(10))
    s.submit(request(clock, "r2", 1.0, model="m"))  # the model is held now: no cold start
    [again] = s.poll().dispatches
    assert (again.kind, tags(again)) == (INFER, ["r2"])
    assert counters(s) == {"loads": 1, "cold_starts": 1}


def test_the_most_urgent_unloaded_model_is_loaded_first(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"a": 1.0, "b": 1.0, "idle": 1.0})
    for key in ("a", "b"):
        seed(s, key, {1: ms(10)})
    s.submit(request(clock, "a1", ms(500), model="a"))
    s.submit(request(clock, "b1", ms(200), model="b"))
    [first] = s.poll().dispatches
    assert actions([first]) == [(1, LOAD, "b")]

    clock.set(ms(20))
    loaded(s, first, ms(20))
    [second] = s.poll().dispatches  # b's request (200 ms) is more urgent than a's load (500 ms)
    assert (second.kind, tags(second)) == (INFER, ["b1"])
    clock.set(ms(30))
    s.complete(second.id, ms(10))
    [third] = s.poll().dispatches
    assert actions([third]) == [(1, LOAD, "a")]
    clock.set(ms(50))
    loaded(s, third, ms(20))
    [fourth] = s.poll().dispatches
    assert (fourth.kind, tags(fourth)) == (INFER, ["a1"])
    s.complete(fourth.id, ms(10))
    assert s.poll().dispatches == []
    assert s.placement.replicas("idle") == set()  # never requested, never loaded
    assert s.counters.loads == 2


def test_free_workers_load_unloaded_models_in_order_of_urgency(clock: ManualClock) -> None:
    s = demand(clock, {1: None, 2: None}, {"a": 1.0, "b": 1.0, "c": 1.0})
    s.submit(request(clock, "a1", ms(500), model="a"))
    s.submit(request(clock, "b1", ms(200), model="b"))
    s.submit(request(clock, "c1", ms(900), model="c"))
    assert actions(s.poll().dispatches) == [(1, LOAD, "b"), (2, LOAD, "a")]


def test_only_one_worker_loads_a_model_at_a_time(clock: ManualClock) -> None:
    s = demand(clock, {1: None, 2: None, 3: None}, {"m": 1.0})
    for i in range(5):
        s.submit(request(clock, f"r{i}", 1.0, model="m"))
    assert actions(s.poll().dispatches) == [(1, LOAD, "m")]
    assert s.poll().dispatches == []
    clock.set(ms(100))
    assert s.poll().dispatches == []  # still loading on worker 1: the others wait
    assert s.counters.loads == 1


def test_a_lost_or_failed_load_can_be_retried_elsewhere(clock: ManualClock) -> None:
    s = demand(clock, {1: 100.0, 2: 100.0}, {"m": 60.0})
    s.submit(request(clock, "r1", 1.0, model="m"))
    [load] = s.poll().dispatches
    assert actions([load]) == [(1, LOAD, "m")]

    assert s.worker_lost(1) == ([], [])  # a LOAD carries no requests
    [retry] = s.poll().dispatches
    assert actions([retry]) == [(2, LOAD, "m")]

    s.complete(retry.id, None)
    s.load_failed("m", 2)
    assert s.placement.worker_memory() == {2: (0.0, 100.0, 0)}  # the reservation is released
    [again] = s.poll().dispatches  # the request still waits for it: load it again
    assert actions([again]) == [(2, LOAD, "m")]
    assert s.counters.loads == 3


# -- EVICT: idle first, least recently used first, never what is in flight -----------------------


def test_a_load_evicts_the_least_recently_used_idle_model(clock: ManualClock) -> None:
    s = demand(clock, {1: 100.0}, {"a": 50.0, "b": 50.0, "c": 50.0})
    for key in "abc":
        seed(s, key, {1: ms(10)})
    s.placed("a", 1)  # used at 0 ms
    clock.set(ms(1))
    s.placed("b", 1)  # used at 1 ms
    clock.set(ms(2))
    s.submit(request(clock, "a1", 1.0, model="a"))
    [infer] = s.poll().dispatches  # a is used again at 2 ms: b is now the least recent
    clock.set(ms(12))
    s.complete(infer.id, ms(10))

    s.submit(request(clock, "c1", 1.0, model="c"))
    [load] = s.poll().dispatches
    assert (load.worker, load.kind, load.model, load.evict) == (1, LOAD, "c", ["b"])
    assert s.placement.replicas("b") == set()
    assert s.placement.replicas("a") == {1}
    assert s.placement.worker_memory() == {1: (100.0, 100.0, 2)}
    assert counters(s) == {"loads": 1, "evictions": 1, "cold_starts": 1}


@pytest.mark.parametrize(("size", "evicted"), [(40.0, ["b"]), (70.0, ["b", "a"])])
def test_a_model_with_queued_requests_is_evicted_only_after_idle_ones(
    clock: ManualClock, size: float, evicted: list[str]
) -> None:
    s = demand(clock, {1: 100.0}, {"a": 50.0, "b": 30.0, "c": size})
    s.placed("a", 1)  # least recently used, but it has a queued request
    clock.set(ms(1))
    s.placed("b", 1)  # idle
    s.submit(request(clock, "a1", 1.0, model="a"))
    s.submit(request(clock, "c1", ms(100), model="c"))  # more urgent than a1
    [load] = s.poll().dispatches
    assert (load.kind, load.model, load.evict) == (LOAD, "c", evicted)
    assert s.placement.worker_memory()[1][0] == pytest.approx(
        80.0 - 30.0 - 50.0 * ("a" in evicted) + size
    )
    assert s.queue_length("a") == 1  # an evicted model's requests stay queued


def test_a_model_with_an_action_in_flight_is_never_evicted(clock: ManualClock) -> None:
    s = demand(clock, {1: 100.0}, {"a": 50.0, "b": 50.0, "c": 50.0}, schedule_ahead=ms(20))
    for key in "abc":
        seed(s, key, {1: ms(10)})
    s.placed("a", 1)
    s.placed("b", 1)
    s.submit(request(clock, "a1", ms(50), model="a"))
    s.submit(request(clock, "c1", 1.0, model="c"))
    s.submit(request(clock, "b1", 2.0, model="b"))
    infer, load = s.poll().dispatches
    assert (infer.kind, tags(infer), infer.earliest) == (INFER, ["a1"], 0.0)
    # a is idle now but its INFER is in flight: the pipelined LOAD evicts busy b instead.
    assert (load.kind, load.model, load.evict) == (LOAD, "c", ["b"])
    assert load.earliest == pytest.approx(ms(10))  # after the INFER on the worker's timeline
    assert s.placement.replicas("a") == {1}
    assert s.queue_length("b") == 1


def test_no_load_when_only_a_model_in_flight_could_make_room(clock: ManualClock) -> None:
    s = demand(clock, {1: 50.0}, {"a": 50.0, "c": 50.0}, schedule_ahead=ms(20))
    seed(s, "a", {1: ms(10)})
    s.placed("a", 1)
    s.submit(request(clock, "a1", ms(50), model="a"))
    s.submit(request(clock, "c1", 1.0, model="c"))
    [infer] = s.poll().dispatches
    assert infer.kind == INFER  # and no LOAD of c behind it: it would evict a, in flight
    clock.set(ms(10))
    s.complete(infer.id, ms(10))
    [load] = s.poll().dispatches
    assert (load.kind, load.model, load.evict) == (LOAD, "c", ["a"])


def test_a_model_larger_than_a_workers_share_is_never_loaded_there(clock: ManualClock) -> None:
    s = demand(clock, {1: 100.0, 2: 300.0}, {"big": 200.0})
    s.submit(request(clock, "r1", 1.0, model="big"))
    assert actions(s.poll().dispatches) == [(2, LOAD, "big")]

    s = demand(clock, {1: 100.0}, {"big": 200.0})
    s.submit(request(clock, "r1", ms(100), model="big"))
    decisions = s.poll()
    assert decisions.dispatches == []
    assert decisions.wakeup == pytest.approx(ms(100))  # nothing measured: its deadline
    clock.set(ms(100))
    [(dropped, error)] = s.poll().rejected
    assert dropped.receiver == "r1"
    assert isinstance(error, ColdStartTooSlow)
    assert error.message == (
        "model 'big': rejected before running: the model could not be loaded in time"
    )
    assert counters(s) == {"cold_starts": 1, "dropped": 1}


# -- memory accounting --------------------------------------------------------------------------


def test_memory_reserved_at_load_resized_when_placed_released_on_failure_and_eviction(
    clock: ManualClock,
) -> None:
    s = demand(clock, {1: 100.0}, {"m": 40.0, "n": 30.0, "o": 60.0})
    for key in ("m", "n", "o"):
        seed(s, key, {1: ms(1)})
    s.submit(request(clock, "m1", 1.0, model="m"))
    [load_m] = s.poll().dispatches
    assert s.placement.worker_memory() == {
        1: (40.0, 100.0, 1)
    }  # the declared size, reserved at LOAD
    clock.set(ms(10))
    loaded(s, load_m, ms(10), size_mb=55.0)
    assert s.placement.worker_memory() == {1: (55.0, 100.0, 1)}  # the measured size
    [infer] = s.poll().dispatches
    s.complete(infer.id, ms(1))

    s.submit(request(clock, "n1", 1.0, model="n"))
    [load_n] = s.poll().dispatches
    assert (load_n.model, load_n.evict) == ("n", [])
    assert s.placement.worker_memory() == {1: (85.0, 100.0, 2)}
    s.complete(load_n.id, None)
    s.load_failed("n", 1)
    assert s.placement.worker_memory() == {1: (55.0, 100.0, 1)}
    assert s.placement.replicas("n") == set()

    s.remove_model("n")
    s.submit(request(clock, "o1", 1.0, model="o"))
    [load_o] = s.poll().dispatches
    assert (load_o.model, load_o.evict) == ("o", ["m"])  # 55 + 60 > 100
    assert s.placement.worker_memory() == {1: (60.0, 100.0, 1)}
    loaded(s, load_o, ms(10))  # no measured size: the declared one stays
    assert s.placement.worker_memory() == {1: (60.0, 100.0, 1)}
    assert counters(s) == {"loads": 3, "evictions": 1, "cold_starts": 3}


# -- cold starts at admission --------------------------------------------------------------------


def test_cold_start_is_rejected_when_load_and_service_exceed_the_time_left(
    clock: ManualClock,
) -> None:
    s = demand(clock, {1: None}, {"m": 1.0})
    seed(s, "m", {1: ms(10)})
    s.loads.observe("other", 1, ms(50))  # the one load measured so far: 50 ms
    assert s.durations.load_time("m") == pytest.approx(ms(50))
    with pytest.raises(ColdStartTooSlow) as info:
        s.submit(request(clock, "tight", ms(59), model="m"))
    assert info.value.message == (
        "model 'm': deadline cannot be met: the model is not loaded and loading it takes "
        "~50 ms; 59.0 ms left"
    )
    assert isinstance(info.value, DeadlineUnmeetable)
    assert s.queue_length("m") == 0
    s.submit(request(clock, "enough", ms(61), model="m"))
    assert s.queue_length("m") == 1
    assert counters(s) == {"cold_starts": 2, "rejected_at_admission": 1}


def test_cold_start_uses_the_models_own_load_estimate_first(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0, "never": 1.0})
    for key in ("m", "never"):
        seed(s, key, {1: ms(10)})
    s.loads.observe("slow", 1, ms(50))
    s.loads.observe("m", 1, ms(20))
    s.submit(request(clock, "m1", ms(35), model="m"))  # 20 + 10 <= 35
    with pytest.raises(ColdStartTooSlow, match=r"model 'never'.*takes ~50 ms; 35\.0 ms left"):
        s.submit(request(clock, "n1", ms(35), model="never"))  # 50 + 10 > 35


def test_admission_is_optimistic_until_a_load_was_measured(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0, "u": 1.0})
    seed(s, "m", {1: ms(10)})
    s.submit(request(clock, "r1", ms(11), model="m"))  # no load measured: only service counts
    s.submit(request(clock, "u1", ms(1), model="u"))  # nothing measured at all
    with pytest.raises(DeadlineUnmeetable) as info:
        s.submit(request(clock, "r2", ms(9), model="m"))  # the service alone does not fit
    assert not isinstance(info.value, ColdStartTooSlow)  # loaded or not, it could not make it
    assert info.value.message == (
        "model 'm': deadline cannot be met: the request needs ~10.00 ms, 9.00 ms left; "
        "raise the timeout or slo_ms"
    )
    assert s.poll().dispatches[0].kind == LOAD
    assert s.counters.rejected_at_admission == 1


def test_admission_while_loading_counts_only_the_rest_of_the_load(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0})
    seed(s, "m", {1: ms(10)})
    s.loads.observe("other", 1, ms(50))
    s.submit(request(clock, "r1", 1.0, model="m"))
    [load] = s.poll().dispatches
    assert (load.kind, load.expected) == (LOAD, pytest.approx(ms(50)))
    clock.set(ms(30))  # 20 ms of the load to go, then 10 ms of service
    with pytest.raises(ColdStartTooSlow, match=r"takes ~20 ms; 29\.0 ms left"):
        s.submit(request(clock, "tight", ms(29), model="m"))
    s.submit(request(clock, "fits", ms(31), model="m"))
    assert s.queue_length("m") == 2


# -- queued requests for an unloaded model ------------------------------------------------------


def test_queued_cold_request_is_dropped_at_deadline_minus_service_minus_load(
    clock: ManualClock,
) -> None:
    s = demand(clock, {1: None}, {"x": 1.0, "m": 1.0})
    seed(s, "x", {1: 1.0})
    seed(s, "m", {1: ms(10)})
    s.loads.observe("x", 1, ms(50))
    s.placed("x", 1)
    s.submit(request(clock, "x1", 10.0, model="x"))
    [busy] = s.poll().dispatches  # the only worker is busy for a second
    s.submit(request(clock, "m1", ms(100), model="m"))  # 50 + 10 <= 100: admitted
    decisions = s.poll()
    assert decisions.dispatches == []
    assert decisions.wakeup == pytest.approx(ms(100) - ms(10) - ms(50))
    clock.set(ms(39))
    assert s.poll().rejected == []
    clock.set(decisions.wakeup)
    decisions = s.poll()
    [(dropped, error)] = decisions.rejected
    assert dropped.receiver == "m1"
    assert error.message == (
        "model 'm': rejected before running: the model could not be loaded in time"
    )
    assert decisions.wakeup is None
    s.complete(busy.id, 1.0)
    assert s.poll().dispatches == []  # nothing left to load m for
    assert counters(s) == {"cold_starts": 1, "dropped": 1}


def test_a_load_measured_later_moves_queued_cold_requests_drop_times(clock: ManualClock) -> None:
    s = demand(clock, {1: None, 2: 10.0}, {"x": 1.0, "y": 5.0, "m": 50.0})
    seed(s, "x", {1: ms(60)})
    seed(s, "m", {1: ms(10)})
    s.placed("x", 1)
    s.submit(request(clock, "x1", 10.0, model="x"))
    s.submit(request(clock, "y1", 10.0, model="y"))
    busy, load_y = s.poll().dispatches
    assert actions([busy, load_y]) == [(1, INFER, "x"), (2, LOAD, "y")]
    # No load measured yet: both are admitted, r1 optimistically.
    s.submit(request(clock, "r1", ms(100), model="m"))
    s.submit(request(clock, "r2", ms(300), model="m"))
    assert s.poll().dispatches == []  # both workers are busy (and m is too big for worker 2)

    clock.set(ms(60))
    s.complete(busy.id, ms(60))
    loaded(s, load_y, ms(60))  # loads take 60 ms: r1 had to start loading by 30 ms
    decisions = s.poll()
    assert [(r.receiver, type(e)) for r, e in decisions.rejected] == [("r1", ColdStartTooSlow)]
    # r2 can still make it (60 + 60 + 10 <= 300): m is loaded for it now, not once r1 expires.
    assert actions(decisions.dispatches) == [(1, LOAD, "m"), (2, INFER, "y")]


def test_an_evicted_models_queued_requests_count_the_reload(clock: ManualClock) -> None:
    s = demand(clock, {1: 100.0}, {"m": 60.0, "c": 60.0})
    for key in ("m", "c"):
        seed(s, key, {1: ms(10)})
    s.loads.observe("m", 1, ms(50))
    s.loads.observe("c", 1, ms(50))
    s.placed("m", 1)
    s.submit(request(clock, "c1", ms(100), model="c"))
    s.submit(request(clock, "m1", ms(115), model="m"))
    s.submit(request(clock, "m2", ms(300), model="m"))
    [load_c] = s.poll().dispatches
    assert (load_c.model, load_c.evict) == ("c", ["m"])  # m is busy, but the only way to fit
    clock.set(ms(50))
    loaded(s, load_c, ms(50))
    [infer_c] = s.poll().dispatches
    assert tags(infer_c) == ["c1"]
    clock.set(ms(60))
    s.complete(infer_c.id, ms(10))
    # m must be loaded again: m1 needed to start that by 115 - 10 - 50 = 55 ms; m2 can wait.
    decisions = s.poll()
    assert [r.receiver for r, _ in decisions.rejected] == ["m1"]
    [reload] = decisions.dispatches
    assert (reload.model, reload.evict) == ("m", ["c"])


def test_a_lost_workers_models_queued_requests_count_the_reload(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0})
    seed(s, "m", {1: ms(10)})
    s.loads.observe("m", 1, ms(50))
    s.placed("m", 1)
    s.submit(request(clock, "m1", ms(200), model="m"))
    [infer] = s.poll().dispatches
    assert (infer.kind, tags(infer)) == (INFER, ["m1"])
    s.submit(request(clock, "m2", ms(130), model="m"))  # queued behind m1: 120 ms to start
    clock.set(ms(5))
    retried, failed = s.worker_lost(1)
    assert ([r.receiver for r in retried], failed) == (["m1"], [])
    decisions = s.poll()
    assert decisions.dispatches == []
    assert decisions.wakeup == pytest.approx(ms(130 - 10 - 50))  # m2 now needs a load first
    clock.set(decisions.wakeup)
    assert [r.receiver for r, _ in s.poll().rejected] == ["m2"]


# -- timed windows: earliest and latest ---------------------------------------------------------


def test_infer_window_latest_is_earliest_deadline_minus_expected(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0}, schedule_ahead=ms(20), max_batch=2)
    seed(s, "m", {1: ms(10), 2: ms(15)})
    s.placed("m", 1)
    for tag, deadline in [("r1", 100), ("r2", 80), ("r3", 200), ("r4", 300)]:
        s.submit(request(clock, tag, ms(deadline), model="m"))
    first, second = s.poll().dispatches
    assert (tags(first), first.rows, first.expected) == (["r2", "r1"], 2, pytest.approx(ms(15)))
    assert (first.earliest, first.latest) == (0.0, pytest.approx(ms(80 - 15)))
    assert tags(second) == ["r3", "r4"]
    assert second.earliest == pytest.approx(ms(15))  # when the first is predicted to end
    assert second.latest == pytest.approx(ms(200 - 15))


def test_a_refused_infer_is_requeued_and_the_next_poll_drops_what_cannot_make_it(
    clock: ManualClock,
) -> None:
    s = demand(clock, {1: None}, {"m": 1.0}, max_batch=2)
    seed(s, "m", {1: ms(10), 2: ms(15)})
    s.placed("m", 1)
    s.submit(request(clock, "r1", ms(30), model="m"))
    s.submit(request(clock, "r2", ms(100), model="m"))
    [infer] = s.poll().dispatches
    assert (tags(infer), infer.latest) == (["r1", "r2"], pytest.approx(ms(15)))

    clock.set(ms(25))  # the worker got it too late and refused it
    assert s.refused(infer.id) is infer
    assert s.refused(infer.id) is None  # once only
    assert s.queue_length("m") == 2
    decisions = s.poll()
    [(dropped, error)] = decisions.rejected  # r1 needed to start by 20 ms
    assert (dropped.receiver, type(error)) == ("r1", DeadlineUnmeetable)
    [retry] = decisions.dispatches  # r2 alone still makes it
    assert (tags(retry), retry.earliest) == (["r2"], ms(25))
    assert retry.latest == pytest.approx(ms(90))
    assert counters(s) == {"refusals": 1, "dropped": 1}


# -- schedule_ahead: pipelining on a worker's timeline ------------------------------------------


def test_without_schedule_ahead_a_worker_runs_one_action_at_a_time(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0}, max_batch=1, full_batches_ahead=False)
    seed(s, "m", {1: ms(1)})
    s.placed("m", 1)
    for i in range(3):
        s.submit(request(clock, f"r{i}", 1.0, model="m"))
    assert len(s.poll().dispatches) == 1


def test_a_full_batch_goes_ahead_to_a_busy_worker_when_it_can_make_its_deadline(
    clock: ManualClock,
) -> None:
    s = demand(clock, {1: None}, {"m": 1.0}, max_batch=4)
    seed(s, "m", {1: ms(5), 3: ms(10), 4: ms(10)})
    s.placed("m", 1)
    for i in range(3):  # not a full batch yet: one batch of 3, nothing ahead
        s.submit(request(clock, f"a{i}", ms(100), model="m"))
    [first] = s.poll().dispatches
    assert first.rows == 3
    for i in range(3):  # 3 queued behind a busy worker: wait, more may join
        s.submit(request(clock, f"b{i}", ms(100), model="m"))
    assert s.poll().dispatches == []
    s.submit(request(clock, "b3", ms(100), model="m"))  # 4 = a full batch: sent ahead
    [ahead] = s.poll().dispatches
    assert (tags(ahead), ahead.earliest) == ([f"b{i}" for i in range(4)], pytest.approx(ms(10)))
    for i in range(4):  # another full batch: at most one action ahead of the running one
        s.submit(request(clock, f"c{i}", ms(100), model="m"))
    assert s.poll().dispatches == []


def test_no_full_batch_goes_ahead_that_would_miss_its_deadline(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0}, max_batch=2)
    seed(s, "m", {1: ms(5), 2: ms(8)})
    s.placed("m", 1)
    s.submit(request(clock, "a", ms(100), model="m"))
    [first] = s.poll().dispatches  # the worker is busy until 5 ms
    for name in ("b0", "b1"):
        s.submit(request(clock, name, ms(12), model="m"))
    assert s.poll().dispatches == []  # 5 + 8 ms would end after their 12 ms deadline
    clock.set(ms(5))
    s.complete(first.id, ms(5))
    second = s.poll().dispatches[0]  # free now: the largest batch that makes it, 1 row
    assert tags(second) == ["b0"]


def test_schedule_ahead_takes_the_next_action_when_the_last_ends_within_it(
    clock: ManualClock,
) -> None:
    s = demand(clock, {1: None}, {"m": 1.0}, schedule_ahead=ms(20), max_batch=1)
    seed(s, "m", {1: ms(15)})
    s.placed("m", 1)
    for i in range(5):
        s.submit(request(clock, f"r{i}", 1.0, model="m"))
    first, second = s.poll().dispatches  # the second ends at 30 ms: beyond the 20 ms window
    assert [first.earliest, second.earliest] == pytest.approx([0.0, ms(15)])
    clock.set(ms(9))
    assert s.poll().dispatches == []  # the worker's timeline is busy until 30 ms
    clock.set(ms(10))
    [third] = s.poll().dispatches
    assert (tags(third), third.earliest) == (["r2"], pytest.approx(ms(30)))
    assert s.placement.busy_workers() == 1


def test_never_more_than_max_in_flight_on_one_worker(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0}, schedule_ahead=1.0, max_batch=1)
    seed(s, "m", {1: ms(1)})
    s.placed("m", 1)
    for i in range(10):
        s.submit(request(clock, f"r{i}", 1.0, model="m"))
    dispatches = s.poll().dispatches
    assert len(dispatches) == MAX_IN_FLIGHT
    assert s.poll().dispatches == []
    s.complete(dispatches[0].id, ms(1))
    assert len(s.poll().dispatches) == 1


def test_statistics_report_the_counters(clock: ManualClock) -> None:
    s = demand(clock, {1: 10.0}, {"a": 10.0, "b": 10.0})
    seed(s, "a", {1: ms(10)})
    s.loads.observe("a", 1, ms(20))
    s.placed("a", 1)
    with pytest.raises(ColdStartTooSlow):
        s.submit(request(clock, "b0", ms(5), model="b"))
    s.submit(request(clock, "a1", ms(100), model="a"))
    s.submit(request(clock, "b1", ms(50), model="b"))
    [load] = s.poll().dispatches
    assert (load.model, load.evict) == ("b", ["a"])
    assert s.statistics().counters == {
        "loads": 1,
        "probe_loads": 0,
        "evictions": 1,
        "cold_starts": 2,
        "refusals": 0,
        "dropped": 0,
        "rejected_at_admission": 1,
        "refused_unread": 0,
    }


def test_one_slow_load_does_not_turn_a_models_cold_starts_away(clock: ManualClock) -> None:
    # On a shared machine a neighbour can slow one load 10x. As the p99 of the last 10 loads
    # that one would refuse the model's cold starts for 10 loads. Until a model has loaded
    # three times its estimate is at most a never-loaded model's; from three, its slowest
    # load is left out.
    s = demand(clock, {1: None}, {"m": 1.0})
    seed(s, "m", {1: ms(10)})
    for i in range(10):
        s.loads.observe(f"k{i}", 1, ms(20))
    s.loads.observe("m", 1, ms(200))  # its first load, slowed by a neighbour
    assert s.durations.load_time("never") == pytest.approx(ms(20))
    assert s.durations.load_time("m") == pytest.approx(ms(20))  # one load: no worse than unseen
    s.submit(request(clock, "r1", ms(100), model="m"))  # 20 + 10 <= 100: admitted
    s.loads.observe("m", 1, ms(20))
    assert s.durations.load_time("m") == pytest.approx(ms(20))  # two: still at most unseen
    s.loads.observe("m", 1, ms(22))
    assert s.durations.load_time("m") == pytest.approx(
        ms(22)
    )  # three: its own, the slowest left out
    for seconds in (ms(180), ms(190)):  # slow twice more: now that is what it costs
        s.loads.observe("m", 1, seconds)
    assert s.durations.load_time("m") == pytest.approx(ms(190))
    with pytest.raises(ColdStartTooSlow, match="takes ~190 ms"):
        s.submit(request(clock, "r2", ms(100), model="m"))


def test_the_never_loaded_estimate_recovers_after_a_stall_slowed_many_loads(
    clock: ManualClock,
) -> None:
    # A stall slows the loads of 20 models at once (a neighbour's burst, the page cache
    # reclaimed): as a percentile over every model's estimate, that would stay until each of
    # them loaded again. Over the last RECENT_LOADS loads it passes after as many fast ones.
    s = demand(clock, {1: None}, {"m": 1.0})
    seed(s, "m", {1: ms(10)})
    for i in range(20):
        s.loads.observe(f"stalled{i}", 1, ms(250))
    assert s.durations.load_time("never") == pytest.approx(ms(250))
    with pytest.raises(ColdStartTooSlow, match="takes ~250 ms"):
        s.submit(request(clock, "r1", ms(100), model="m"))
    for i in range(RECENT_LOADS - 10):  # 10 of the last 100 slow: p90 is a fast one
        s.loads.observe(f"fast{i}", 1, ms(20))
    assert s.durations.load_time("never") == pytest.approx(ms(20))
    s.submit(request(clock, "r2", ms(100), model="m"))  # 20 + 10 <= 100
    assert s.queue_length("m") == 1
