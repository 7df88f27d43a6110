"""InferLine's planner: its start, each action, and the greedy loop on small pipelines."""

from __future__ import annotations

import numpy as np
import pytest

from headway.planning.pipeline import (
    Catalogue,
    Configuration,
    Hardware,
    LatencyProfile,
    StageConfig,
)
from headway.planning.planner import Planner
from headway.planning.workloads import ArrivalSpec, arrival_times
from tests.planning.helpers import CATALOGUE, MS, PROFILES, SIZES, at_slo, chain, flat


def steady(rate: float, seconds: float = 4.0) -> np.ndarray:
    return np.arange(int(rate * seconds)) / rate


def planner(rate: float, slo_ms: float, *scales: float) -> Planner:
    return at_slo(chain(*(scales or (1.0,))), PROFILES, CATALOGUE, steady(rate), slo_ms * MS)


def test_starts_on_the_fastest_hardware_at_batch_one() -> None:
    start = planner(10, 100, 1.0, 0.5).initial()
    assert start["s0"] == StageConfig("gpu", 1, 1)
    assert start["s1"] == StageConfig("gpu", 1, 1)


def test_infeasible_when_the_critical_path_alone_exceeds_the_slo() -> None:
    plan = planner(10, 7, 1.0, 0.5).plan()  # 2.5 ms + 5 ms on the fastest hardware
    assert not plan.feasible and plan.config is None
    assert "critical path" in plan.reason and "7.5 ms" in plan.reason


def test_adds_replicas_at_the_bottleneck_until_feasible() -> None:
    p = at_slo(
        chain(1.0), {"m0": {"cpu1": flat(10)}}, CATALOGUE, steady(150), 15 * MS, restarts=False
    )
    plan = p.plan()
    # one replica serves 100 queries/s: at 150/s its queue grows without bound; two suffice
    assert plan.feasible and plan.config is not None
    assert plan.config["s0"].replicas == 2
    assert plan.steps == ["add a replica to the bottleneck s0"]
    assert plan.p99 == pytest.approx(10 * MS)
    assert plan.utilisation["s0"] == pytest.approx(0.75, rel=0.01)


def test_the_bottleneck_counts_each_stage_share() -> None:
    p = planner(10, 100, 1.0, 0.2)
    config = Configuration({"s0": StageConfig("cpu1"), "s1": StageConfig("cpu1")})
    # s1 is twice as slow but sees a fifth of the queries: s0 is the bottleneck
    assert p.bottleneck(config) == "s0"
    p = planner(10, 100, 1.0, 0.8)
    assert p.bottleneck(config) == "s1"


def test_remove_replica() -> None:
    p = planner(10, 100)
    two = Configuration({"s0": StageConfig("cpu1", 1, 2)})
    assert p.remove_replica(two, "s0") == Configuration({"s0": StageConfig("cpu1", 1, 1)})
    assert p.remove_replica(Configuration({"s0": StageConfig("cpu1")}), "s0") is None


def test_increase_batch_raises_the_batch_until_a_replica_can_go() -> None:
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, steady(130), 60 * MS)
    two = Configuration({"s0": StageConfig("cpu1", 1, 2)})
    assert p.feasible(two)
    assert not p.feasible(Configuration({"s0": StageConfig("cpu1", 1, 1)}))
    # at batch 2 one replica takes 2 rows per 12 ms: 166 queries/s
    assert p.increase_batch(two, "s0") == Configuration({"s0": StageConfig("cpu1", 2, 1)})
    assert p.increase_batch(Configuration({"s0": StageConfig("cpu1", 1, 1)}), "s0") is None


