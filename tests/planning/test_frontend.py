"""The server's time outside the models as a frontend stage: estimates, the planner, the sums."""

from __future__ import annotations

import numpy as np
import pytest

from headway.errors import ConfigError
from headway.planning.frontend import (
    STAGE,
    frontend_row,
    frontend_seconds,
    frontend_time,
    outside_models,
    with_frontend,
)
from headway.planning.pipeline import Configuration, StageConfig
from headway.planning.planner import Planner
from headway.store.profiles import MeasuredProfile
from tests.planning.helpers import CATALOGUE, MS, at_slo, chain, flat

PROFILES = {"m0": {"cpu1": flat(10), "cpu4": flat(5), "gpu": flat(2)}}
ON_CPU1 = Configuration({"s0": StageConfig("cpu1", 1, 1)})


def planner(arrivals: list[float], slo_ms: float, frontend_ms: float) -> Planner:
    return at_slo(
        chain(1.0),
        PROFILES,
        CATALOGUE,
        np.array(arrivals),
        slo_ms * MS,
        frontend_seconds=frontend_ms * MS,
    )


def test_each_query_spends_the_frontend_time_before_the_models() -> None:
    estimate = planner([0.0, 1.0, 2.0], 100, 3).simulate(ON_CPU1)
    assert estimate.latencies == pytest.approx([13 * MS] * 3)


def test_queries_queue_for_the_frontend_one_at_a_time() -> None:
    # both arrive at 0: the frontend passes the first at 3 ms and the second at 6 ms; the one
    # replica of the model runs them from 3 to 13 ms and from 13 to 23 ms
    estimate = planner([0.0, 0.0], 100, 3).simulate(ON_CPU1)
    assert sorted(estimate.latencies) == pytest.approx([13 * MS, 23 * MS])


def test_without_a_frontend_the_estimate_is_the_models_alone() -> None:
    estimate = planner([0.0, 1.0], 100, 0).simulate(ON_CPU1)
    assert estimate.latencies == pytest.approx([10 * MS] * 2)


def test_the_frontend_takes_budget_from_the_slo_so_the_plan_needs_faster_hardware() -> None:
    spaced = [i * 0.1 for i in range(20)]  # 10 queries/s: no queueing
    without = planner(spaced, 12, 0).plan()
    assert without.config is not None and without.config["s0"].hardware == "cpu1"
    fronted = planner(spaced, 12, 4).plan()  # cpu1 would take 14 ms: over 12
    assert fronted.config is not None and fronted.config["s0"].hardware == "cpu4"
    assert fronted.p99 == pytest.approx(9 * MS)
    assert set(fronted.config.stages) == {"s0"}  # the frontend is estimated, not planned


def test_a_trace_faster_than_the_frontend_is_infeasible_and_says_why() -> None:
    steady = [i / 300 for i in range(600)]  # 300 queries/s against 4 ms per query (250/s)
    plan = planner(steady, 1000, 4).plan()
    assert not plan.feasible
    assert "4.00 ms per query outside the models" in plan.reason
    assert "at most 250 queries/s" in plan.reason


def test_the_critical_path_check_counts_the_frontend() -> None:
    plan = planner([0.0, 1.0], 5, 4).plan()  # 4 ms + 2 ms on the fastest kind
    assert not plan.feasible and "frontend included" in plan.reason and "6.0 ms" in plan.reason


def test_with_frontend_puts_the_stage_ahead_of_every_input() -> None:
    pipeline, config, profiles = with_frontend(chain(1.0, 0.5), ON_CPU1, PROFILES, 2 * MS)
    assert pipeline.names == [STAGE, "s0", "s1"]
    assert pipeline["s0"].parents == (STAGE,) and pipeline["s1"].parents == ("s0",)
    assert config[STAGE].replicas == 1 and config[STAGE].max_batch == 1
    assert profiles[STAGE]["server"].latency(1) == 2 * MS


METRICS = """# HELP headway_request_latency_seconds End-to-end latency
# TYPE headway_request_latency_seconds histogram
headway_request_latency_seconds_bucket{{model="a",le="+Inf"}} 4.0
headway_request_latency_seconds_count{{model="a"}} 4.0
headway_request_latency_seconds_sum{{model="a"}} {a}
headway_request_latency_seconds_bucket{{model="b",le="+Inf"}} 1.0
headway_request_latency_seconds_count{{model="b"}} 1.0
headway_request_latency_seconds_sum{{model="b"}} {b}
# HELP headway_queue_seconds Time a request waited
# TYPE headway_queue_seconds histogram
headway_queue_seconds_sum{{model="a"}} 9.0
"""


def test_outside_models_is_the_wait_less_the_models_change_per_query() -> None:
    before = METRICS.format(a=1.0, b=0.5)
    after = METRICS.format(a=1.04, b=0.58)  # 40 ms + 80 ms of models over 4 queries
    waits = [0.040, 0.050, 0.045, 0.045]  # 180 ms in all
    assert outside_models(waits, before, after) == pytest.approx(0.015)


CPU = """# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total {cpu}
"""


def test_the_frontend_time_is_the_servers_cpu_per_query_when_that_is_larger() -> None:
    """The event loop's CPU on each model call is in the models' latency, not outside it:
    4 queries that kept the server process busy 100 ms are 25 ms each, not the 15 ms wait."""
    before = METRICS.format(a=1.0, b=0.5) + CPU.format(cpu=7.0)
    after = METRICS.format(a=1.04, b=0.58) + CPU.format(cpu=7.1)
    waits = [0.040, 0.050, 0.045, 0.045]
    assert frontend_time(waits, before, after) == pytest.approx(0.025)
    idle = METRICS.format(a=1.04, b=0.58) + CPU.format(cpu=7.02)  # 5 ms of CPU per query
    assert frontend_time(waits, before, idle) == pytest.approx(0.015)  # the wait is larger


def test_a_server_saturated_below_its_cpu_per_query_sets_the_frontend_time() -> None:
    """Sharing the cores, the loop answered 20 queries/s at most: 50 ms each, not its 25 ms."""
    before = METRICS.format(a=1.0, b=0.5) + CPU.format(cpu=7.0)
    after = METRICS.format(a=1.04, b=0.58) + CPU.format(cpu=7.1)
    waits = [0.040, 0.050, 0.045, 0.045]
    assert frontend_time(waits, before, after, saturated_qps=20.0) == pytest.approx(0.050)
    assert frontend_time(waits, before, after, saturated_qps=100.0) == pytest.approx(0.025)


def test_without_the_process_cpu_the_frontend_time_is_the_wait_outside_the_models() -> None:
    before, after = METRICS.format(a=1.0, b=0.5), METRICS.format(a=1.04, b=0.58)
    assert frontend_time([0.040, 0.050, 0.045, 0.045], before, after) == pytest.approx(0.015)


def test_outside_models_needs_answered_queries() -> None:
    with pytest.raises(ConfigError, match="no query was answered"):
        outside_models([], "", "")


def test_a_kept_frontend_row_is_found_by_app() -> None:
    rows = [
        MeasuredProfile("m0", "cpu1", 1, 0.01),
        frontend_row("cascade", 0.002, samples=100),
        frontend_row("other", 0.009, samples=100),
    ]
    assert frontend_seconds(rows, "cascade") == pytest.approx(0.002)
    assert frontend_seconds(rows, "missing") is None
