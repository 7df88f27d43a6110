"""A configuration that differs from one replayed only in max batch sizes its queues never
reached replays the same, to the bit, so the planner takes that replay's estimate."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from headway.planning.estimates import EstimateCache
from headway.planning.pipeline import Configuration, StageConfig
from headway.planning.simulator import simulate
from tests.planning.helpers import CATALOGUE, MS, at_slo, chain, flat

PROFILES = {
    "m0": {"cpu1": flat(10, (1, 2, 4, 8), per_row_ms=2)},
    "m1": {"cpu1": flat(4, (1, 2, 4, 8), per_row_ms=1)},
}
#: a burst of four 1 ms apart, then quiet
BURST = np.array([0.0, 1.0, 2.0, 3.0, 100.0]) * MS


def two_stages(first: int, second: int = 1) -> Configuration:
    return Configuration({"s0": StageConfig("cpu1", first), "s1": StageConfig("cpu1", second)})


def test_queued_is_the_most_requests_a_stage_queue_held() -> None:
    # s0 runs the first alone (0-10 ms) while the next three queue: three at once at batch 4;
    # at batch 2 the second and third are a full batch, sent ahead to the busy worker at once
    wide = simulate(chain(1.0, 1.0), two_stages(4), PROFILES, BURST)
    assert wide.queued["s0"] == 3
    assert simulate(chain(1.0, 1.0), two_stages(2), PROFILES, BURST).queued["s0"] == 2
    # s1 gets one request, then three at once when s0's batch of three answers
    assert wide.queued["s1"] == 3
    assert wide.batch["s0"] == (1 + 3 + 1) / 3


def test_a_max_batch_above_what_its_queue_held_replays_the_same_to_the_bit() -> None:
    pipeline = chain(1.0, 1.0)
    estimates = EstimateCache(pipeline.names)
    at4 = two_stages(4, 4)
    estimate = estimates.add(at4, simulate(pipeline, at4, PROFILES, BURST))
    assert estimate.queued == {"s0": 3, "s1": 3}
    for larger in (two_stages(8, 4), two_stages(4, 8), two_stages(8, 8)):
        assert estimates.get(larger) is estimate
        again = simulate(pipeline, larger, PROFILES, BURST)
        assert np.array_equal(again.latencies, estimate.latencies)
    # at batch 2 the queues' three did not fit: not the same replay, not found
    assert estimates.get(two_stages(2, 4)) is None
    assert not np.array_equal(
        simulate(pipeline, two_stages(2, 4), PROFILES, BURST).latencies, estimate.latencies
    )
    assert estimates.get(Configuration({**at4.stages, "s0": StageConfig("cpu1", 4, 2)})) is None
    assert len(estimates) == 1 and list(estimates) == [estimates.key(at4)]


def test_a_replay_that_stopped_early_is_found_again_and_stops_early_again() -> None:
    pipeline = chain(1.0, 1.0)
    estimates = EstimateCache(pipeline.names)
    queries = np.arange(200) * 1.0 * MS  # 1,000 a second: s0 cannot keep up at batch 1
    at1 = two_stages(1, 4)
    stopped = estimates.add(at1, simulate(pipeline, at1, PROFILES, queries, give_up=0.05))
    assert not stopped.complete and stopped.queued["s1"] < 4
    assert estimates.get(two_stages(1, 8)) is stopped
    assert not simulate(pipeline, two_stages(1, 8), PROFILES, queries, give_up=0.05).complete


def test_with_drawn_durations_a_larger_batch_replays_the_same_draws() -> None:
    # the trace's draws start afresh from the seed, whatever the warm-up drew: batch 8 warms
    # up one size more than batch 4, and its replay is still the same to the bit
    tailed = {
        m: {"cpu1": replace(p["cpu1"], p99={b: 3 * s for b, s in p["cpu1"].seconds.items()})}
        for m, p in PROFILES.items()
    }
    pipeline = chain(1.0, 1.0)
    at4 = simulate(pipeline, two_stages(4, 4), tailed, BURST, spread=True, seed=3)
    at8 = simulate(pipeline, two_stages(8, 8), tailed, BURST, spread=True, seed=3)
    assert at4.queued == {"s0": 3, "s1": 3}
    assert np.array_equal(at4.latencies, at8.latencies)
    unspread = simulate(pipeline, two_stages(4, 4), tailed, BURST, seed=3)
    assert not np.array_equal(at4.latencies, unspread.latencies)  # the draws did differ


def test_the_planner_takes_the_estimate_without_a_replay() -> None:
    planner = at_slo(chain(1.0, 1.0), PROFILES, CATALOGUE, BURST, 0.1)
    first = planner.estimate(two_stages(4, 4))
    assert planner.replays == 1
    assert planner.estimate(two_stages(8, 8)) is first and planner.replays == 1
    planner.estimate(two_stages(2, 4))
    assert planner.replays == 2