def test_increase_batch_takes_the_larger_batch_needing_fewest_replicas() -> None:
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, steady(180), 60 * MS)
    three = Configuration({"s0": StageConfig("cpu1", 1, 3)})
    assert p.feasible(three)
    # at batch 2 one replica takes 166 queries/s: two are needed at 180/s, and that is the
    # first size that lets a replica go; at batch 4 (250/s) one replica suffices
    assert p.feasible(Configuration({"s0": StageConfig("cpu1", 2, 2)}))
    assert not p.feasible(Configuration({"s0": StageConfig("cpu1", 2, 1)}))
    assert p.feasible(Configuration({"s0": StageConfig("cpu1", 4, 1)}))
    # batch 8 needs one replica too: the tie goes to the smaller batch
    assert p.feasible(Configuration({"s0": StageConfig("cpu1", 8, 1)}))
    assert p.increase_batch(three, "s0") == Configuration({"s0": StageConfig("cpu1", 4, 1)})


def test_the_plan_does_not_downgrade_when_a_larger_batch_is_cheaper() -> None:
    # The shape of the bench's 300 ms / CV 4 defect: from three fast replicas at batch 1, the
    # first replica-saving batch (2, two replicas: $6/h) is dearer than moving to the slow kind
    # ($4.4/h, where the search then stays), but batch 4 needs a single fast replica ($3/h).
    profiles = {
        "m0": {
            "gpu": flat(10, SIZES, per_row_ms=0.5),
            "cpu4": flat(40, SIZES, per_row_ms=20),
        }
    }
    p = at_slo(chain(1.0), profiles, CATALOGUE, steady(250), 60 * MS)
    plan = p.plan()
    assert plan.feasible and plan.config is not None
    assert plan.config["s0"].hardware == "gpu" and plan.config["s0"].replicas == 1
    assert plan.cost_per_hour == pytest.approx(3.0)
    assert plan.p99 <= 60 * MS


def test_downgrade_hardware_keeps_the_throughput_the_load_needs() -> None:
    on_gpu = Configuration({"s0": StageConfig("gpu", 1, 1)})
    # 2.5 ms on the GPU-like kind, 5 ms on cpu4 (the next cheaper): at 300 queries/s, two
    # cpu4 replicas keep up at batch 1 (and none at batch 2 within the SLO of 8 ms: a query
    # waits for the batch ahead of it); at 10 queries/s one does
    busy = at_slo(chain(1.0), PROFILES, CATALOGUE, steady(300), 8 * MS)
    assert busy.downgrade_hardware(on_gpu, "s0") == Configuration({"s0": StageConfig("cpu4", 1, 2)})
    light = planner(10, 100)
    assert light.downgrade_hardware(on_gpu, "s0") == Configuration(
        {"s0": StageConfig("cpu4", 1, 1)}
    )
    on_cpu1 = Configuration({"s0": StageConfig("cpu1", 1, 1)})
    assert light.downgrade_hardware(on_cpu1, "s0") is None  # nothing cheaper


def test_a_move_estimates_no_option_that_could_only_tie_with_the_best_found() -> None:
    # at 10 queries/s one cpu4 replica keeps up at every batch size, each at $0.4/h: batch 1,
    # tried first, is feasible, and a larger batch at the same cost would lose the tie on its
    # size, so none is estimated
    light = planner(10, 100)
    moved = light.downgrade_hardware(Configuration({"s0": StageConfig("gpu", 1, 1)}), "s0")
    assert moved == Configuration({"s0": StageConfig("cpu4", 1, 1)})
    assert light.replays == 1


