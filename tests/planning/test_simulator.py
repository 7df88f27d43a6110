"""The pipeline estimator on cases whose latencies are known by hand."""

from __future__ import annotations

import numpy as np
import pytest

from headway.errors import ConfigError
from headway.planning.pipeline import Configuration, LatencyProfile, Pipeline, Stage, StageConfig
from headway.planning.simulator import simulate
from tests.planning.helpers import MS, chain, flat


def one_stage(max_batch: int, replicas: int = 1) -> Configuration:
    return Configuration({"s0": StageConfig("cpu1", max_batch, replicas)})


def test_one_stage_deterministic_service_gives_exact_latencies() -> None:
    profiles = {"m0": {"cpu1": flat(10)}}
    arrivals = np.array([0.0, 5.0, 10.0, 100.0]) * MS
    estimate = simulate(chain(1.0), one_stage(1), profiles, arrivals)
    # the second and third queue behind the first: 10, 15, 20 ms; the fourth finds it idle
    assert estimate.latencies / MS == pytest.approx([10.0, 15.0, 20.0, 10.0])


def test_one_stage_batches_what_queued_up_to_the_max_batch() -> None:
    profiles = {"m0": {"cpu1": flat(10, sizes=(1, 2, 3), per_row_ms=2)}}
    arrivals = np.array([0.0, 1.0, 2.0, 3.0]) * MS
    estimate = simulate(chain(1.0), one_stage(2), profiles, arrivals)
    # 0 runs alone (0-10); 1 and 2 together (10-22); 3 alone (22-32)
    assert estimate.latencies / MS == pytest.approx([10.0, 21.0, 20.0, 29.0])


def test_replicas_share_one_queue() -> None:
    profiles = {"m0": {"cpu1": flat(10)}}
    arrivals = np.array([0.0, 1.0, 2.0]) * MS
    estimate = simulate(chain(1.0), one_stage(1, replicas=2), profiles, arrivals)
    assert estimate.latencies / MS == pytest.approx([10.0, 10.0, 18.0])


def test_a_join_waits_for_both_parents() -> None:
    pipeline = Pipeline(
        "diamond",
        (
            Stage("a", "fast"),
            Stage("b", "slow"),
            Stage("c", "combine", ("a", "b")),
        ),
    )
    profiles = {
        "fast": {"cpu1": flat(10)},
        "slow": {"cpu1": flat(30)},
        "combine": {"cpu1": flat(5)},
    }
    config = Configuration({name: StageConfig("cpu1") for name in "abc"})
    estimate = simulate(pipeline, config, profiles, np.array([0.0, 1.0]))
    assert estimate.latencies / MS == pytest.approx([35.0, 35.0])
    assert estimate.reached == {"a": 2, "b": 2, "c": 2}


def test_a_cascade_branch_follows_its_scale_factor() -> None:
    profiles = {"m0": {"cpu1": flat(10)}, "m1": {"cpu1": flat(20)}}
    config = Configuration({"s0": StageConfig("cpu1"), "s1": StageConfig("cpu1")})
    arrivals = np.arange(4000) * 0.1  # far apart: no queueing
    estimate = simulate(chain(1.0, 0.3), config, profiles, arrivals, seed=3)
    share = estimate.reached["s1"] / len(arrivals)
    assert share == pytest.approx(0.3, abs=0.02)
    # queries that went on to the second model took 30 ms; the rest 10 ms
    assert np.mean(np.isclose(estimate.latencies, 0.030)) == pytest.approx(share)
    assert set(np.round(estimate.latencies / MS, 6)) == {10.0, 30.0}


def test_same_seed_same_latencies_with_noise() -> None:
    profiles = {"m0": {"cpu1": flat(10)}, "m1": {"cpu1": flat(20)}}
    config = Configuration({"s0": StageConfig("cpu1"), "s1": StageConfig("cpu1")})
    arrivals = np.cumsum(np.random.default_rng(1).exponential(0.03, 500))
    runs = [
        simulate(chain(1.0, 0.5), config, profiles, arrivals, seed=s, noise=0.2).latencies
        for s in (7, 7, 8)
    ]
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_a_missing_profile_names_model_and_hardware() -> None:
    with pytest.raises(ConfigError, match=r"m0.*cpu4"):
        simulate(
            chain(1.0),
            Configuration({"s0": StageConfig("cpu4")}),
            {"m0": {"cpu1": flat(10)}},
            np.array([0.0]),
        )


def test_a_query_that_reaches_no_stage_is_answered_at_once() -> None:
    pipeline = Pipeline("filtered", (Stage("s0", "m0", (), 0.5),))
    arrivals = np.arange(1000) * 0.1
    estimate = simulate(pipeline, one_stage(1), {"m0": {"cpu1": flat(10)}}, arrivals, seed=2)
    assert set(np.round(estimate.latencies / MS, 6)) == {0.0, 10.0}
    assert np.mean(estimate.latencies > 0) == pytest.approx(estimate.reached["s0"] / 1000)


