"""InferLine's coarse-grained baselines on pipelines whose units can be sized by hand."""

from __future__ import annotations

import numpy as np
import pytest

from headway.planning.baselines import CoarseGrained, peak_rate
from headway.planning.pipeline import Configuration, StageConfig
from tests.planning.helpers import CATALOGUE, MS, PROFILES, SIZES, chain

CPU_ONLY = {"m0": {"cpu1": PROFILES["m0"]["cpu1"]}, "m1": {"cpu1": PROFILES["m1"]["cpu1"]}}


def units(kind: str, batch: int, count: int, fallback: str = "cpu1") -> Configuration:
    return Configuration(
        {
            "s0": StageConfig(kind, batch, count),
            "s1": StageConfig(kind if kind != "cpu4" else fallback, batch, count),
        }
    )


def test_the_largest_batch_whose_unit_latency_meets_the_slo_replicated_for_the_rate() -> None:
    cg = CoarseGrained(chain(1.0, 1.0), CPU_ONLY, CATALOGUE, SIZES, fallback="cpu1")
    # the unit's latency at batch b: (10 + 2 (b - 1)) + (20 + 4 (b - 1)) ms
    assert [round(cg.latency("cpu1", b) / MS, 6) for b in SIZES] == [30, 36, 48, 72]
    # at batch 4: m0 takes 4 / 16 ms = 250 queries/s, m1 4 / 32 ms = 125
    assert cg.throughput("cpu1", 4) == pytest.approx(125)
    assert cg.deployment(50 * MS, 300) == units("cpu1", 4, 3)  # ceil(300 / 125)
    assert cg.deployment(50 * MS, 250) == units("cpu1", 4, 2)
    assert cg.deployment(29 * MS, 10) is None  # batch 1 alone takes 30 ms


def test_a_unit_counts_the_share_of_each_batch_a_model_sees() -> None:
    cg = CoarseGrained(chain(1.0, 0.5), CPU_ONLY, CATALOGUE, SIZES, fallback="cpu1")
    # batch 4: m0 16 ms, then m1 on 2 rows 24 ms; batch 8: 24 + 32 = 56 ms
    assert cg.latency("cpu1", 4) == pytest.approx(40 * MS)
    assert cg.latency("cpu1", 8) == pytest.approx(56 * MS)
    # m1 sees half the queries: 125 / 0.5 = 250 queries/s, as m0's
    assert cg.throughput("cpu1", 4) == pytest.approx(250)
    assert cg.deployment(50 * MS, 300) == units("cpu1", 4, 2)


def test_the_fastest_kind_and_the_cheapest() -> None:
    cg = CoarseGrained(chain(1.0, 1.0), PROFILES, CATALOGUE, SIZES, fallback="cpu1")
    # gpu: batch 8 in 6 + 12 = 18 ms, 8 / 12 ms = 667 queries/s: one unit, $6/h
    # cpu4 (m1 on the fallback cpu1): batch 4 in 8 + 32 = 40 ms, 125 queries/s: 3 units, $1.5/h
    # cpu1: batch 4, 125 queries/s: 3 units, $0.6/h
    assert cg.latency("cpu4", 4) == pytest.approx(40 * MS)
    assert cg.units("cpu4", 4, 3) == units("cpu4", 4, 3)
    fastest = cg.deployment(50 * MS, 300, "fastest")
    cheapest = cg.deployment(50 * MS, 300, "cheapest")
    assert fastest == units("gpu", 8, 1) and fastest.cost(CATALOGUE) == pytest.approx(6.0)
    assert cheapest == units("cpu1", 4, 3) and cheapest.cost(CATALOGUE) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="fastest"):
        cg.deployment(50 * MS, 300, "best")


def test_the_peak_is_the_busiest_window_of_the_given_length() -> None:
    arrivals = np.array([0.0, 0.01, 0.02, 1.0])
    assert peak_rate(arrivals, 0.1) == pytest.approx(30.0)  # three in 100 ms
    assert peak_rate(arrivals, 2.0) == pytest.approx(2.0)


def test_a_model_profiled_on_neither_kind_runs_on_its_cheapest_profiled_kind() -> None:
    only_gpu = {"m0": PROFILES["m0"], "m1": {"gpu": PROFILES["m1"]["gpu"]}}
    cg = CoarseGrained(chain(1.0, 1.0), only_gpu, CATALOGUE, SIZES, fallback="cpu1")
    assert cg.units("cpu4", 4, 1) == Configuration(
        {"s0": StageConfig("cpu4", 4, 1), "s1": StageConfig("gpu", 4, 1)}
    )
    assert cg.deployment(50 * MS, 300) is not None
