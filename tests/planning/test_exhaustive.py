"""The lower bound on any configuration's cost and the exhaustive search, on small pipelines."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from headway.planning.exhaustive import cheapest, lower_bound, shapes
from headway.planning.pipeline import Catalogue, Configuration, Hardware, StageConfig
from headway.planning.planner import Planner
from tests.planning.helpers import CATALOGUE, MS, PROFILES, SIZES, at_slo, chain, flat


def steady(rate: float, seconds: float = 2.0) -> np.ndarray:
    return np.arange(int(rate * seconds)) / rate


def test_the_lower_bound_is_each_stage_s_cheapest_rows() -> None:
    p = at_slo(chain(1.0, 0.5), PROFILES, CATALOGUE, steady(600), 30 * MS)
    # s0 (600/s): cpu1 at batch 8 takes 8 rows in 24 ms, 333/s: 2 replicas, $0.2/h (cpu4 at
    # batch 8, 667/s, one for $0.4/h; the GPU-like kind $3/h). s1 (300/s): cpu1 at batch 8,
    # 8 rows in 48 ms, 167/s: 2 replicas, $0.2/h
    assert lower_bound(p) == {
        "s0": (pytest.approx(0.2), StageConfig("cpu1", 8, 2)),
        "s1": (pytest.approx(0.2), StageConfig("cpu1", 8, 2)),
    }
    # within 30 ms s1 on cpu1 runs at most batch 2 (24 ms; batch 4 takes 32): 83/s, 4 replicas
    within = lower_bound(p, slo=30 * MS)
    assert within["s1"] == (pytest.approx(0.4), StageConfig("cpu1", 2, 4))
    assert within["s0"] == lower_bound(p)["s0"]


def test_shapes_keep_the_critical_path_at_full_batches_within_the_slo() -> None:
    p = at_slo(chain(1.0, 0.5), PROFILES, CATALOGUE, steady(100), 30 * MS)
    found = shapes(p)
    assert {"s0": ("cpu1", 1), "s1": ("cpu1", 1)} in found  # 10 + 20 ms
    assert {"s0": ("cpu1", 2), "s1": ("cpu1", 1)} not in found  # 12 + 20 ms
    assert {"s0": ("cpu1", 8), "s1": ("gpu", 1)} in found  # 24 + 5 ms
    assert all(
        p.profile("s0", a[0]).latency(a[1]) + p.profile("s1", b[0]).latency(b[1]) <= 30 * MS
        for a, b in ((s["s0"], s["s1"]) for s in found)
    )


def one_stage() -> Planner:
    # 300 queries/s within 12 ms: cpu1 ($0.1/h) takes 10 ms + 2 ms a row, cpu4 ($0.3/h) 5 ms
    # + 1 ms a row
    profiles = {"m0": {"cpu1": flat(10, SIZES, per_row_ms=2), "cpu4": flat(5, SIZES, 1)}}
    catalogue = Catalogue({**CATALOGUE.kinds, "cpu4": Hardware("cpu4", 0.3, cpus=4, threads=4)})
    return at_slo(chain(1.0), profiles, catalogue, steady(300), 12 * MS)


def test_cheapest_is_feasible_and_nothing_cheaper_is() -> None:
    found = cheapest(one_stage())
    check = one_stage()
    assert found.config is not None
    assert found.at_least == pytest.approx(0.3) == check.cost(found.config)
    # every configuration under $0.3/h: one or two cpu1 replicas at any batch size
    for size, count in itertools.product(SIZES, (1, 2)):
        assert not check.feasible(Configuration({"s0": StageConfig("cpu1", size, count)}))
    assert check.feasible(found.config)


def test_a_stopped_search_bounds_the_answer_from_below() -> None:
    answer = cheapest(one_stage())
    stopped = cheapest(one_stage(), estimates=1)
    assert stopped.config is None and stopped.estimates == 1
    assert 0 < stopped.at_least <= answer.at_least
    ticks = iter(range(100))
    timed = cheapest(one_stage(), seconds=2, clock=lambda: float(next(ticks)))
    assert timed.config is None and timed.estimates == 1  # the clock read 0, then 1, then 2


def test_the_planner_finds_the_exhaustive_optimum_where_only_its_restarts_reach_it() -> None:
    # test_planner's case where InferLine's search stops at $6.4/h and a restart finds $3.5/h
    profiles = {
        "m0": {"gpu": flat(5, SIZES, per_row_ms=0.5), "cpu1": flat(8, SIZES, per_row_ms=4)},
        "m1": {"gpu": flat(8, SIZES, per_row_ms=0.5), "cpu4": flat(32, SIZES, per_row_ms=2)},
    }
    args = (chain(1.0, 0.5), profiles, CATALOGUE, steady(600, 1.0), 40 * MS)
    found = cheapest(at_slo(*args))
    assert found.config is not None and found.at_least == pytest.approx(3.5)
    assert at_slo(*args).plan().cost_per_hour == pytest.approx(3.5)
    assert at_slo(*args, restarts=False).plan().cost_per_hour == pytest.approx(6.4)
