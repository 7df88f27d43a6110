"""The simulated server and workers: exact timings on hand-worked cases, and the policies
compared."""

from __future__ import annotations

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD
from headway.control.engine import Action, Reply
from headway.control.policy import CLIPPER, HEADWAY, SchedulingPolicy
from headway.sim import ModelProfile, ServerSimulation, SimulationResult
from headway.sim.workers import SimulatedEngine

PROFILE = ModelProfile({1: 0.010, 2: 0.012, 4: 0.016}, load_seconds=0.050, size_mb=100, max_batch=4)


def replay(
    profiles: dict[str, ModelProfile],
    times: np.ndarray,
    models: list[str],
    *,
    slo: float,
    policy: SchedulingPolicy = HEADWAY,
    **options: float,
) -> SimulationResult:
    """The trace through a simulated server of one worker, loading on demand; Headway starts
    from the profiles (as Clockwork does), the baseline learns them."""
    options.setdefault("memory_mb", 1000)
    with ServerSimulation(
        profiles, workers=1, policy=policy, seed_profiles=policy.profile_batching, **options
    ) as sim:
        return sim.run(times, models, slo=slo)


def test_profile_interpolates_between_and_extrapolates_beyond_measured_sizes() -> None:
    assert PROFILE.duration(1) == 0.010
    assert PROFILE.duration(3) == pytest.approx(0.014)
    assert PROFILE.duration(8) == pytest.approx(0.032)


def simulated_workers(**options: float) -> tuple[SimulatedEngine, ManualClock, list[tuple]]:
    """The simulator's workers alone: a LOAD takes 50 ms, an INFER 10 ms per row."""
    clock = ManualClock()

    def durations(worker: int, action: Action) -> float:
        return 0.05 if action["op"] == LOAD else 0.01 * action.get("rows", 1)

    engine = SimulatedEngine(1, clock=clock, durations=durations, **options)
    heard: list[tuple] = []

    def hear(worker: int, reply: Reply, tensors: object) -> None:
        heard.append((round(clock.now(), 9), worker, reply["id"], reply["ok"], "late" in reply))

    engine.on_message = hear
    engine.on_ready = lambda worker, pid: heard.append((round(clock.now(), 9), worker, "ready"))
    return engine, clock, heard


def test_simulated_workers_run_actions_in_order_and_refuse_late_ones() -> None:
    engine, clock, heard = simulated_workers()
    engine.send(0, {"op": LOAD, "id": 1, "model": "m"}, {})
    engine.send(0, {"op": INFER, "id": 2, "model": "m", "rows": 2}, {})  # queued behind
    engine.send(0, {"op": INFER, "id": 3, "model": "m", "rows": 1, "latest": 0.06}, {})
    engine.send(0, {"op": INFER, "id": 4, "model": "other", "rows": 1}, {})  # not loaded
    clock.advance(1.0)
    assert heard == [
        (0.05, 0, 1, True, False),
        (0.07, 0, 2, True, False),
        (0.07, 0, 3, False, True),  # it would have started at 0.07, after its latest start
        (0.08, 0, 4, False, False),
    ]


def test_a_grown_worker_is_ready_after_its_startup_and_a_retired_one_is_not_heard() -> None:
    engine, clock, heard = simulated_workers(startup=0.5)
    grown = engine.grow(None)  # type: ignore[arg-type]
    assert grown == 1 and engine.size == 2
    clock.advance(0.5)
    assert heard == [(0.5, 1, "ready")]
    engine.send(1, {"op": LOAD, "id": 1, "model": "m"}, {})
    assert engine.retire(1) and not engine.retire(0)  # only a worker it started
    clock.advance(1.0)
    assert heard == [(0.5, 1, "ready")]  # the LOAD's reply never came
    assert engine.retire(engine.grow(None))  # type: ignore[arg-type,arg-type]
    clock.advance(1.0)
    assert heard == [(0.5, 1, "ready")]  # retired before it started: it never does
    without = SimulatedEngine(1, clock=clock, durations=lambda worker, action: 0.0)
    assert without.grow(None) is None  # type: ignore[arg-type]  # without a startup


def test_a_lone_request_is_loaded_then_answered_on_time() -> None:
    result = replay({"m": PROFILE}, np.array([0.0]), ["m"], slo=0.2, rpc_seconds=0.001)
    # arrive 0 -> LOAD reaches the worker at 0.001, ends 0.051, reply at 0.052 ->
    # INFER reaches it at 0.053, ends 0.063, answer at 0.064.
    assert result.finished[0] == pytest.approx(0.064)
    summary = result.summary()
    assert summary["on_time"] == 1 and summary["loads"] == 1


def test_memory_share_forces_evictions() -> None:
    profiles = {f"m{i}": PROFILE for i in range(4)}
    times = np.arange(8) * 0.2
    models = [f"m{i % 4}" for i in range(8)]
    result = replay(profiles, times, models, slo=1.0, memory_mb=250, rpc_seconds=0.0)
    summary = result.summary()
    assert summary["on_time"] == 8
    assert summary["loads"] == 8 and summary["evictions"] == 6  # two fit; each new one evicts


def overload() -> tuple[np.ndarray, list[str]]:
    # One model, 10 ms per request alone, arriving every 4 ms: about 2.5x what batch 1 serves
    # and more than batches of 4 (16 ms per 4 = 4 ms each) can serve with deadlines of 50 ms.
    times = np.arange(500) * 0.003
    return times, ["m"] * 500


def test_headway_answers_nothing_late_under_overload_and_the_baseline_does() -> None:
    times, models = overload()
    ours = replay({"m": PROFILE}, times, models, slo=0.05, policy=HEADWAY)
    base = replay({"m": PROFILE}, times, models, slo=0.05, policy=CLIPPER)
    mine, theirs = ours.summary(), base.summary()
    assert mine["late"] == 0
    assert mine["rejected"] > 0
    assert theirs["late"] > 0
    assert mine["goodput_rps"] >= theirs["goodput_rps"]


def test_the_same_seed_gives_the_same_run() -> None:
    times, models = overload()
    runs = [
        replay({"m": PROFILE}, times, models, slo=0.05, noise=0.2, seed=3).summary()
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
