"""The estimator: replay an arrival trace through a pipeline under a configuration.

InferLine's discrete-event estimator, on `headway.sim.Simulation`: the server's own
`Scheduler` batches and dispatches every stage's queue over simulated replicas (`simulate`
says how a query moves through the stages).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from headway.control.actions import INFER
from headway.control.request import Request
from headway.control.scheduling_policy import HEADWAY
from headway.errors import HeadwayError
from headway.planning.pipeline import Catalogue, Configuration, Pipeline, Profiles, profile_of
from headway.sim import ModelProfile, Simulation

#: Seconds after its arrival by which a simulated request "must" finish: far enough that no
#: batch is shrunk and nothing is rejected for its deadline.
HORIZON = 1e6
#: The server's policy without early rejection (nothing is ever late enough to reject).
PLANNING = replace(HEADWAY, name="planning", early_reject=False)


@dataclass(frozen=True)
class Estimate:
    """Per-query latencies (seconds, arrival order) and what each stage did."""

    latencies: np.ndarray
    reached: dict[str, int]  # stage -> queries that reached it
    busy: dict[str, float]  # stage -> share of its replicas' time spent computing
    duration: float  # seconds from the first arrival to the last
    complete: bool = True  # False: stopped early, too many queries were late (`give_up`)

    @property
    def p99(self) -> float:
        return self.percentile(99)

    def percentile(self, q: float) -> float:
        if not self.complete:
            return float("inf")
        return float(np.percentile(self.latencies, q)) if self.latencies.size else 0.0

    def attainment(self, slo: float) -> float:
        """The share of queries answered within `slo` seconds."""
        return float(np.mean(self.latencies <= slo + 1e-12)) if self.latencies.size else 1.0


class Scaling(Protocol):
    """Changes replica counts during a replay: `start` is given the simulation, each stage's
    active workers and `spare` idle ones per stage, and the arrivals; it schedules its own
    decisions with `Simulation.at`."""

    spare: int

    def start(
        self,
        sim: Simulation,
        active: dict[str, list[int]],
        idle: dict[str, list[int]],
        arrivals: np.ndarray,
    ) -> None: ...


#: The standard normal's 99th percentile.
Z99 = 2.3263


def spread_durations(
    pipeline: Pipeline, config: Configuration, profiles: Profiles, seed: int
) -> Callable[[str, int], float]:
    """A duration function drawing each INFER from a log-normal with the stage's profiled mean
    and p99 for that many rows (the mean where there is no p99); loads take no time."""
    rng = np.random.default_rng(seed + 1)
    by_stage = {
        s.name: profile_of(profiles, s.model, config[s.name].hardware) for s in pipeline.stages
    }

    def duration(stage: str, rows: int) -> float:
        if rows == 0:
            return 0.0
        profile = by_stage[stage]
        mean, p99 = profile.latency(rows), profile.tail(rows)
        if p99 is None or p99 <= mean:
            return mean
        # mean = exp(mu + s^2/2) and p99 = exp(mu + Z99 s): the smaller root for s
        ratio = min(math.log(p99 / mean), Z99 * Z99 / 2)
        sigma = Z99 - math.sqrt(Z99 * Z99 - 2 * ratio)
        return float(rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma))

    return duration


class _GaveUp(Exception):
    """Enough queries were late: the estimate's P99 is over `give_up`."""


def reach_draws(queries: int, seed: int) -> np.ndarray:
    """One uncertainty draw per query in [0, 1): a query reaches a stage of share s iff its
    draw is below s (so shares nest, and each stage sees exactly its share on average)."""
    return np.random.default_rng(seed).random(queries)