def test_downgrade_hardware_takes_a_smaller_batch_when_the_slower_kind_needs_it() -> None:
    # The shape of the bench's 1000 ms / CV 0.1 local minimum. Poisson arrivals at 300/s:
    # one cpu4 replica at batch 8 ($0.4/h) meets 30 ms; cpu1 replicas (10 ms + 2 ms a row)
    # at batch 8 do not, however many cost less (a queued burst makes 24 ms batches), but three
    # at batch 2 do ($0.3/h).
    arrivals = arrival_times(ArrivalSpec(300, 5, cv=1.0, seed=0))
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, arrivals, 30 * MS)
    on_cpu4 = Configuration({"s0": StageConfig("cpu4", 8, 1)})
    assert p.feasible(on_cpu4)
    for count in (1, 2, 3):
        assert not p.feasible(Configuration({"s0": StageConfig("cpu1", 8, count)}))
    moved = p.downgrade_hardware(on_cpu4, "s0")
    assert moved == Configuration({"s0": StageConfig("cpu1", 2, 3)})
    assert p.feasible(moved) and p.cost(moved) < p.cost(on_cpu4)
    # nothing on cpu1 costs less than one cpu4 replica and keeps up with twice the load
    doubled = at_slo(chain(1.0), PROFILES, CATALOGUE, arrivals / 2, 30 * MS)
    assert doubled.downgrade_hardware(on_cpu4, "s0") is None


def test_a_stage_loaded_to_its_throughput_is_not_feasible() -> None:
    # 101 queries/s, one every 9.9 ms, on a replica taking 10 ms: the queue grows by 0.1 ms
    # a query, so over 5 s the last query waits 50 ms (P99 within 100 ms), over 60 s 600 ms
    p = at_slo(chain(1.0), {"m0": {"cpu1": flat(10)}}, CATALOGUE, steady(101, 5), 100 * MS)
    one = Configuration({"s0": StageConfig("cpu1", 1, 1)})
    assert p.estimate(one).p99 == pytest.approx((10 + 0.99 * 504 * 0.1) * MS, rel=0.01)
    assert p.utilisation(one)["s0"] > 1
    assert not p.feasible(one)
    longer = at_slo(chain(1.0), {"m0": {"cpu1": flat(10)}}, CATALOGUE, steady(101, 60), 1.0)
    assert longer.estimate(one).p99 > 500 * MS
    plan = p.plan()
    assert plan.config == Configuration({"s0": StageConfig("cpu1", 1, 2)})
    assert plan.utilisation["s0"] < 1


def test_fewest_replicas_finds_the_smallest_feasible_count() -> None:
    p = at_slo(chain(1.0), {"m0": {"cpu1": flat(10)}}, CATALOGUE, steady(450), 30 * MS)
    many = Configuration({"s0": StageConfig("cpu1", 1, 12)})
    # 100 queries/s per replica: 5 replicas keep up with 450/s
    assert p.fewest_replicas(many, "s0", 12) == Configuration({"s0": StageConfig("cpu1", 1, 5)})
    assert p.fewest_replicas(many, "s0", 3) is None


def test_the_plan_is_feasible_and_no_single_action_makes_it_cheaper() -> None:
    p = planner(120, 80, 1.0, 0.4)
    plan = p.plan()
    assert plan.feasible and plan.config is not None
    assert plan.p99 <= 80 * MS
    assert plan.cost_per_hour < p.cost(p.initial()) * 4
    for stage in ("s0", "s1"):
        for action in (p.increase_batch, p.remove_replica, p.downgrade_hardware):
            candidate = action(plan.config, stage)
            if candidate is not None and p.feasible(candidate):
                assert p.cost(candidate) >= plan.cost_per_hour
    # the GPU-like kind costs 30x a cpu1 worker: at this load the plan leaves it
    assert all(plan.config[s].hardware != "gpu" for s in ("s0", "s1"))


def test_planning_with_spread_durations_provisions_for_the_tail() -> None:
    profile = LatencyProfile({1: 0.010}, p99={1: 0.040})
    args = (chain(1.0), {"m0": {"cpu1": profile}}, CATALOGUE, steady(60, 20), 0.050)
    lean = at_slo(*args).plan()
    tailed = at_slo(*args, spread=True).plan()
    assert lean.config is not None and tailed.config is not None
    assert lean.config["s0"].replicas == 1  # 10 ms every 16.7 ms: never a queue
    assert tailed.config["s0"].replicas > 1
    assert tailed.p99 <= 0.050


