"""The planner refuses an SLO under what no configuration can beat, before any estimate."""

from __future__ import annotations

import numpy as np
import pytest

from headway.planning.bounds import frontend_waits
from headway.planning.pipeline import LatencyProfile
from headway.planning.planner import Planner
from headway.planning.workloads import ArrivalSpec, arrival_times
from tests.planning.helpers import CATALOGUE, MS, chain, flat

TRACE = arrival_times(ArrivalSpec(50, 20, cv=1.0, seed=1))


def test_the_frontend_s_waits_are_one_queue_one_query_at_a_time() -> None:
    waits = frontend_waits(np.array([0.0, 0.0, 0.5, 10.0]), 1.0)
    assert waits == pytest.approx([1.0, 2.0, 2.5, 1.0])
    assert not frontend_waits(np.array([0.0, 1.0]), 0.0).any()


def test_an_slo_under_the_models_own_tail_is_refused_before_any_estimate() -> None:
    tailed = {
        "m0": {"cpu1": LatencyProfile({1: 10 * MS, 4: 14 * MS}, p99={1: 60 * MS, 4: 70 * MS})}
    }
    planner = Planner(chain(1.0), tailed, CATALOGUE, TRACE, 30 * MS, spread=True)
    plan = planner.plan()
    assert not plan.feasible
    assert "own tail" in plan.reason and "30.0 ms" in plan.reason
    assert planner.replays == 0 and planner.greedy == 0
    # InferLine's estimator (each batch at its mean) has no tail to refuse
    assert Planner(chain(1.0), tailed, CATALOGUE, TRACE, 30 * MS).plan().feasible


def test_the_tail_bound_takes_each_stage_s_kind_and_batch_of_least_tail() -> None:
    # batch 1 on cpu1 has a tail far over the SLO; batch 4 on cpu4 does not
    profiles = {
        "m0": {
            "cpu1": LatencyProfile({1: 10 * MS}, p99={1: 80 * MS}),
            "cpu4": LatencyProfile({1: 8 * MS, 4: 9 * MS}, p99={1: 70 * MS, 4: 12 * MS}),
        }
    }
    planner = Planner(chain(1.0), profiles, CATALOGUE, TRACE, 30 * MS, spread=True)
    plan = planner.plan()
    assert "own tail" not in plan.reason  # searched, not refused from the bound
    assert planner.greedy > 0


def test_the_critical_path_counts_the_frontend_s_queue() -> None:
    # 2 ms a query in the frontend at 400 queries/s in bursts: its queue alone is over 20 ms
    bursty = arrival_times(ArrivalSpec(400, 10, cv=4.0, seed=2))
    planner = Planner(
        chain(1.0), {"m0": {"cpu1": flat(1)}}, CATALOGUE, bursty, 20 * MS, frontend_seconds=2 * MS
    )
    plan = planner.plan()
    assert not plan.feasible and "critical path" in plan.reason and "frontend" in plan.reason
    assert planner.replays == 0


def test_a_stage_beyond_the_most_replicas_is_refused_from_its_throughput() -> None:
    flood = np.arange(200_000) / 100_000.0  # 100,000 queries/s; 100 a second a replica
    planner = Planner(chain(1.0), {"m0": {"cpu1": flat(10)}}, CATALOGUE, flood, 1.0)
    plan = planner.plan()
    assert not plan.feasible and "more than 256 replicas" in plan.reason
    assert planner.replays == 0 and planner.greedy == 0
