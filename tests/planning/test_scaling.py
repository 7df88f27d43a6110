"""Replica counts that change during a replay: the tuner and the utilisation baseline."""

from __future__ import annotations

import numpy as np
import pytest

from headway.planning.envelope import envelope, window_lengths
from headway.planning.pipeline import Configuration, StageConfig
from headway.planning.plan_file import PlanFile, PlannedStage
from headway.planning.scaling import TunerScaling, UtilisationScaling
from headway.planning.simulator import simulate
from tests.planning.helpers import chain, flat

PROFILES = {"m0": {"cpu1": flat(10)}}  # 100 queries/s per replica


def steady(start: float, end: float, rate: float) -> np.ndarray:
    return start + np.arange(int((end - start) * rate)) / rate


def spiky() -> np.ndarray:
    """64 queries/s, three times that from 20 s to 30 s, then 64/s again until 60 s."""
    return np.concatenate([steady(0, 20, 64), np.repeat(steady(20, 30, 64), 3), steady(30, 60, 64)])


def plan() -> PlanFile:
    lengths = window_lengths(0.25)
    stage = PlannedStage("s0", "m0", "cpu1", 1, 1, 1.0, throughput_qps=100.0, utilisation=0.64)
    return PlanFile("app", 100.0, 64.0, envelope(steady(0, 60, 64), lengths), (stage,))


def test_the_tuner_adds_replicas_for_a_spike_and_pays_for_them() -> None:
    config = Configuration({"s0": StageConfig("cpu1", 1, 1)})
    static = simulate(chain(1.0), config, PROFILES, spiky())
    tuned = TunerScaling(plan(), {"s0": 1.0}, startup=0.5)
    scaled = simulate(chain(1.0), config, PROFILES, spiky(), scaling=tuned)
    # one replica cannot keep up with 192/s: its queue grows through the spike
    assert static.attainment(0.1) < 0.9
    assert scaled.attainment(0.1) > static.attainment(0.1)
    counts = tuned.replicas_at(np.array([10.0, 25.0, 59.0]))["s0"]
    assert counts[0] == 1 and counts[1] >= 3  # ceil(3 * 64 / (100 * 0.64)) = 3
    assert 1.0 < tuned.cost_per_hour() < 3.0
    assert tuned.reasons[0][4].startswith("0.25 s window")


def test_the_utilisation_autoscaler_follows_busy_time() -> None:
    config = Configuration({"s0": StageConfig("cpu1", 1, 1)})
    reactive = UtilisationScaling({"s0": 1.0}, startup=0.5, window=2.0)
    scaled = simulate(chain(1.0), config, PROFILES, spiky(), scaling=reactive)
    counts = reactive.replicas_at(np.array([10.0, 29.0]))["s0"]
    assert counts[0] == 1 and counts[1] >= 2
    assert "busy over the last 2 s" in reactive.reasons[0][4]
    assert scaled.complete
    assert reactive.cost_per_hour() == pytest.approx(
        sum(
            (end - start) * counts["s0"]
            for (start, counts), (end, _) in zip(
                reactive.timeline, [*reactive.timeline[1:], (spiky()[-1], {})], strict=True
            )
        )
        / spiky()[-1]
    )