def simulate(
    pipeline: Pipeline,
    config: Configuration,
    profiles: Profiles,
    arrivals: np.ndarray,
    *,
    seed: int = 0,
    rpc_seconds: float = 0.0,
    noise: float = 0.0,
    catalogue: Catalogue | None = None,
    give_up: float | None = None,
    scaling: Scaling | None = None,
    spread: bool = False,
) -> Estimate:
    """Replay `arrivals` (sorted seconds) through `pipeline` under `config`.

    Each stage's replicas are simulated workers holding that stage's model. A query enters its
    input stages at its arrival, moves to a child when the child's every parent has answered
    (a join), reaches only the stages its share allows (see `headway.planning.pipeline`), and
    is done when the last stage it reached answers; its latency is that moment less its
    arrival. Requests carry a far deadline and the scheduler runs without early rejection
    (`PLANNING`): the plan's SLO is judged on the simulated latencies (P99), not enforced by
    dropping requests, so every batch is the greedy one InferLine's estimator models -- as
    many queued rows as the stage's max batch allows.

    With `give_up` (seconds), the replay stops as soon as enough queries took longer for the
    P99 to exceed it (the planner's infeasible candidates end early); such an estimate is
    incomplete, its P99 infinite. `scaling` changes replica counts while the replay runs
    (`headway.planning.scaling`). With `spread`, each action's duration is drawn (from `seed`)
    from a log-normal with the profile's mean and p99 at that batch size, instead of the mean.

    `rpc_seconds` is the one-way delay between the scheduler and a worker; `noise` multiplies
    each action's profiled duration by (1 + noise * |N(0, 1)|), drawn from `seed`. `catalogue`,
    when given, checks that every stage's hardware is in it."""
    stages = pipeline.stages
    models: dict[str, ModelProfile] = {}
    for stage in stages:
        stage_config = config[stage.name]
        if catalogue is not None:
            catalogue[stage_config.hardware]  # raises a ConfigError naming an unknown kind
        latency = profile_of(profiles, stage.model, stage_config.hardware)
        models[stage.name] = ModelProfile(
            {b: latency.latency(b) for b in range(1, stage_config.max_batch + 1)},
            load_seconds=0.0,
            size_mb=0.0,
            max_batch=stage_config.max_batch,
        )
    spare = scaling.spare if scaling is not None else 0
    total_replicas = sum(config[s.name].replicas + spare for s in stages)
    sim = Simulation(
        models,
        workers=total_replicas,
        memory_mb=float("inf"),
        policy=PLANNING,
        rpc_seconds=rpc_seconds,
        noise=noise,
        seed_profiles=True,
        max_queue=max(4096, 2 * len(arrivals)),
        seed=seed,
    )
    if spread:
        sampler = spread_durations(pipeline, config, profiles, seed)
        for simulated in sim.workers:
            simulated.durations = sampler
    replicas_of: dict[str, list[int]] = {}
    idle: dict[str, list[int]] = {}
    next_worker = 0
    for stage in stages:
        sim.register(stage.name)
        count = config[stage.name].replicas
        replicas_of[stage.name] = list(range(next_worker, next_worker + count))
        idle[stage.name] = list(range(next_worker + count, next_worker + count + spare))
        for worker in replicas_of[stage.name]:
            sim.scheduler.placed(stage.name, worker)
            sim.workers[worker].resident.add(stage.name)
        next_worker += count + spare

    queries = len(arrivals)
    arrivals = np.asarray(arrivals, dtype=np.float64)
    draws = reach_draws(queries, seed)
    order = pipeline.names
    index = {name: i for i, name in enumerate(order)}
    shares = np.array([s.scale for s in stages])
    parents = [[index[p] for p in s.parents] for s in stages]
    children = [[index[c] for c in pipeline.children(s.name)] for s in stages]
    inputs = [i for i, s in enumerate(stages) if not s.parents]
    # per query: stages it reaches; per (query, stage): parents still to answer
    reaches = draws[:, None] < shares[None, :]
    waiting = np.array([len(p) for p in parents], dtype=np.int32)[None, :].repeat(queries, axis=0)
    left = reaches.sum(axis=1).astype(np.int32)
    finished = np.full(queries, np.nan)

    def request(query: int, stage: int, now: float) -> Request:
        deadline = float(arrivals[query]) + HORIZON
        return Request(order[stage], {}, 1, now, deadline, token=(query, stage))

    # a query that reaches no input stage (all have shares below 1) is answered at once
    served = np.flatnonzero(reaches[:, inputs].any(axis=1))
    finished[left == 0] = arrivals[left == 0]

    def arrive(index: int, now: float) -> Request:
        # an input stage's request; the other input stages of a multi-input pipeline are
        # submitted here too (the loop submits the one returned)
        query = int(served[index])
        first, *rest = (i for i in inputs if reaches[query, i])
        for stage in rest:
            sim.scheduler.submit(request(query, stage, now))
        return request(query, first, now)

    late = 0
    # more than this many over `give_up` and the P99 (interpolated) is over it too
    too_many = 0.01 * queries + 2

    def answered(done: Request, now: float) -> None:
        nonlocal late
        query, stage = done.token
        left[query] -= 1
        if left[query] == 0:
            finished[query] = now
            if give_up is not None and now - arrivals[query] > give_up:
                late += 1
                if late >= too_many:
                    raise _GaveUp
        for child in children[stage]:
            if not reaches[query, child]:
                continue
            waiting[query, child] -= 1
            if waiting[query, child] == 0:
                sim.scheduler.submit(request(query, child, now))

    def rejected(failed: Request, error: HeadwayError, now: float) -> None:
        raise HeadwayError(f"the simulated scheduler rejected a request: {error.message}")

    if scaling is not None:
        scaling.start(sim, replicas_of, idle, arrivals)
    try:
        sim.drive(arrivals[served], arrive, answered, rejected, drain=HORIZON)
    except _GaveUp:
        return Estimate(
            latencies=np.where(np.isnan(finished), np.inf, finished - arrivals),
            reached={},
            busy={},
            duration=0.0,
            complete=False,
        )
    duration = float(arrivals[-1] - arrivals[0]) if queries > 1 else 1.0
    span = max(float(np.nanmax(finished) - arrivals[0]) if queries else 0.0, duration, 1e-9)
    busy = {
        name: sum(sim.workers[w].busy[INFER] for w in replicas_of[name])
        / (span * len(replicas_of[name]))
        for name in order
    }
    return Estimate(
        latencies=finished - arrivals,
        reached={name: int(reaches[:, i].sum()) for i, name in enumerate(order)},
        busy=busy,
        duration=duration,
    )