def test_reconfigure_reaches_a_kind_beyond_the_next_cheaper() -> None:
    # The next cheaper kind (cpu4) cannot meet 30 ms at all (40 ms a query), so InferLine's
    # DowngradeHardware finds nothing and its greedy loop stops on the GPU-like kind ($3/h);
    # one cpu1 worker (10 ms a query, one every 20 ms) meets it for $0.1/h
    profiles = {"m0": {"gpu": flat(2.5), "cpu4": flat(40), "cpu1": flat(10)}}
    args = (chain(1.0), profiles, CATALOGUE, steady(50), 30 * MS)
    p = at_slo(*args, restarts=False)
    on_gpu = Configuration({"s0": StageConfig("gpu", 1, 1)})
    assert p.feasible(on_gpu)
    assert p.downgrade_hardware(on_gpu, "s0") is None
    assert p.increase_batch(on_gpu, "s0") is None and p.remove_replica(on_gpu, "s0") is None
    on_cpu1 = Configuration({"s0": StageConfig("cpu1", 1, 1)})
    assert p.reconfigure(on_gpu, "s0") == on_cpu1
    assert at_slo(*args, restarts=False).plan().config == on_gpu  # InferLine's search stays
    plan = at_slo(*args).plan()
    assert plan.config == on_cpu1 and plan.cost_per_hour == pytest.approx(0.1)
    reconfigured = plan.steps.index(
        "restart from the fastest hardware at batch 1, with Reconfigure"
    )
    assert plan.steps[reconfigured + 1] == "Reconfigure on s0: $0.100/h"


def test_reconfigure_moves_to_a_dearer_kind_when_fewer_replicas_cost_less() -> None:
    # 300 queries/s within 12 ms: cpu1 (10 ms + 2 ms a row) keeps up at batch 1 with 4
    # replicas ($0.4/h); InferLine's actions only go to cheaper kinds, and there is none. One
    # replica of a dearer kind, cpu4 here at $0.3/h (5 ms + 1 ms a row), takes the load
    profiles = {"m0": {"cpu1": flat(10, SIZES, per_row_ms=2), "cpu4": flat(5, SIZES, 1)}}
    catalogue = Catalogue({**CATALOGUE.kinds, "cpu4": Hardware("cpu4", 0.3, cpus=4, threads=4)})
    p = at_slo(chain(1.0), profiles, catalogue, steady(300), 12 * MS)
    on_cpu1 = Configuration({"s0": StageConfig("cpu1", 1, 4)})
    assert p.feasible(on_cpu1)
    assert p.fewest_replicas(on_cpu1, "s0", 4) == on_cpu1
    assert p.downgrade_hardware(on_cpu1, "s0") is None  # nothing is cheaper than cpu1
    moved = p.reconfigure(on_cpu1, "s0")
    assert moved is not None and moved["s0"].hardware == "cpu4" and moved["s0"].replicas == 1
    assert p.cost(moved) == pytest.approx(0.3)


def test_actions_search_only_within_the_budget() -> None:
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, steady(180), 60 * MS)
    three = Configuration({"s0": StageConfig("cpu1", 1, 3)})
    best = Configuration({"s0": StageConfig("cpu1", 4, 1)})  # $0.1/h
    assert p.increase_batch(three, "s0", budget=0.1) == best
    assert p.increase_batch(three, "s0", budget=0.09) is None
    assert p.remove_replica(three, "s0", budget=0.2) is not None
    assert p.remove_replica(three, "s0", budget=0.19) is None


def test_the_plan_is_the_cheapest_feasible_configuration_estimated() -> None:
    p = planner(120, 80, 1.0, 0.4)
    plan = p.plan()
    assert plan.config is not None and p.cheapest == plan.config
    names = p.pipeline.names
    for key in list(p._estimates):
        config = Configuration(
            {n: StageConfig(*stage) for n, stage in zip(names, key, strict=True)}
        )
        if p.feasible(config):
            assert p.cost(config) >= plan.cost_per_hour - 1e-9


