"""A pipeline's queries through the simulated server (`run_pipeline`): exact latencies on cases
worked by hand (the scheduler-level loop the planner ran on before, `Simulation.drive`, gave the
same on each), and replicas added and removed through `Controller.scale` while it runs."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from tests.planning.helpers import MS

from headway.control.policy import HEADWAY
from headway.errors import HeadwayError
from headway.planning.simulator import reach_draws
from headway.sim import ModelProfile
from headway.sim.pipeline import PipelineRun, run_pipeline
from headway.sim.server import ServerSimulation

#: No early rejection and far deadlines: every batch the greedy one.
PLANNING = replace(HEADWAY, name="planning", early_reject=False)
FAR = 1e6


def profile(ms: float, max_batch: int = 1, per_row_ms: float = 0.0) -> ModelProfile:
    durations = {b: (ms + per_row_ms * (b - 1)) * MS for b in range(1, max_batch + 1)}
    return ModelProfile(durations, load_seconds=0.0, size_mb=0.0, max_batch=max_batch)


def server(profiles: dict[str, ModelProfile], **options: float) -> ServerSimulation:
    return ServerSimulation(
        profiles,
        workers=len(profiles),
        policy=PLANNING,
        rpc_seconds=0.0,
        seed_profiles=True,
        slo_ms=FAR * 1e3,
        **options,  # type: ignore[arg-type]
    )


def run(
    profiles: dict[str, ModelProfile],
    parents: list[list[int]],
    times: np.ndarray,
    reaches: np.ndarray | None = None,
    **options: float,
) -> PipelineRun:
    if reaches is None:
        reaches = np.ones((len(times), len(profiles)), dtype=bool)
    with server(profiles, **options) as sim:
        return run_pipeline(sim, list(profiles), parents, reaches, times, timeout=FAR)


def test_one_stage_with_deterministic_service_gives_exact_latencies() -> None:
    times = np.array([0.0, 5.0, 10.0, 100.0]) * MS
    ran = run({"s0": profile(10)}, [[]], times)
    # the second and third queue behind the first: 10, 15, 20 ms; the fourth finds it idle
    assert ran.latencies / MS == pytest.approx([10.0, 15.0, 20.0, 10.0])
    assert ran.complete


def test_a_stage_batches_what_queued_up_to_its_max_batch() -> None:
    times = np.array([0.0, 1.0, 2.0, 3.0]) * MS
    ran = run({"s0": profile(10, max_batch=2, per_row_ms=2)}, [[]], times)
    # 0 runs alone (0-10); 1 and 2 together (10-22); 3 alone (22-32)
    assert ran.latencies / MS == pytest.approx([10.0, 21.0, 20.0, 29.0])


def test_a_join_waits_for_both_parents() -> None:
    profiles = {"a": profile(10), "b": profile(30), "c": profile(5)}
    ran = run(profiles, [[], [], [0, 1]], np.array([0.0, 1.0]))
    assert ran.latencies / MS == pytest.approx([35.0, 35.0])


def test_a_cascade_branch_runs_only_for_the_queries_that_reach_it() -> None:
    times = np.arange(4000) * 0.1  # far apart: no queueing
    reaches = reach_draws(len(times), 3)[:, None] < np.array([1.0, 0.3])
    ran = run({"s0": profile(10), "s1": profile(20)}, [[], [0]], times, reaches)
    # queries that went on to the second model took 30 ms; the rest 10 ms
    assert np.isclose(ran.latencies, 0.030).tolist() == reaches[:, 1].tolist()
    assert set(np.round(ran.latencies / MS, 6)) == {10.0, 30.0}


def test_a_query_that_reaches_no_stage_is_done_at_its_arrival() -> None:
    reaches = np.array([[True], [False], [True]])
    ran = run({"s0": profile(10)}, [[]], np.array([0.0, 1.0, 2.0]), reaches)
    assert ran.latencies / MS == pytest.approx([10.0, 0.0, 10.0])


def test_a_stage_called_after_the_querys_deadline_fails_the_replay_as_a_served_flows_does() -> None:
    """The simulator's calls go through the served flow's own (`flows.calls.call`): the second
    stage's call, made 10 ms into a 5 ms deadline, is not made."""
    late = re.escape("the flow's deadline (5 ms) passed before s1 could run")
    with (
        server({"s0": profile(10), "s1": profile(10)}) as sim,
        pytest.raises(HeadwayError, match=late),
    ):
        run_pipeline(
            sim, ["s0", "s1"], [[], [0]], np.ones((1, 2), bool), np.zeros(1), timeout=0.005
        )


def test_the_replay_gives_up_once_too_many_queries_took_longer() -> None:
    times = np.arange(2000) * 0.005  # 200 queries/s at 100/s of capacity
    with server({"s0": profile(10)}) as sim:
        ran = run_pipeline(
            sim, ["s0"], [[]], np.ones((2000, 1), bool), times, timeout=FAR, give_up=0.05
        )
    assert not ran.complete
    assert np.count_nonzero(~np.isnan(ran.finished)) < 1000  # it stopped early


def test_give_up_counts_queries_still_open_past_it() -> None:
    # One replica taking 1 s per query, a query every millisecond: after 50 ms + 22 ms, 22
    # queries (1% of 2000, and 2) have been open longer than 50 ms, and the replay stops then,
    # before the first answer at 1 s (counting only answered queries, it ran to 22 s)
    times = np.arange(2000) * 0.001
    with server({"s0": profile(1000)}) as sim:
        ran = run_pipeline(
            sim, ["s0"], [[]], np.ones((2000, 1), bool), times, timeout=FAR, give_up=0.05
        )
    assert not ran.complete
    assert np.count_nonzero(~np.isnan(ran.finished)) == 0


def replicas_added_at_start(down_at: float | None = None) -> np.ndarray:
    """One stage of 10 ms, a query every 2 ms; at the first arrival the controller is asked
    for a second replica, ready 15 ms later; with `down_at`, for one again then."""
    with server({"m": profile(10)}, startup=0.015) as sim:
        begun = sim.start()
        sim.at(begun, lambda: sim.controller.scale("m", 2))
        if down_at is not None:
            sim.at(begun + down_at, lambda: sim.controller.scale("m", 1))
        ran = run_pipeline(
            sim, ["m"], [[]], np.ones((8, 1), bool), np.arange(8) * 2 * MS, timeout=FAR
        )
        assert sim.controller.model("m").workers == ({0, 1} if down_at is None else {0})
    return np.round(ran.latencies / MS, 6)  # type: ignore[no-any-return]


def test_a_replica_asked_for_serves_once_its_worker_has_started() -> None:
    # The first replica runs 0-10, 10-20 (sent ahead at 10), 20-30, ...; the second starts at
    # 15 ms and takes the oldest query not already sent (3, arrived at 6 ms): 15-25, and so on
    # alternately: 4 on the second (25-35), 5 on the first (30-40), ...
    assert replicas_added_at_start().tolist() == [10, 18, 26, 19, 27, 30, 33, 36]


def test_a_replica_removed_runs_nothing_more_and_its_queries_run_again_elsewhere() -> None:
    # At 31 ms the second replica is retired while it runs query 4 (25-35) with query 6 sent
    # ahead to it: both go back to the queue and run on the first after what it holds (5 and
    # 7): 4 at 50-60, 6 at 60-70 -- as the server retries a retired worker's requests.
    assert replicas_added_at_start(down_at=0.031).tolist() == [10, 18, 26, 19, 52, 30, 58, 36]
