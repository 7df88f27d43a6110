"""The scheduler at scale: indexed drop times and cold candidates give the same decisions as
a full scan, a never-loaded model's LOAD estimate is robust to a few slow outliers, and a
simulation seeded with profiles batches by them from its first batch.

Times are seconds written as milliseconds (`ms(10)`); memory is in MB.
"""

from __future__ import annotations

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD
from headway.control.estimates.durations import UNSEEN_LOAD_QUANTILE
from headway.control.estimates.profiles import LatencyEstimator
from headway.control.policy import HEADWAY
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import ColdStartTooSlow
from headway.sim import ModelProfile, ServerSimulation
from tests.control.helpers import ms, request


def demand(clock: ManualClock, models: list[str], share: float | None = None) -> Scheduler:
    s = Scheduler(clock, LatencyEstimator(min_samples=3), policy=HEADWAY, demand_loading=True)
    s.placement.add_worker(1, memory_mb=share)
    for key in models:
        s.placement.add_model(key, size_mb=10.0, max_batch=8)
        for _ in range(3):
            s.estimator.observe(key, 1, ms(10))
    return s


def test_across_is_a_percentile_over_models_of_their_highest_estimates() -> None:
    loads = LatencyEstimator(min_samples=1)
    assert loads.across(90) is None
    for i in range(9):
        loads.observe(f"m{i}", 1, ms(10 + i))  # 10 .. 18 ms
    loads.observe("first", 1, 1.0)  # a worker's first load, which also imported the framework
    assert loads.across(100) == 1.0
    assert loads.across(90) == pytest.approx(ms(18))  # rank 9 of 10
    assert loads.across(50) == pytest.approx(ms(14))
    for _ in range(10):  # the outlier leaves its model's window of 10
        loads.observe("first", 1, ms(5))
    assert loads.across(100) == pytest.approx(ms(18))
    assert loads.across(10) == pytest.approx(ms(5))
    loads.forget("m8")
    assert loads.across(100) == pytest.approx(ms(17))


def test_a_few_slow_loads_do_not_make_every_cold_start_hopeless(clock: ManualClock) -> None:
    models = [f"m{i}" for i in range(12)]
    s = demand(clock, [*models, "never"])
    for i, key in enumerate(models):
        for _ in range(3):  # enough loads for each model's own estimate to be trusted
            s.loads.observe(key, 1, 1.0 if i == 0 else ms(20))  # one slow model among 12
    assert UNSEEN_LOAD_QUANTILE == 90.0
    assert s.durations.load_time("never") == pytest.approx(ms(20))  # the maximum would say 1 s
    s.submit(request(clock, "r1", ms(100), "never"))  # 20 + 10 <= 100: admitted
    with pytest.raises(ColdStartTooSlow, match="takes ~1000 ms"):
        s.submit(request(clock, "r2", ms(100), "m0"))  # its own estimate still counts
    [load] = s.poll().dispatches
    assert (load.kind, load.model, load.expected) == (LOAD, "never", pytest.approx(ms(20)))


def test_cold_models_load_in_the_order_of_their_most_urgent_requests(clock: ManualClock) -> None:
    # One worker, room for one model at a time: each LOAD evicts the last one.
    s = demand(clock, ["a", "b", "c"], share=10.0)
    s.loads.observe("x", 1, ms(5))
    s.submit(request(clock, "a1", ms(300), "a"))
    s.submit(request(clock, "b1", ms(200), "b"))
    s.submit(request(clock, "c1", ms(250), "c"))
    s.submit(request(clock, "b2", ms(100), "b"))  # b's head moves earlier
    order = []
    for _ in range(6):
        decisions = s.poll()
        [action] = decisions.dispatches
        order.append((action.kind, action.model))
        clock.advance(ms(5) if action.kind == LOAD else ms(10))
        s.complete(action.id, ms(5) if action.kind == LOAD else ms(10))
        if action.kind == LOAD:
            s.placed(action.model, 1)
    assert order == [
        (LOAD, "b"), (INFER, "b"), (LOAD, "c"), (INFER, "c"), (LOAD, "a"), (INFER, "a"),
    ]  # fmt: skip
    assert s.counters.evictions == 2
    assert s.poll().dispatches == []


def test_drop_times_follow_the_queue_heads_after_batches_and_drops(clock: ManualClock) -> None:
    s = demand(clock, ["m"])
    s.placed("m", 1)
    for tag, left in (("r1", ms(50)), ("r2", ms(30)), ("r3", ms(80))):
        s.submit(request(clock, tag, left, "m"))
    s.estimator.observe("m", 1, ms(10))
    # Batches of 1 only (8 rows would take 80 ms): r2 first, then r1, then r3.
    for _ in range(3):
        s.estimator.observe("m", 2, ms(60))
    first = s.poll()
    [run] = first.dispatches
    assert [r.receiver for r in run.requests] == ["r2"]
    assert first.wakeup == pytest.approx(ms(50) - ms(10))  # r1's drop time, not r2's
    clock.set(ms(45))  # the worker is still busy; r1 can no longer make it
    decisions = s.poll()
    assert [r.receiver for r, _ in decisions.rejected] == ["r1"]
    assert decisions.wakeup == pytest.approx(ms(80) - ms(10))  # r3's
    s.complete(run.id, ms(40))
    [nxt] = s.poll().dispatches
    assert [r.receiver for r in nxt.requests] == ["r3"]
    assert s.poll().wakeup is None


def test_a_drop_time_is_the_queues_earliest_whatever_its_order(clock: ManualClock) -> None:
    """A queue of one-row requests of one priority keeps its earliest drop time at its head,
    found without a pass over the queue (under overload, a pass per batch over a thousand
    queued requests cost more than serving the batch). A request of more rows, or of another
    priority, may have an earlier drop time behind the head: then the whole queue counts,
    and its head alone again once that request has left."""
    s = demand(clock, ["m"])
    s.placed("m", 1)
    s.estimator.observe("m", 1, ms(10))
    for _ in range(3):
        s.estimator.observe("m", 3, ms(40))  # three rows: 40 ms; one: 10 ms
    s.submit(request(clock, "one", ms(50), "m"))  # drop time 40 ms
    three = request(clock, "three", ms(60), "m", rows=3)
    s.submit(three)  # behind it, drop time 20 ms
    s.submit(request(clock, "later", ms(90), "m"))
    model = s._models["m"]
    assert not model.queue.uniform
    s._queued.refresh_drop(model)
    assert model.drop_at == pytest.approx(ms(20))  # the three rows', not the head's
    assert s.withdraw(three)
    assert model.queue.uniform
    assert model.drop_at == pytest.approx(ms(40))  # the head's again


def test_a_seeded_simulation_batches_by_profile_from_the_first_batch() -> None:
    profile = ModelProfile({1: ms(5), 2: ms(6), 4: ms(8), 8: ms(12)}, 0.01, 10.0, max_batch=8)
    times = np.concatenate([[0.0], np.full(8, 0.002)])  # all queued while the model loads
    with ServerSimulation(
        {"m": profile}, workers=1, memory_mb=100.0, rpc_seconds=0.0, seed_profiles=True
    ) as sim:
        assert sim.controller.scheduler.estimator.min_samples == 3
        result = sim.run(times, ["m"] * 9, slo=0.1)
    # LOAD 0-10 ms, then the largest batch the profile allows (8 rows, 12 ms), then the ninth.
    # AIMD, which does not trust a profile of one sample per size, would send 1, then 2, ...
    assert np.round(result.finished * 1e3, 3).tolist() == [22.0] * 8 + [27.0]
    assert result.summary()["late"] == 0
