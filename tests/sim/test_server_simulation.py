"""The simulator runs the server's own controller: a scenario taken from a live server gives
the live server's outcome, and what the controller adds to the scheduler (warm-up runs after a
load, probes after a refusal, the cache) happens in the simulation as it does in the server.

The scenario is `tests/integration/test_sharing_a_worker.py`'s: one worker, a fast model and
one that takes 0.6 s whatever the batch. There, hopeless requests to the slow model (1 ms
deadlines, 20 a second) are each answered 503 "deadline cannot be met" and start no probe, and
a request to the fast model that arrives later is answered within its SLO.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from headway.api.metrics import ControllerCollector
from headway.sim import ModelProfile
from headway.sim.server import ServerSimulation

SLOW = ModelProfile({1: 0.6, 2: 0.6, 4: 0.6, 8: 0.6}, load_seconds=0.05, size_mb=10, max_batch=8)
FAST = ModelProfile({1: 0.001, 2: 0.0012, 4: 0.0015, 8: 0.002}, 0.05, 10, max_batch=8)


def sharing() -> ServerSimulation:
    return ServerSimulation({"fast": FAST, "slow": SLOW}, workers=1, slo_ms=1000.0)


def test_hopeless_requests_are_refused_at_once_and_start_no_probe_of_the_slow_model() -> None:
    with sharing() as sim:
        sim.start()
        warmed = sim.batches("slow")
        assert warmed > 0  # the warm-up runs after its load ran, as in the server
        hopeless = np.arange(10) * 0.05  # 20 a second
        result = sim.run(hopeless, ["slow"] * 10, slo=0.001, drain=1.2)
        summary = result.summary()
        assert summary["rejected"] == 10 and summary["reasons"] == {"deadline": 10}
        assert np.allclose(result.finished, result.arrivals)  # refused on arrival, not later
        late = sim.run(np.array([0.0]), ["fast"], drain=1.0)
        assert sim.batches("slow") == warmed  # no probe of the slow model took the worker
        assert late.summary()["on_time"] == 1
        assert late.finished[0] - late.arrivals[0] < 0.01


def test_with_a_memory_budget_models_load_on_demand_and_evict_each_other() -> None:
    # Each model fits alone in the worker's 15 MB; a request to the other one evicts it.
    with ServerSimulation({"a": FAST, "b": FAST}, workers=1, memory_mb=15.0) as sim:
        result = sim.run(np.array([0.0, 0.5, 1.0]), ["a", "b", "a"], drain=0.5)
    summary = result.summary()
    assert summary["on_time"] == 3
    assert summary["loads"] == 3 and summary["evictions"] == 2
    # each answer waited for its model's 50 ms load (cold start), then ran
    assert np.all(result.finished - result.arrivals > FAST.load_seconds)


@pytest.mark.parametrize("cache", [False, True])
def test_the_prediction_cache_answers_repeats_without_a_batch(cache: bool) -> None:
    with ServerSimulation({"m": FAST}, workers=1, cache=cache) as sim:
        sim.run(np.array([0.0]), ["m"], drain=0.1)
        ran = sim.batches("m")
        result = sim.run(np.array([0.0, 0.01]), ["m", "m"], drain=0.1)
        repeated = sim.batches("m") - ran
    assert result.summary()["on_time"] == 2
    # each run's requests carry inputs by their index: the second run's first repeats the
    # first run's, and with a cache it is answered from there
    assert repeated == (1 if cache else 2)


def test_cold_starts_refused_on_slow_pre_warm_loads_do_not_stay_refused() -> None:
    # Four pre-warm loads slowed by a busy machine (the slowest 146 ms) against a 100 ms SLO,
    # then models that load in 30 ms, four of six fitting at once: every cold start was refused
    # and nothing loaded, for ever.
    profile = ModelProfile({1: 0.002, 2: 0.003, 4: 0.004, 8: 0.005}, 0.03, 10, max_batch=8)
    names = [f"m{i}" for i in range(6)]
    with ServerSimulation(dict.fromkeys(names, profile), workers=2, memory_mb=20.0) as sim:
        sim.start()
        for i, seconds in enumerate((0.12, 0.13, 0.14, 0.146)):
            sim.controller.scheduler.loads.observe(f"warm{i}", 1, seconds)
        times = np.arange(120) * 0.05  # 20 a second for 6 s, the models in turn
        result = sim.run(times, [names[i % len(names)] for i in range(120)], slo=0.1)
    summary = result.summary()
    counters = sim.controller.scheduler.counters
    assert counters.probe_loads > 0  # refusals measured loads ...
    assert counters.loads > counters.probe_loads  # ... then cold starts were admitted
    assert summary["on_time"] > 90  # most answered on time (before: 0 of 120, no load)
    scraped = {m.name: m for m in ControllerCollector(sim.controller).collect()}
    assert [(s.labels, s.value) for s in scraped["headway_probe_loads"].samples] == [
        ({"model": name}, 1.0)
        for name in names  # each model measured once
    ]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_replay_pauses_the_garbage_collector_and_leaves_it_as_it_found_it(
    enabled: bool,
) -> None:
    seen: list[bool] = []
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        with sharing() as sim:
            sim.replay(np.array([0.0, 0.01]), lambda index: seen.append(gc.isenabled()), drain=0.1)
        assert seen == [False, False]
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
