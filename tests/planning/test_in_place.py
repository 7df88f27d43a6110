"""Profiles taken in place: the server's own batch statistics turned into a profile under load."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from sklearn.datasets import load_digits

from headway.api.metrics import render
from headway.api.statistics import statistics
from headway.control.model_stats import LATENCY_BUCKETS, Histogram
from headway.errors import ConfigError
from headway.launcher import ServerProcess
from headway.planning.in_place import (
    LEAST_SHAPED,
    batch_seconds,
    between,
    lag1,
    loaded_profiles,
    lognormal_sigma,
    persistence_in,
    persistence_of,
    shapes_between,
    under_load,
    waits_per_action,
    window_means,
)
from headway.planning.pipeline import LatencyProfile
from headway.planning.profiler import under_load_of
from headway.planning.schedstat import children, scheduled
from headway.sim import ModelProfile, ServerSimulation
from tests.integration import models
from tests.planning.helpers import MS

RPC = 1 * MS  # one way: each action's round trip is 2 ms more than its run


def test_the_servers_batch_statistics_give_each_sizes_time_from_dispatch_to_answer() -> None:
    # max batch 4: the two rows that queue are not a full batch, so none is sent ahead to the
    # busy worker (`choices.full_batch_ahead`), where it would wait in the worker's queue
    model = ModelProfile({1: 10 * MS, 2: 16 * MS}, load_seconds=0.0, size_mb=0.0, max_batch=4)
    with ServerSimulation({"m": model}, rpc_seconds=RPC, slo_ms=10_000) as sim:
        sim.start()
        before = statistics(sim.controller)  # the warm-up runs are before it
        # 0 runs alone (its batch leaves at 0); 1 and 2 queue behind it and go as one batch
        # of 2; 3 arrives to an idle worker and runs alone
        sim.run(np.array([0.0, 1.0, 2.0, 100.0]) * MS, ["m"] * 4)
        after = statistics(sim.controller)
    ran = between(batch_seconds(before), batch_seconds(after))
    assert ran["m"][1][0] == 2 and ran["m"][2][0] == 1
    # each action: its run plus the round trip (2 ms), on the simulation's exact clock
    assert ran["m"][1][1] == pytest.approx(2 * 12 * MS)
    assert ran["m"][2][1] == pytest.approx(18 * MS)
    idle = {"model": LatencyProfile({1: 10 * MS, 2: 16 * MS, 4: 20 * MS})}
    # prior=0: each measured size at its own mean, however few times it ran
    profile = loaded_profiles(idle, before, after, {"model": "m"}, least=1, prior=0)["model"]
    assert profile.seconds[1] == pytest.approx(12 * MS)
    assert profile.seconds[2] == pytest.approx(18 * MS)
    # 4 never ran: its idle time times the measured sizes' slow-down, (24 + 18) / (20 + 16)
    assert profile.seconds[4] == pytest.approx(20 * MS * 42 / 36)


def test_sizes_not_formed_under_load_keep_their_idle_shape() -> None:
    idle = LatencyProfile({1: 10 * MS, 4: 20 * MS}, {1: 15 * MS, 4: 40 * MS})
    # batch 1 ran 10 times at 15 ms under load: 1.5x its idle time
    profile = under_load(idle, {1: (10, 150 * MS)}, least=5)
    assert profile.seconds == pytest.approx({1: 15 * MS, 4: 30 * MS})
    # p99s scaled as their size's mean was, so a spread estimate keeps the idle tail's shape
    assert profile.p99 == pytest.approx({1: 22.5 * MS, 4: 60 * MS})


def test_with_the_workers_wait_the_tail_is_an_exponential_wait_past_the_mean() -> None:
    idle = LatencyProfile({1: 10 * MS, 4: 20 * MS}, {1: 15 * MS, 4: 40 * MS})
    # 1.5x slower under load, its worker waiting 2 ms for a core per action on average:
    # p99 = mean + (ln 100 - 1) x 2 ms, at every size
    profile = under_load(idle, {1: (10, 150 * MS)}, least=5, wait=2 * MS)
    assert profile.seconds == pytest.approx({1: 15 * MS, 4: 30 * MS})
    extra = (np.log(100) - 1) * 2 * MS
    assert profile.p99 == pytest.approx({1: 15 * MS + extra, 4: 30 * MS + extra})


def _lognormal(mean: float, sigma: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.lognormal(np.log(mean) - sigma * sigma / 2, sigma, n)


@pytest.mark.parametrize("sigma", [0.15, 0.4, 0.8])
def test_the_shape_of_run_times_is_fitted_to_the_servers_coarse_buckets(sigma: float) -> None:
    # 2,000 run times of mean 12 ms counted in the server's own histogram (bounds ~2x apart)
    histogram = Histogram(LATENCY_BUCKETS)
    histogram.observe_all(list(_lognormal(12 * MS, sigma, 2000, seed=3)))
    fitted = lognormal_sigma(histogram.cumulative(), histogram.total)
    assert fitted == pytest.approx(sigma, abs=0.05)


def test_too_few_run_times_give_no_shape() -> None:
    histogram = Histogram(LATENCY_BUCKETS)
    histogram.observe_all([12 * MS] * (LEAST_SHAPED - 1))
    assert lognormal_sigma(histogram.cumulative(), histogram.total) is None


def test_with_a_shape_every_sizes_p99_is_its_lognormals_in_place_of_the_wait() -> None:
    idle = LatencyProfile({1: 10 * MS, 4: 20 * MS}, {1: 15 * MS, 4: 40 * MS})
    profile = under_load(idle, {1: (10, 150 * MS)}, least=5, wait=2 * MS, sigma=0.5)
    assert profile.seconds == pytest.approx({1: 15 * MS, 4: 30 * MS})
    # a log-normal of mean m and shape s: p99 = m exp(Z99 s - s^2 / 2)
    ratio = np.exp(2.3263 * 0.5 - 0.125)
    assert profile.p99 == pytest.approx({1: 15 * MS * ratio, 4: 30 * MS * ratio}, rel=1e-4)


def test_the_shape_under_load_comes_from_the_servers_histogram_between_two_reads() -> None:
    # the simulated worker runs each batch for a fixed 12 ms, then, after the first read,
    # for log-normal times (shape 0.5): the shape between the two reads is the second's
    model = ModelProfile({1: 12 * MS}, load_seconds=0.0, size_mb=0.0, max_batch=4)
    spread = iter(_lognormal(12 * MS, 0.5, 300, seed=5))
    fixed = [True]

    def duration(_name: str, _rows: int) -> float:
        return 12 * MS if fixed[0] else float(next(spread))

    with ServerSimulation({"m": model}, slo_ms=10_000, sample=duration) as sim:
        sim.start()
        sim.run(np.arange(50) * 100 * MS, ["m"] * 50)
        before, stats_before = render(sim.controller).decode(), statistics(sim.controller)
        fixed[0] = False
        sim.run(np.arange(300) * 100 * MS, ["m"] * 300)
        after, stats_after = render(sim.controller).decode(), statistics(sim.controller)
    sigmas = shapes_between(before, after)
    assert sigmas["m"] == pytest.approx(0.5, abs=0.08)
    idle = {"model": LatencyProfile({1: 10 * MS})}
    profile = loaded_profiles(
        idle, stats_before, stats_after, {"model": "m"}, waits={"m": 1 * MS}, sigmas=sigmas
    )["model"]
    ratio = np.exp(2.3263 * sigmas["m"] - sigmas["m"] ** 2 / 2)
    assert profile.p99[1] == pytest.approx(profile.seconds[1] * ratio, rel=1e-4)


def test_the_persistence_of_batches_is_found_from_the_windows_they_fill() -> None:
    # 40,000 batches whose log-times follow an AR(1) of persistence 0.9, read as the server's
    # cumulative statistics every 10 batches
    rng = np.random.default_rng(2)
    z = np.empty(40_000)
    z[0] = rng.standard_normal()
    for i in range(1, len(z)):
        z[i] = 0.9 * z[i - 1] + np.sqrt(1 - 0.81) * rng.standard_normal()
    times = np.exp(np.log(12 * MS) + 0.3 * z)
    reads = [{"m": {1: (i, float(times[:i].sum()))}} for i in range(0, len(times) + 1, 10)]
    means, per_window = window_means(reads, "m")
    assert per_window == 10 and len(means) == 4000
    correlation = lag1(means)
    assert correlation is not None
    assert persistence_of(correlation, per_window) == pytest.approx(0.9, abs=0.03)
    assert persistence_in(reads, "m") == persistence_of(correlation, per_window)
    # independent batches: windows not correlated, no persistence
    flat_reads = [{"m": {1: (i, 12 * MS * i)}} for i in range(0, 100, 10)]
    assert lag1(window_means(flat_reads, "m")[0]) is None
    assert persistence_of(-0.1, 10) == 0.0
    # independent batches, 30 windows: a correlation under 2 / sqrt(30) is no persistence
    times = np.exp(np.log(12 * MS) + 0.3 * np.random.default_rng(3).standard_normal(300))
    reads = [{"m": {1: (i, float(times[:i].sum()))}} for i in range(0, 301, 10)]
    assert abs(lag1(window_means(reads, "m")[0]) or 0.0) < 2 / np.sqrt(30)
    assert persistence_in(reads, "m") == 0.0


def test_the_persistence_is_the_loaded_profiles() -> None:
    idle = LatencyProfile({1: 10 * MS})
    assert under_load(idle, {1: (10, 150 * MS)}, persistence=0.8).persistence == 0.8


def test_each_model_gets_the_wait_of_the_worker_whose_run_matches_its_time() -> None:
    ran = {"forest": {1: (10, 0.200)}, "fast": {1: (100, 0.050), 2: (50, 0.030)}}
    workers = {101: (0.06, 0.010), 102: (0.18, 0.100)}  # (run, wait) seconds
    # the forest (0.2 s of actions) ran on 102 (0.18 s), the fast model (0.08 s) on 101
    assert waits_per_action(ran, workers) == pytest.approx({"forest": 0.01, "fast": 0.01 / 150})
    # one worker for both: its wait is shared by all their actions
    shared = waits_per_action(ran, {101: (0.3, 0.16)})
    assert shared == pytest.approx({"forest": 0.16 / 160, "fast": 0.16 / 160})


def test_a_size_formed_a_few_times_is_pulled_towards_the_shared_slow_down() -> None:
    idle = LatencyProfile({1: 10 * MS, 2: 12 * MS})
    # under load batch 1 ran 200 times at 20 ms (2x); batch 2 ran 5 times at 120 ms (a stall)
    ran = {1: (200, 200 * 20 * MS), 2: (5, 5 * 120 * MS)}
    slower = (200 * 20 + 5 * 120) / (200 * 10 + 5 * 12)  # the measured sizes' slow-down
    profile = under_load(idle, ran, least=5, prior=20)
    assert profile.seconds[2] == pytest.approx((5 * 120 + 20 * 12 * slower) / 25 * MS)
    assert profile.seconds[2] < 0.4 * 120 * MS  # not the few batches' mean
    # a size run many times keeps (nearly) its own mean
    assert profile.seconds[1] == pytest.approx((200 * 20 + 20 * 10 * slower) / 220 * MS)
    assert profile.seconds[1] == pytest.approx(20 * MS, rel=0.02)
    # without the prior, each size's own mean
    assert under_load(idle, ran, least=5, prior=0).seconds == pytest.approx(
        {1: 20 * MS, 2: 120 * MS}
    )


def test_a_size_run_too_few_times_is_not_measured() -> None:
    idle = LatencyProfile({1: 10 * MS, 2: 12 * MS})
    # batch 2 ran 3 times (fewer than `least`): only batch 1 (20 ms, 2x) is a measurement
    profile = under_load(idle, {1: (5, 100 * MS), 2: (3, 90 * MS)}, least=5)
    assert profile.seconds == pytest.approx({1: 20 * MS, 2: 24 * MS})


def test_no_size_measured_under_load_is_refused() -> None:
    idle = LatencyProfile({1: 10 * MS})
    with pytest.raises(ConfigError, match="ran at least 5 times"):
        under_load(idle, {1: (4, 40 * MS)}, least=5)


def test_a_model_the_load_never_ran_is_left_out() -> None:
    idle = {"forest": LatencyProfile({1: 10 * MS})}
    assert loaded_profiles(idle, {"model_stats": []}, {"model_stats": []}, {}) == {}


@pytest.mark.integration
def test_a_served_app_under_load_gives_its_models_profile_and_the_loops_time(
    tmp_path: Path,
) -> None:
    models.digits_logreg(tmp_path / "repo")
    config = tmp_path / "headway.yaml"
    config.write_text(yaml.safe_dump({"apps": {"digits": {"models": ["digits-logreg"]}}}))
    rows = load_digits().data[:8].tolist()
    idle = {"digits-logreg": LatencyProfile({1: 1 * MS, 4: 2 * MS})}
    server = ServerProcess(
        tmp_path / "repo", state=tmp_path / "state.db", workers=1, grpc_port=0,
        extra=["--config", str(config)], log=tmp_path / "server.log",
    )  # fmt: skip
    with server:
        assert server.process is not None
        answer = httpx.post(f"{server.url}/apps/digits/predict", json={"input": rows[0]})
        assert answer.status_code == 200, answer.text
        before = httpx.get(f"{server.url}/v2/models/stats").json()
        found = under_load_of(server.url, server.process.pid, "digits", rows, idle, 100, seconds=1)
        after = httpx.get(f"{server.url}/v2/models/stats").json()
    ran = between(batch_seconds(before), batch_seconds(after))["digits-logreg"]
    assert sum(size * count for size, (count, _) in ran.items()) == found.queries > 50
    # the profile is the server's means per size between the two reads (`under_load`)
    size, _ = max(ran.items(), key=lambda item: item[1][0])
    expected = under_load(idle["digits-logreg"], ran)
    assert found.profiles["digits-logreg"].seconds == pytest.approx(expected.seconds)
    assert set(idle["digits-logreg"].seconds) <= set(found.profiles["digits-logreg"].seconds)
    # its p99s: a log-normal of each size's mean and the shape of its run times on /metrics
    sigma = found.sigmas["digits-logreg"]
    ratio = np.exp(2.3263 * sigma - sigma * sigma / 2)
    profile = found.profiles["digits-logreg"]
    assert profile.p99[size] == pytest.approx(profile.seconds[size] * ratio, rel=1e-4)
    assert 0 < found.frontend < 1.0  # the loop's wall time per query


def test_the_kernels_accounting_of_a_thread_and_its_children() -> None:
    ran, waited = scheduled(os.getpid())
    spin = time.process_time() + 0.05
    while time.process_time() < spin:  # run 50 ms of CPU on this (the main) thread
        pass
    ran_after, waited_after = scheduled(os.getpid())
    assert ran_after - ran >= 0.04 and waited_after >= waited >= 0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in children(os.getpid())
    finally:
        child.kill()
        child.wait()