def test_an_overloaded_replay_gives_up_once_the_p99_is_known_to_exceed() -> None:
    profiles = {"m0": {"cpu1": flat(10)}}
    arrivals = np.arange(2000) * 0.005  # 200 queries/s at 100/s of capacity
    full = simulate(chain(1.0), one_stage(1), profiles, arrivals)
    early = simulate(chain(1.0), one_stage(1), profiles, arrivals, give_up=0.05)
    assert full.complete and full.p99 > 5.0
    assert not early.complete and early.p99 == float("inf")
    assert np.sum(np.isfinite(early.latencies)) < len(arrivals) / 2  # it stopped early
    calm = simulate(chain(1.0), one_stage(1), profiles, arrivals * 4, give_up=0.05)
    assert calm.complete and calm.p99 == pytest.approx(0.010)


def test_spread_draws_durations_with_the_profiled_mean_and_p99() -> None:
    profile = LatencyProfile({1: 0.010}, p99={1: 0.030})
    arrivals = np.arange(20000) * 1.0  # far apart: each latency is one action's duration
    estimate = simulate(
        chain(1.0), one_stage(1), {"m0": {"cpu1": profile}}, arrivals, seed=4, spread=True
    )
    assert np.mean(estimate.latencies) == pytest.approx(0.010, rel=0.03)
    assert estimate.p99 == pytest.approx(0.030, rel=0.08)
    # the same seed draws the same durations, in arrival order (a shorter replay: its prefix)
    again = simulate(
        chain(1.0), one_stage(1), {"m0": {"cpu1": profile}}, arrivals[:2000], seed=4, spread=True
    )
    assert np.array_equal(estimate.latencies[:2000], again.latencies)


def test_with_persistence_slow_batches_follow_slow_batches_with_the_same_marginal() -> None:
    profile = LatencyProfile({1: 0.010}, p99={1: 0.030}, persistence=0.9)
    arrivals = np.arange(20000) * 1.0  # far apart: each latency is one action's duration
    estimate = simulate(
        chain(1.0), one_stage(1), {"m0": {"cpu1": profile}}, arrivals, seed=4, spread=True
    )
    logs = np.log(estimate.latencies)
    assert np.corrcoef(logs[:-1], logs[1:])[0, 1] == pytest.approx(0.9, abs=0.03)
    # each batch's log-normal is the independent one's: the same mean and p99
    assert np.mean(estimate.latencies) == pytest.approx(0.010, rel=0.1)
    assert estimate.p99 == pytest.approx(0.030, rel=0.15)


def test_with_persistence_a_queue_grows_longer_at_the_same_load() -> None:
    # Poisson arrivals at 60% of a stage of mean 10 ms, p99 30 ms: spells of slow batches
    # build queues that independent batches of the same distribution do not
    arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / 60.0, 20000))
    p99s = []
    for persistence in (0.0, 0.95):
        profile = LatencyProfile({1: 0.010}, p99={1: 0.030}, persistence=persistence)
        p99s.append(
            simulate(
                chain(1.0),
                one_stage(1),
                {"m0": {"cpu1": profile}},
                arrivals,
                seed=4,
                spread=True,
            ).p99
        )
    assert p99s[1] > 1.5 * p99s[0]


def test_persistence_is_between_0_and_1() -> None:
    with pytest.raises(ConfigError, match="persistence"):
        LatencyProfile({1: 0.010}, persistence=1.0)


def test_the_estimate_counts_the_rows_each_stages_batches_carried() -> None:
    profiles = {"m0": {"cpu1": flat(10, sizes=(1, 2, 3), per_row_ms=2)}}
    arrivals = np.array([0.0, 1.0, 2.0, 3.0]) * MS
    estimate = simulate(chain(1.0), one_stage(2), profiles, arrivals)
    # batches of 1, 2 and 1 rows (as above); the warm-up runs before the trace are not counted
    assert estimate.batch == {"s0": pytest.approx(4 / 3)}


def test_given_draws_choose_the_queries_that_go_on() -> None:
    profiles = {"m0": {"cpu1": flat(10)}, "m1": {"cpu1": flat(20)}}
    config = Configuration({"s0": StageConfig("cpu1"), "s1": StageConfig("cpu1")})
    arrivals = np.array([0.0, 100.0, 200.0, 300.0]) * MS  # far apart: no queueing
    # share 0.25: the queries whose draw is below it (the second and the fourth) go on
    draws = np.array([0.5, 0.0, 0.25, 0.1])
    estimate = simulate(chain(1.0, 0.25), config, profiles, arrivals, draws=draws)
    assert estimate.latencies / MS == pytest.approx([10.0, 30.0, 10.0, 30.0])
    assert estimate.reached == {"s0": 4, "s1": 2}
    with pytest.raises(ConfigError, match="3 reach draws for 4 arrivals"):
        simulate(chain(1.0, 0.25), config, profiles, arrivals, draws=draws[:3])