def test_restarts_escape_where_the_greedy_search_gets_stuck() -> None:
    # s0 -> s1 (half the queries), 600 queries/s within 40 ms. From the fastest hardware the
    # cheapest first moves put s0 on cpu1 at batch 2 (12 ms batches) and s1 on the GPU-like
    # kind at batch 4 with two replicas ($6.4/h); one s1 replica at batch 8 would do, but not
    # behind s0's longer batches, and s0 back at batch 1 costs more on its own: no single move
    # is cheaper. The restart from the GPU-like kind at a larger batch reaches $3.5/h.
    profiles = {
        "m0": {"gpu": flat(5, SIZES, per_row_ms=0.5), "cpu1": flat(8, SIZES, per_row_ms=4)},
        "m1": {"gpu": flat(8, SIZES, per_row_ms=0.5), "cpu4": flat(32, SIZES, per_row_ms=2)},
    }
    args = (chain(1.0, 0.5), profiles, CATALOGUE, steady(600, 2.0), 40 * MS)
    plain = at_slo(*args, restarts=False)
    stuck = plain.plan()
    assert stuck.config == Configuration(
        {"s0": StageConfig("cpu1", 2, 4), "s1": StageConfig("gpu", 4, 2)}
    )
    assert stuck.cost_per_hour == pytest.approx(6.4)
    assert not plain.feasible(stuck.config.with_stage("s1", max_batch=8, replicas=1))
    for stage in ("s0", "s1"):  # a local minimum of every single-stage move
        assert plain.reconfigure(stuck.config, stage) is None
    p = at_slo(*args)
    plan = p.plan()
    assert plan.config == Configuration(
        {"s0": StageConfig("cpu1", 1, 5), "s1": StageConfig("gpu", 8, 1)}
    )
    assert plan.cost_per_hour == pytest.approx(3.5) and plan.p99 <= 40 * MS
    assert any(step.startswith("restart from") for step in plan.steps)


def test_batched_start_takes_the_largest_batch_within_half_the_slo() -> None:
    # on the GPU-like kind s0 takes 5 + 0.5 ms a row and s1 8 + 0.5 ms: batch 8 is 20 ms
    # along the path, over half of 38 ms; batch 4 is 16 ms
    profiles = {
        "m0": {"gpu": flat(5, SIZES, per_row_ms=0.5), "cpu1": flat(8, SIZES, per_row_ms=4)},
        "m1": {"gpu": flat(8, SIZES, per_row_ms=0.5)},
    }
    p = at_slo(chain(1.0, 0.5), profiles, CATALOGUE, steady(600, 2.0), 38 * MS)
    start = p.batched_start("gpu")
    assert start is not None
    assert start["s0"] == StageConfig("gpu", 4, 1)  # 4 rows in 6.5 ms: 615 queries/s
    assert start["s1"] == StageConfig("gpu", 4, 1)
    # on cpu1 (s1 has no cpu1 profile: its fastest kind) batch 1 is 8 + 8 = 16 ms, batch 2
    # 12 + 8.5 ms
    on_cpu1 = p.batched_start("cpu1")
    assert on_cpu1 is not None and on_cpu1["s0"].max_batch == 1 and on_cpu1["s1"].hardware == "gpu"
    assert on_cpu1["s0"].replicas == 5  # 125 queries/s each at batch 1
    assert p.batched_start("cpu4") == Configuration(  # cpu4 profiles neither: the fastest kinds
        {"s0": StageConfig("gpu", 4, 1), "s1": StageConfig("gpu", 4, 1)}
    )


