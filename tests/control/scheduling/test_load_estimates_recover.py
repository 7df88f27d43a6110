"""LOAD estimates must not lock themselves in (issue 11's rule, for loads as for runs).

A cold start refused on its LOAD estimate never loads the model, so never measures a load, so
the next one is refused the same way: with a never-loaded model's estimate taken from a few
pre-warm loads on a busy machine (the slowest 146 ms against a 100 ms SLO), a server served
nothing. Here such a refusal is an occasion to measure (a probe load, made by an idle worker
with nothing queued), a measured load refines the estimate, and the estimate from a few loads
is not their single slowest. Worked by hand with a manual clock, as in `test_loading`.
"""

from __future__ import annotations

import pytest

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD
from headway.control.scheduling.probes import LOAD_PROBE_DUTY
from headway.errors import ColdStartTooSlow
from tests.control.helpers import demand, loaded, ms, request, seed, tags

PRE_WARM_LOADS = (ms(120), ms(130), ms(140), ms(146))  # four loads on a machine at load 7


def test_a_cold_start_refused_on_pre_warm_loads_loads_the_model_to_measure_it(
    clock: ManualClock,
) -> None:
    s = demand(clock, {1: None}, {"m": 1.0})
    seed(s, "m", {1: ms(10)})
    for i, seconds in enumerate(PRE_WARM_LOADS):
        s.loads.observe(f"warm{i}", 1, seconds)
    assert s.durations.load_time("m") == pytest.approx(ms(140))  # not the slowest alone
    with pytest.raises(ColdStartTooSlow, match="takes ~140 ms"):
        s.submit(request(clock, "r1", ms(100), model="m"))
    # Nothing is queued, so nothing is loaded for demand; without a probe the next request
    # would be refused on the same estimate, for ever.
    [probe] = s.poll().dispatches
    assert (probe.worker, probe.kind, probe.model, probe.requests) == (1, LOAD, "m", [])
    assert probe.expected == pytest.approx(ms(140))
    clock.set(ms(30))
    loaded(s, probe, ms(30))  # the load measured: 30 ms, not 140
    assert s.counters.probe_loads == s.counters.loads == 1
    s.submit(request(clock, "r2", ms(100), model="m"))  # loaded now: admitted
    [run] = s.poll().dispatches
    assert (run.kind, tags(run)) == (INFER, ["r2"])
    s.unplaced("m", 1)  # evicted later: its own load (30 ms) is what its next cold start costs
    assert s.durations.load_time("m") == pytest.approx(ms(30))
    s.complete(run.id, ms(10))
    s.submit(request(clock, "r3", ms(100), model="m"))
    [load] = s.poll().dispatches
    assert (load.kind, load.model) == (LOAD, "m")
    assert s.counters.rejected_at_admission == 1


def test_probe_loads_refine_the_never_loaded_estimate_until_cold_starts_are_admitted(
    clock: ManualClock,
) -> None:
    models = [f"m{i}" for i in range(40)]
    s = demand(clock, {1: None}, dict.fromkeys(models, 1.0))
    for i, seconds in enumerate(PRE_WARM_LOADS):
        s.loads.observe(f"warm{i}", 1, seconds)
    admitted = None
    for key in models:
        seed(s, key, {1: ms(10)})
        try:
            s.submit(request(clock, key, ms(100), model=key))
        except ColdStartTooSlow:
            pass
        else:
            admitted = key
            break
        clock.advance(1.0)  # past the worker's probe duty
        [probe] = s.poll().dispatches
        assert (probe.kind, probe.model) == (LOAD, key)
        loaded(s, probe, ms(30))
        s.unplaced(key, 1)
    # each model refused was measured; once fast loads are most of the pool, never-loaded
    # models' cold starts are admitted (20 + 10 <= 100) without any probe
    assert admitted is not None
    assert s.durations.load_time("never") <= ms(90)  # type: ignore[operator]
    assert s.counters.probe_loads == models.index(admitted)


def test_a_probe_load_never_takes_a_worker_from_queued_work(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"x": 1.0, "m": 1.0})
    seed(s, "x", {1: ms(20)})
    seed(s, "m", {1: ms(10)})
    s.loads.observe("x", 1, ms(200))
    s.placed("x", 1)
    s.submit(request(clock, "x1", 1.0, model="x"))
    s.submit(request(clock, "x2", 1.0, model="x"))
    with pytest.raises(ColdStartTooSlow):
        s.submit(request(clock, "m1", ms(100), model="m"))
    [run] = s.poll().dispatches  # the queued work first
    assert (run.kind, tags(run)) == (INFER, ["x1", "x2"])
    assert s.poll().dispatches == []  # nothing beside an action in flight
    clock.set(ms(20))
    s.complete(run.id, ms(20))
    [probe] = s.poll().dispatches  # idle, nothing queued: now it measures
    assert (probe.kind, probe.model, probe.evict) == (LOAD, "m", [])


def test_a_probe_load_makes_room_as_a_demand_load_does(clock: ManualClock) -> None:
    s = demand(clock, {1: 10.0}, {"x": 10.0, "m": 10.0})
    seed(s, "x", {1: ms(20)})
    seed(s, "m", {1: ms(10)})
    s.loads.observe("x", 1, ms(200))
    s.placed("x", 1, size_mb=10.0)
    with pytest.raises(ColdStartTooSlow):
        s.submit(request(clock, "m1", ms(100), model="m"))
    [probe] = s.poll().dispatches  # x is idle (nothing queued for the worker): evicted
    assert (probe.worker, probe.kind, probe.model, probe.evict) == (1, LOAD, "m", ["x"])
    assert s.placement.replicas("x") == set()


def test_a_refusal_on_a_models_own_trusted_loads_is_a_verdict(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"m": 1.0})
    seed(s, "m", {1: ms(10)})
    for seconds in (ms(200), ms(210), ms(220)):  # loaded three times, slow each time
        s.loads.observe("m", 1, seconds)
    with pytest.raises(ColdStartTooSlow, match="takes ~210 ms"):
        s.submit(request(clock, "r1", ms(100), model="m"))
    assert s.poll().dispatches == []
    assert s.counters.probe_loads == 0


def test_probe_loads_take_at_most_their_duty_of_a_worker(clock: ManualClock) -> None:
    s = demand(clock, {1: None}, {"a": 1.0, "b": 1.0})
    for key in ("a", "b"):
        seed(s, key, {1: ms(10)})
    for i, seconds in enumerate(PRE_WARM_LOADS):
        s.loads.observe(f"warm{i}", 1, seconds)
    for key in ("a", "b"):
        with pytest.raises(ColdStartTooSlow):
            s.submit(request(clock, key, ms(100), model=key))
    [first] = s.poll().dispatches
    assert first.model == "a"
    clock.set(ms(150))
    loaded(s, first, ms(150))  # slow: the pool's estimate stays above the SLO
    due = ms(140) / LOAD_PROBE_DUTY
    clock.set(due - ms(1))
    decisions = s.poll()
    assert decisions.dispatches == []
    assert decisions.wakeup == pytest.approx(due)  # polled again when the next is due
    clock.set(due)
    [second] = s.poll().dispatches
    assert (second.kind, second.model) == (LOAD, "b")
