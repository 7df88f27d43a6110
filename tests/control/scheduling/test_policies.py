"""Headway's policy against the Clipper-style baseline, on the same hand-worked cases.

The baseline keeps FIFO order, sizes batches by AIMD alone, rejects nothing early (a hopeless
request still runs and is answered late), evicts plain LRU and loads whatever is requested.
Times are seconds written as milliseconds (`ms(10)`); memory is in MB.
"""

from __future__ import annotations

import dataclasses

import pytest

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD
from headway.control.policy import CLIPPER, HEADWAY, POLICIES, SchedulingPolicy
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import ColdStartTooSlow, DeadlineUnmeetable
from tests.control.helpers import ms, request, scheduler, seed, tags


def run_all(s: Scheduler, clock: ManualClock, step: float = ms(1)) -> list[list[str]]:
    """Poll and complete until nothing is left; the requests of each INFER, in order."""
    order = []
    while dispatches := s.poll().dispatches:
        for dispatch in dispatches:
            order.append(tags(dispatch))
            clock.advance(step)
            s.complete(dispatch.id, step)
    return order


def test_the_policies_by_name() -> None:
    assert POLICIES == {"headway": HEADWAY, "clipper": CLIPPER}
    assert HEADWAY.early_reject and HEADWAY.deadline_order and HEADWAY.profile_batching
    assert HEADWAY.idle_first_eviction and HEADWAY.feasible_loads_only
    assert not any(
        (
            CLIPPER.early_reject,
            CLIPPER.deadline_order,
            CLIPPER.profile_batching,
            CLIPPER.idle_first_eviction,
            CLIPPER.feasible_loads_only,
        )
    )
    assert HEADWAY.schedule_ahead == CLIPPER.schedule_ahead == 0.0


# -- order ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "order"),
    [(HEADWAY, [["urgent"], ["relaxed"]]), (CLIPPER, [["relaxed"], ["urgent"]])],
)
def test_order_within_a_model(
    clock: ManualClock, policy: SchedulingPolicy, order: list[list[str]]
) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=1, policy=policy)
    seed(s, "m", {1: ms(1)})
    s.submit(request(clock, "relaxed", 1.0))
    clock.advance(ms(1))
    s.submit(request(clock, "urgent", ms(100)))
    assert run_all(s, clock) == order


@pytest.mark.parametrize(
    ("policy", "order"),
    [(HEADWAY, [["b1"], ["a2"], ["a1"]]), (CLIPPER, [["a1"], ["b1"], ["a2"]])],
)
def test_order_across_models_on_one_worker(
    clock: ManualClock, policy: SchedulingPolicy, order: list[list[str]]
) -> None:
    s = scheduler(clock, {1: ["a", "b"]}, max_batch=1, policy=policy)
    s.submit(request(clock, "a1", 1.0, model="a"))
    clock.advance(ms(1))
    s.submit(request(clock, "b1", ms(100), model="b"))
    clock.advance(ms(1))
    s.submit(request(clock, "a2", ms(500), model="a"))
    assert run_all(s, clock) == order


# -- batch sizes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "sizes"), [(HEADWAY, [8, 8]), (CLIPPER, [1, 2, 3, 4, 5, 1])])
def test_batch_sizes(clock: ManualClock, policy: SchedulingPolicy, sizes: list[int]) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=8, policy=policy)
    seed(s, "m", {1: ms(1), 8: ms(8)})  # a profile says 8 rows fit easily
    for i in range(16):
        s.submit(request(clock, f"r{i}", 10.0))
    assert [len(batch) for batch in run_all(s, clock)] == sizes  # AIMD: +1 per batch in time


# -- early rejection ------------------------------------------------------------------------------


def test_headway_rejects_a_hopeless_request_at_admission(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=8, policy=HEADWAY)
    seed(s, "m", {1: ms(10)})
    with pytest.raises(DeadlineUnmeetable):
        s.submit(request(clock, "hopeless", ms(5)))
    assert s.counters.rejected_at_admission == 1