def test_fewer_replicas_than_a_configuration_that_missed_are_refused_without_an_estimate() -> None:
    p = planner(100, 25, 1.0, 0.5)
    # on cpu1 a query takes 10 ms, then 20 ms for the half that reach s1: over 25 ms
    missed = Configuration({"s0": StageConfig("cpu1", 1, 2), "s1": StageConfig("cpu1", 1, 3)})
    assert not p.feasible(missed)
    estimated = len(p._estimates)
    fewer = missed.with_stage("s1", replicas=2)
    assert max(p.utilisation(fewer).values()) < 1
    assert not p.feasible(fewer)
    assert len(p._estimates) == estimated  # refused without a replay
    more = missed.with_stage("s0", replicas=3)
    assert not p.feasible(more)
    assert len(p._estimates) == estimated + 1  # more replicas somewhere: estimated


def test_each_action_s_floor_is_the_least_it_could_cost_without_an_estimate() -> None:
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, steady(150), 60 * MS, restarts=False)
    three = Configuration({"s0": StageConfig("cpu1", 1, 3)})
    floors = {a: p.floor(three, "s0", a) for a in ("RemoveReplica", "IncreaseBatch")}
    # one replica fewer: $0.2/h; batch 2 takes 2 / 12 ms = 167 queries/s: one replica, $0.1/h
    assert floors == pytest.approx({"RemoveReplica": 0.2, "IncreaseBatch": 0.1})
    assert p.floor(three, "s0", "DowngradeHardware") == float("inf")  # nothing cheaper
    assert p.floor(three, "s0", "Reconfigure") == pytest.approx(0.1)
    assert p.replays == 0


def test_a_step_tries_the_action_that_could_cost_least_first() -> None:
    p = at_slo(chain(1.0), PROFILES, CATALOGUE, steady(150), 60 * MS, restarts=False)
    steps: list[str] = []
    end = p._descend(Configuration({"s0": StageConfig("cpu1", 1, 3)}), steps, reconfigure=False)
    assert end == Configuration({"s0": StageConfig("cpu1", 2, 1)})
    assert steps == ["IncreaseBatch on s0: $0.100/h"]
    # batch 2 on one replica met the SLO: removing one of three ($0.2/h) was never replayed
    assert p.replays == 1


def test_replicas_for_the_load_are_found_without_an_estimate_per_replica() -> None:
    """InferLine's initialisation adds one replica at a time at the bottleneck; the planner
    reaches the same configuration by doubling and bisection over those steps."""
    trace = arrival_times(ArrivalSpec(500, 4, cv=2.0, seed=4))
    profiles = {"m0": {"cpu1": flat(10)}, "m1": {"cpu1": flat(25)}}
    found = at_slo(chain(1.0, 0.6), profiles, CATALOGUE, trace, 40 * MS, restarts=False)
    steps: list[str] = []
    start = found.initial()
    made = found._make_feasible(start, steps, inferline=True)
    walker = at_slo(chain(1.0, 0.6), profiles, CATALOGUE, trace, 40 * MS, restarts=False)
    walked = start
    while not walker.feasible(walked):  # InferLine's walk, one replica at a time
        stage = walker.bottleneck(walked)
        walked = walked.with_stage(stage, replicas=walked[stage].replicas + 1)
    assert made == walked
    assert sorted(steps) == [
        f"add {walked['s0'].replicas - 1} replicas to the bottleneck s0",
        f"add {walked['s1'].replicas - 1} replicas to the bottleneck s1",
    ]
    assert found.greedy < walker.greedy / 2  # each configuration estimated is looked at greedily


def test_the_greedy_estimate_refuses_candidates_without_changing_the_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = arrival_times(ArrivalSpec(130, 8, cv=1.0, seed=2))
    quick = at_slo(chain(1.0, 0.5), PROFILES, CATALOGUE, trace, 60 * MS)
    fast = quick.plan()
    monkeypatch.setattr("headway.planning.feasibility.QUICK_MARGIN", float("inf"))
    slow = at_slo(chain(1.0, 0.5), PROFILES, CATALOGUE, trace, 60 * MS)
    every = slow.plan()
    assert fast.config == every.config and fast.p99 == every.p99
    assert quick.refused > 0 and slow.refused == 0
    assert quick.replays < slow.replays
