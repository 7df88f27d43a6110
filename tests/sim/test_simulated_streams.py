"""Streamed requests to a generative model through the simulated server: the scheduler's own
iteration-level batching, stepped by simulated workers in virtual time."""

from __future__ import annotations

import numpy as np

from headway.repository import REQUEST, Generation
from headway.sim import ModelProfile, ServerSimulation, StreamsResult

#: A step of 1 sequence takes 10 ms, of 8 sequences 24 ms.
STEPS = {1: 0.010, 8: 0.024}
TTFT, TPOT = 0.5, 0.05


def streams(batching: str, rate: float, seconds: float = 20.0) -> StreamsResult:
    """Poisson arrivals at `rate`, most asking for 8 parts and one in five for 48."""
    rng = np.random.default_rng(7)
    times = np.cumsum(rng.exponential(1 / rate, int(rate * seconds)))
    parts = np.where(rng.random(len(times)) < 0.2, 48, 8)
    profile = ModelProfile(
        STEPS, load_seconds=0.05, size_mb=10, generative=Generation(8, 64, batching)
    )
    with ServerSimulation({"gen": profile}, workers=1) as sim:
        return sim.run_streams(times, ["gen"] * len(times), parts, ttft=TTFT, tpot=TPOT)


def test_a_generative_model_streams_through_the_simulated_server() -> None:
    result = streams("iteration", rate=5.0)
    summary = result.summary(TTFT, TPOT)
    assert summary["answered"] == summary["requests"] == 100
    assert summary["attainment"] == 1.0
    parts = result.parts.tolist()
    assert set(parts) == {8, 48}  # each made the parts it asked for


def test_iteration_level_batching_keeps_targets_where_request_level_cannot() -> None:
    ours = streams("iteration", rate=20.0).summary(TTFT, TPOT)
    theirs = streams(REQUEST, rate=20.0).summary(TTFT, TPOT)
    assert ours["attainment"] >= 0.9
    assert theirs["attainment"] < ours["attainment"]
    assert ours["ttft_p99_ms"] < theirs["ttft_p99_ms"]


def test_the_same_trace_gives_the_same_run() -> None:
    a, b = (streams("iteration", rate=20.0).summary(TTFT, TPOT) for _ in range(2))
    assert a == b
