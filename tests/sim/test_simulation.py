"""The simulated server and workers: exact timings on hand-worked cases, and the policies
compared."""

from __future__ import annotations

import numpy as np
import pytest

from headway.control.actions import INFER, LOAD, Dispatch
from headway.control.scheduling_policy import CLIPPER, HEADWAY, SchedulingPolicy
from headway.sim import ModelProfile, ServerSimulation, SimulationResult
from headway.sim.worker import SimulatedWorker

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


def test_worker_runs_actions_in_order_and_refuses_late_ones() -> None:
    worker = SimulatedWorker(0, lambda key, rows: 0.05 if rows == 0 else 0.01 * rows)
    load = Dispatch(1, 0, LOAD, "m")
    assert worker.execute(load, arrives=0.0).finished == pytest.approx(0.05)
    infer = Dispatch(2, 0, INFER, "m", rows=2)
    assert worker.execute(infer, arrives=0.01).finished == pytest.approx(0.07)  # queued behind
    late = Dispatch(3, 0, INFER, "m", rows=1, latest=0.06)
    assert worker.execute(late, arrives=0.065).refused
    missing = Dispatch(4, 0, INFER, "other", rows=1)
    assert worker.execute(missing, arrives=0.1).duration is None


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
