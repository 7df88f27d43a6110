"""InferLine's greedy estimator: cases by hand, and the controller's replay where both form
the same batches."""

from __future__ import annotations

import numpy as np
import pytest

from headway.planning.feasibility import QUICK_MARGIN
from headway.planning.greedy import greedy_latencies, stage_done
from headway.planning.pipeline import Configuration, LatencyProfile, Pipeline, Stage, StageConfig
from headway.planning.simulator import SpreadDurations, simulate
from headway.planning.workloads import ArrivalSpec, arrival_times
from tests.planning.helpers import MS, flat


def test_one_stage_batches_what_queued_up_to_the_max_batch() -> None:
    # as tests/planning/test_simulator.py's: 0 alone (0-10); 1 and 2 together (10-22); 3 alone
    ready = np.array([0.0, 1.0, 2.0, 3.0]) * MS
    done = stage_done(ready, np.arange(4), 1, 2, lambda rows: (10 + 2 * (rows - 1)) * MS)
    assert done / MS == pytest.approx([10.0, 22.0, 22.0, 32.0])


def test_replicas_share_one_queue_and_the_most_urgent_goes_first() -> None:
    ready = np.array([0.0, 1.0, 2.0, 2.0]) * MS
    urgency = np.array([0, 1, 3, 2])  # the last two arrive together, the fourth more urgent
    done = stage_done(ready, urgency, 2, 1, lambda rows: 10 * MS)
    assert done / MS == pytest.approx([10.0, 11.0, 21.0, 20.0])


def test_an_answer_comes_a_hop_after_its_batch_and_the_replica_does_not_wait() -> None:
    ready = np.array([0.0, 0.0]) * MS
    done = stage_done(ready, np.arange(2), 1, 1, lambda rows: 10 * MS, hop=1 * MS)
    assert done / MS == pytest.approx([11.0, 21.0])


def test_a_join_and_a_branch() -> None:
    pipeline = Pipeline(
        "p",
        (
            Stage("a", "ma"),
            Stage("b", "mb", ("a",), 0.5),
            Stage("c", "mc", ("a",)),
            Stage("d", "md", ("b", "c"), 0.5),
        ),
    )
    profiles = {m: {"cpu1": flat(ms)} for m, ms in (("ma", 1), ("mb", 5), ("mc", 2), ("md", 1))}
    config = Configuration({s: StageConfig("cpu1") for s in "abcd"})
    arrivals = np.array([0.0, 100.0]) * MS
    draws = np.array([0.2, 0.9])  # the first reaches b, the second does not
    latencies = greedy_latencies(pipeline, config, profiles, arrivals, draws=draws)
    assert latencies / MS == pytest.approx([1 + 5 + 1, 1 + 2])


def cascade() -> tuple[Pipeline, dict[str, dict[str, LatencyProfile]]]:
    pipeline = Pipeline(
        "cascade", (Stage("s0", "m0"), Stage("s1", "m1", ("s0",), 0.3), Stage("s2", "m2", ("s0",)))
    )
    profiles = {
        "m0": {"cpu1": LatencyProfile({1: 2 * MS, 4: 3 * MS}, p99={1: 6 * MS, 4: 7 * MS})},
        "m1": {"cpu1": LatencyProfile({1: 8 * MS, 4: 12 * MS}, p99={1: 20 * MS, 4: 25 * MS})},
        "m2": {"cpu1": LatencyProfile({1: 1 * MS, 4: 2 * MS})},
    }
    return pipeline, profiles


@pytest.mark.parametrize("spread", [False, True])
@pytest.mark.parametrize("rate", [100, 250])
def test_close_to_the_controller_s_replay(spread: bool, rate: float) -> None:
    """Where the controller batches greedily, the same latencies; where it sends a batch
    ahead to a busy worker, a few differ, and the P99 stays within the planner's margin."""
    pipeline, profiles = cascade()
    config = Configuration({s: StageConfig("cpu1", 4, 1) for s in ("s0", "s1", "s2")})
    arrivals = arrival_times(ArrivalSpec(rate, 10, cv=2.0, seed=3))
    replayed = simulate(pipeline, config, profiles, arrivals, seed=5, spread=spread)
    greedy = greedy_latencies(pipeline, config, profiles, arrivals, seed=5, spread=spread)
    same = np.isclose(greedy, replayed.latencies, rtol=0, atol=1e-9)
    assert same.mean() >= (1.0 if rate == 100 else 0.85)
    assert np.percentile(greedy, 99) == pytest.approx(replayed.p99, rel=QUICK_MARGIN)


def test_each_stage_draws_from_its_own_stream() -> None:
    pipeline, profiles = cascade()
    config = Configuration({s: StageConfig("cpu1", 4) for s in ("s0", "s1", "s2")})
    alone = SpreadDurations(pipeline, config, profiles, seed=2)
    mixed = SpreadDurations(pipeline, config, profiles, seed=2)
    first = [alone("s1", 1) for _ in range(600)]
    second = []
    for _ in range(600):  # another stage's draws in between change nothing
        mixed("s0", 4)
        second.append(mixed("s1", 1))
    assert first == second
    mixed.restart()
    assert mixed("s1", 1) == first[0]