def test_clipper_runs_a_hopeless_request_and_answers_it_late(clock: ManualClock) -> None:
    s = scheduler(clock, {1: ["m"]}, max_batch=8, policy=CLIPPER)
    seed(s, "m", {1: ms(10)})
    s.submit(request(clock, "blocker", 1.0))
    [blocker] = s.poll().dispatches
    s.submit(request(clock, "hopeless", ms(5)))  # needs 10 ms: admitted all the same
    clock.set(ms(8))
    decisions = s.poll()
    assert (decisions.dispatches, decisions.rejected, decisions.wakeup) == ([], [], None)
    clock.set(ms(10))
    s.complete(blocker.id, ms(10))
    decisions = s.poll()
    assert decisions.rejected == []  # past its deadline, still not dropped
    [late] = decisions.dispatches
    assert (late.kind, tags(late), late.latest) == (INFER, ["hopeless"], None)  # no window
    clock.set(ms(20))
    s.complete(late.id, ms(10))
    model, counters = s.model_statistics("m"), s.statistics().counters
    assert (model.batches, model.late_batches) == (2, 1)
    assert model.aimd_limit == pytest.approx(1.8)  # +1, then x0.9
    assert counters["dropped"] == counters["rejected_at_admission"] == 0


@pytest.mark.parametrize("policy", [HEADWAY, CLIPPER])
def test_a_cold_start_too_slow(clock: ManualClock, policy: SchedulingPolicy) -> None:
    s = scheduler(clock, {1: []}, sizes={"m": 1.0}, demand_loading=True, max_batch=8, policy=policy)
    seed(s, "m", {1: ms(10)})
    s.loads.observe("m", 1, ms(50))
    if policy.early_reject:
        with pytest.raises(ColdStartTooSlow, match=r"takes ~50 ms; 30\.0 ms left"):
            s.submit(request(clock, "r1", ms(30)))
        # no demand left, but the refusal rests on one load: the idle worker measures another
        [probe] = s.poll().dispatches
        assert (probe.kind, probe.model, probe.requests) == (LOAD, "m", [])
        assert (s.counters.rejected_at_admission, s.counters.probe_loads) == (1, 1)
    else:
        s.submit(request(clock, "r1", ms(30)))  # the baseline loads whatever is requested
        [load] = s.poll().dispatches
        assert (load.kind, load.model) == (LOAD, "m")
        assert s.counters.rejected_at_admission == 0
    assert s.counters.cold_starts == 1


@pytest.mark.parametrize(("policy", "loads"), [(HEADWAY, False), (CLIPPER, True)])
def test_a_load_that_cannot_end_in_time(
    clock: ManualClock, policy: SchedulingPolicy, loads: bool
) -> None:
    policy = dataclasses.replace(policy, schedule_ahead=ms(50))
    s = scheduler(
        clock, {1: ["x"]}, sizes={"m": 1.0}, demand_loading=True, max_batch=8, policy=policy
    )
    seed(s, "x", {1: ms(30)})
    seed(s, "m", {1: ms(10)})
    s.loads.observe("m", 1, ms(50))
    s.submit(request(clock, "x1", ms(40), model="x"))
    clock.set(ms(1))
    s.submit(request(clock, "m1", ms(85), model="m"))  # 50 + 10 fits in 85 ms...
    infer, *rest = s.poll().dispatches
    assert (infer.kind, tags(infer)) == (INFER, ["x1"])
    # ...but not after x1, when the worker is next free: 31 + 50 + 10 > 1 + 85.
    if loads:
        [load] = rest
        assert (load.kind, load.model, load.earliest) == (LOAD, "m", pytest.approx(ms(31)))
    else:
        assert rest == []


# -- eviction ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "evicted"), [(HEADWAY, ["b"]), (CLIPPER, ["a"])])
def test_eviction_order(clock: ManualClock, policy: SchedulingPolicy, evicted: list[str]) -> None:
    s = scheduler(
        clock,
        {1: ["a"]},
        sizes={"a": 50.0, "b": 30.0, "c": 40.0},
        memory_mb=100.0,
        policy=policy,
        demand_loading=True,
        max_batch=8,
    )
    clock.set(ms(1))
    s.placed("b", 1)  # a is the least recently used; b is idle
    s.submit(request(clock, "c1", ms(100), model="c"))  # first in either order
    clock.set(ms(2))
    s.submit(request(clock, "a1", 1.0, model="a"))
    [load] = s.poll().dispatches
    assert (load.kind, load.model, load.evict) == (LOAD, "c", evicted)
    assert s.counters.evictions == 1
