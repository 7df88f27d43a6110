"""The planner's search on a prefix of a long trace, confirmed on the whole of it."""

from __future__ import annotations

import numpy as np
import pytest

from headway.planning.pipeline import Configuration, StageConfig
from tests.planning.helpers import CATALOGUE, MS, at_slo, chain, flat

#: one stage, 10 ms a query on cpu1, batch 1 only: one replica serves 100 queries/s
PROFILES = {"m0": {"cpu1": flat(10)}}


def steady(rate: float, queries: int, start: float = 0.0) -> np.ndarray:
    return start + np.arange(queries) / rate


def test_a_steady_trace_is_planned_on_its_prefix_and_confirmed_on_the_whole() -> None:
    # 150 queries/s needs two replicas whatever part of the trace is replayed
    arrivals = steady(150, 600)
    whole = at_slo(chain(1.0), PROFILES, CATALOGUE, arrivals, 15 * MS, screen=None).plan()
    screened = at_slo(chain(1.0), PROFILES, CATALOGUE, arrivals, 15 * MS, screen=200).plan()
    assert whole.config is not None and screened.config is not None
    assert screened.config == whole.config == Configuration({"s0": StageConfig("cpu1", 1, 2)})
    assert whole.screened == 600 and screened.screened == 200
    assert screened.p99 == pytest.approx(10 * MS)  # replayed on all 600 queries
    assert screened.steps[-2:] == [
        "$0.200/h meets the goal on the whole trace (600 queries): P99 10.0 ms",
        "InferLine's descent on the whole trace",  # one replica fewer is over its throughput
    ]


def test_a_burst_after_the_prefix_adds_replicas_until_the_whole_trace_meets_the_slo() -> None:
    # 6 s at 50 queries/s (one replica keeps every query at 10 ms), then 1 s at 150 queries/s:
    # one replica's queue grows by 50 queries over that second, most of them over 100 ms
    arrivals = np.concatenate([steady(50, 300), steady(150, 150, start=6.0)])
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, arrivals, 100 * MS, screen=300)
    one = Configuration({"s0": StageConfig("cpu1", 1, 1)})
    assert p.feasible(one)  # on the prefix
    plan = p.plan()
    assert plan.config == Configuration({"s0": StageConfig("cpu1", 1, 2)})
    assert plan.p99 == pytest.approx(10 * MS)
    assert p.whole(one).p99 > 100 * MS
    assert plan.steps[-3:] == [
        "$0.100/h misses the goal on the whole trace",
        "add a replica to the bottleneck s0 (the whole trace)",
        "InferLine's descent on the whole trace",
    ]


def test_a_prefix_burstier_than_the_whole_trace_is_undone_on_the_whole() -> None:
    # five queries at once, then 20 queries/s: one replica answers the five at 10, 20, 30, 40
    # and 50 ms, two of them over 35 ms: 2% of a 100-query prefix, 0.2% of the whole trace
    arrivals = np.concatenate([np.zeros(5), steady(20, 995, start=0.1)])
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, arrivals, 35 * MS, screen=100, margin=0.0)
    one = Configuration({"s0": StageConfig("cpu1", 1, 1)})
    assert not p.feasible(one)
    plan = p.plan()
    assert plan.config == one
    assert plan.p99 == pytest.approx(10 * MS)
    assert plan.steps[-3:] == [
        "$0.200/h meets the goal on the whole trace (1,000 queries): P99 10.0 ms",
        "InferLine's descent on the whole trace",
        "RemoveReplica on s0: $0.100/h",
    ]
    prefix_only = at_slo(
        chain(1.0), PROFILES, CATALOGUE, arrivals, 35 * MS, screen=100, margin=0.0, polish=0
    ).plan()
    assert prefix_only.config == Configuration({"s0": StageConfig("cpu1", 1, 2)})


def test_the_prefix_keeps_a_margin_of_the_slo() -> None:
    arrivals = steady(50, 200)
    one = Configuration({"s0": StageConfig("cpu1", 1, 1)})
    args = (chain(1.0), PROFILES, CATALOGUE, arrivals, 10.5 * MS)
    # every query takes 10 ms: within the SLO, not within 90% of it
    assert at_slo(*args, screen=100, margin=0.0).feasible(one)
    assert not at_slo(*args, screen=100, margin=0.1).feasible(one)
    # the whole trace is no longer than the prefix: no margin
    assert at_slo(*args, screen=200, margin=0.1).feasible(one)


def test_no_margin_where_the_critical_path_alone_takes_more() -> None:
    # 10 ms of service against a 10.5 ms SLO: with 10% held back, nothing would be feasible
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, steady(50, 200), 10.5 * MS, screen=100)
    plan = p.plan()
    assert plan.config == Configuration({"s0": StageConfig("cpu1", 1, 1)})
    assert plan.steps[0] == "no margin on the prefix: the critical path alone takes more"
