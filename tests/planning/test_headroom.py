"""A plan leaves a share of its SLO, and of each stage's throughput, unused: its headroom."""

from __future__ import annotations

import pytest

from headway.errors import ConfigError
from headway.planning.planner import HEADROOM, Planner
from headway.planning.workloads import ArrivalSpec, arrival_times
from tests.planning.helpers import CATALOGUE, MS, PROFILES, chain, flat

TRACE = arrival_times(ArrivalSpec(130, 10, cv=1.0, seed=2))


def test_the_plan_meets_the_slo_less_its_headroom_and_loads_no_stage_past_the_rest() -> None:
    edge = Planner(chain(1.0, 0.5), PROFILES, CATALOGUE, TRACE, 60 * MS, headroom=0.0).plan()
    kept = Planner(chain(1.0, 0.5), PROFILES, CATALOGUE, TRACE, 60 * MS).plan()
    assert HEADROOM == 0.2
    assert edge.feasible and kept.feasible
    assert kept.p99 <= 0.8 * 60 * MS
    assert max(kept.utilisation.values()) <= 0.8 + 1e-9
    assert max(edge.utilisation.values()) > 0.8 or edge.p99 > 0.8 * 60 * MS  # on the edge
    assert kept.cost_per_hour > edge.cost_per_hour


def test_a_stage_is_given_the_replicas_its_headroom_needs_without_an_estimate() -> None:
    # 100 queries/s a replica at 10 ms: 190 queries/s need 2 replicas below throughput, 3
    # at most 80% loaded
    steady = [i / 190 for i in range(190 * 4)]
    planner = Planner(chain(1.0), {"m0": {"cpu1": flat(10)}}, CATALOGUE, steady, 100 * MS)
    assert planner.least_replicas(planner.initial().with_stage("s0", hardware="cpu1"), "s0") == 3
    plan = planner.plan()
    assert plan.config is not None and plan.config["s0"].replicas == 3


def test_an_slo_that_fits_but_leaves_no_headroom_is_refused_saying_so() -> None:
    # the critical path is 7.5 ms on the fastest kinds: within 8 ms, not within 80% of it
    plan = Planner(chain(1.0, 0.5), PROFILES, CATALOGUE, TRACE, 8 * MS).plan()
    assert not plan.feasible
    assert "7.5 ms" in plan.reason and "20% headroom" in plan.reason
    assert Planner(chain(1.0, 0.5), PROFILES, CATALOGUE, TRACE, 8 * MS, headroom=0).plan().feasible


@pytest.mark.parametrize("headroom", [-0.1, 1.0, 1.5])
def test_a_headroom_outside_0_to_1_is_refused(headroom: float) -> None:
    with pytest.raises(ConfigError, match="headroom"):
        Planner(chain(1.0), PROFILES, CATALOGUE, TRACE, 60 * MS, headroom=headroom)
