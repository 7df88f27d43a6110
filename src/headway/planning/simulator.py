"""The estimator: replay an arrival trace through a pipeline under a configuration.

InferLine's discrete-event estimator, on `headway.sim.ServerSimulation`: the server's own
controller admits, batches and dispatches every stage's requests over simulated replicas
(`simulate` says how a query moves through the stages).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from headway.control.policy import HEADWAY
from headway.errors import ConfigError
from headway.planning.pipeline import Catalogue, Configuration, Pipeline, Profiles, profile_of
from headway.sim import ModelProfile, ServerSimulation
from headway.sim.pipeline import run_pipeline

#: Seconds after its arrival by which a simulated request "must" finish: far enough that no
#: batch is shrunk and nothing is rejected for its deadline.
HORIZON = 1e6
#: The server's policy without early rejection (nothing is ever late enough to reject).
PLANNING = replace(HEADWAY, name="planning", early_reject=False)
#: Seconds of the clock at a multiple of which a replay's trace starts (after the warm-up).
START_GRID = 64.0


@dataclass(frozen=True)
class Estimate:
    """Per-query latencies (seconds, arrival order) and what each stage did."""

    latencies: np.ndarray
    reached: dict[str, int]  # stage -> queries that reached it
    busy: dict[str, float]  # stage -> share of its replicas' time spent computing
    duration: float  # seconds from the first arrival to the last
    complete: bool = True  # False: stopped early, too many queries were late (`give_up`)
    #: stage -> rows per INFER the trace's batches carried (the warm-up runs left out)
    batch: dict[str, float] = field(default_factory=dict)
    #: stage -> the most requests its queue held at once, until the replay ended (stopped
    #: early or not): a max batch above it would have made every batch the same
    queued: dict[str, int] = field(default_factory=dict)

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
    """Changes replica counts during a replay: `start` is given the simulated server (started),
    the arrivals, and `offset`, the clock's time at arrival time 0; it schedules its own
    decisions with `ServerSimulation.at`, which ask `Controller.scale`. A replica it adds is
    ready `startup` seconds after it was asked for."""

    startup: float

    def start(self, sim: ServerSimulation, arrivals: np.ndarray, offset: float) -> None: ...


#: The standard normal's 99th percentile.
Z99 = 2.3263
#: Normal draws a stage's stream gives at a time (numpy's draws in a block are the same
#: numbers as one at a time; a block costs about what one does).
DRAW_BLOCK = 256


def lognormal_shape(mean: float, p99: float | None) -> tuple[float, float] | None:
    """(mu, sigma) of the log-normal with this mean and 99th percentile; None where there is
    no tail to draw (no p99, or one at or below the mean)."""
    if p99 is None or p99 <= mean:
        return None
    # mean = exp(mu + s^2/2) and p99 = exp(mu + Z99 s): the smaller root for s
    ratio = min(math.log(p99 / mean), Z99 * Z99 / 2)
    sigma = Z99 - math.sqrt(Z99 * Z99 - 2 * ratio)
    return math.log(mean) - sigma * sigma / 2, sigma


class SpreadDurations:
    """A duration function `(stage, rows) -> seconds` drawing each INFER from a log-normal with
    the stage's profiled mean and p99 for that many rows (the mean where there is no p99).

    Each stage draws from its own stream, seeded from `seed` and the stage's place in the
    pipeline: its n-th batch takes the n-th draw whatever the other stages do, so two
    configurations that differ at one stage draw the same durations everywhere else (common
    random numbers: their P99s differ by what the change did, not by luck), and an estimate
    that forms a stage's batches in another order across stages (`headway.planning.greedy`)
    draws the same. `restart` starts the draws again from `seed`: `simulate` restarts them
    when the trace begins, so that the trace's draws do not depend on how many warm-up runs
    drew before it. Where the profile has a `persistence` p, a stage's standard normal draws
    follow an AR(1) (z = p z_last + sqrt(1 - p^2) e): each batch's log-normal is the same, but
    a slow batch tends to follow a slow one, as they do on shared cores."""

    def __init__(
        self, pipeline: Pipeline, config: Configuration, profiles: Profiles, seed: int
    ) -> None:
        self.seed = seed
        self.by_stage = {
            s.name: profile_of(profiles, s.model, config[s.name].hardware) for s in pipeline.stages
        }
        self.place = {name: i for i, name in enumerate(self.by_stage)}
        self.shapes: dict[tuple[str, int], tuple[float, float] | None] = {}
        self.restart()

    def restart(self) -> None:
        self.rngs = {
            name: np.random.default_rng([self.seed + 1, i]) for name, i in self.place.items()
        }
        #: per stage, standard normal draws taken from its stream a block at a time (the
        #: same numbers, in the same order, as one at a time), and how many are used
        self.drawn: dict[str, list[float]] = {name: [] for name in self.place}
        self.used: dict[str, int] = dict.fromkeys(self.place, 0)
        self.last: dict[str, float] = {}  # stage -> its last batch's standard normal draw

    def _normal(self, stage: str) -> float:
        used, drawn = self.used[stage], self.drawn[stage]
        if used == len(drawn):
            drawn = self.drawn[stage] = self.rngs[stage].standard_normal(DRAW_BLOCK).tolist()
            used = 0
        self.used[stage] = used + 1
        return drawn[used]

    def __call__(self, stage: str, rows: int) -> float:
        key = (stage, rows)
        if key in self.shapes:
            shape = self.shapes[key]
        else:
            profile = self.by_stage[stage]
            shape = self.shapes[key] = lognormal_shape(profile.latency(rows), profile.tail(rows))
        if shape is None:
            return self.by_stage[stage].latency(rows)
        centre, sigma = shape
        fresh = self._normal(stage)
        keep = self.by_stage[stage].persistence
        if keep:
            last = self.last.get(stage)
            fresh = fresh if last is None else keep * last + math.sqrt(1 - keep * keep) * fresh
            self.last[stage] = fresh
        return math.exp(centre + sigma * fresh)


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
    draws: np.ndarray | None = None,
) -> Estimate:
    """Replay `arrivals` (sorted seconds) through `pipeline` under `config`.

    The simulated server (`ServerSimulation`: the server's own controller over simulated
    workers) serves each stage as a model on that stage's replicas, placed by the controller
    and warmed up before the first arrival. A query enters its input stages at its arrival,
    moves to a child when the child's every parent has answered (a join), reaches only the
    stages its share allows (see `headway.planning.pipeline`), and is done when the last stage
    it reached answers (`headway.sim.pipeline`, which walks the stages with the served flow's
    executor); its latency is that moment less its arrival.
    Requests carry a far deadline and the scheduler runs without early rejection
    (`PLANNING`): the plan's SLO is judged on the simulated latencies (P99), not enforced by
    dropping requests, so every batch is the greedy one InferLine's estimator models -- as
    many queued rows as the stage's max batch allows.

    With `give_up` (seconds), the replay stops as soon as enough queries took longer for the
    P99 to exceed it (the planner's infeasible candidates end early); such an estimate is
    incomplete, its P99 infinite. `scaling` changes replica counts while the replay runs
    (`headway.planning.scaling`). With `spread`, each action's duration is drawn (from `seed`)
    from a log-normal with the profile's mean and p99 at that batch size, instead of the mean.

    `draws`, one per arrival in [0, 1), say which stages each query reaches (those whose share
    is above its draw; by default `reach_draws`, from `seed`): a replay of real queries gives
    its queries' own, so that the queries that went on in the server go on here too.

    `rpc_seconds` is the one-way delay between the controller and a worker; `noise` multiplies
    each action's profiled duration by (1 + noise * |N(0, 1)|), drawn from `seed`. `catalogue`,
    when given, checks that every stage's hardware is in it."""
    stages, order = pipeline.stages, pipeline.names
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
    arrivals = np.asarray(arrivals, dtype=np.float64)
    first = float(arrivals[0]) if len(arrivals) else 0.0
    sample = SpreadDurations(pipeline, config, profiles, seed) if spread else None
    replicas = {name: config[name].replicas for name in order}
    with ServerSimulation(
        models,
        workers=sum(replicas.values()),
        replicas=replicas,
        slo_ms=HORIZON * 1e3,
        policy=PLANNING,
        rpc_seconds=rpc_seconds,
        noise=noise,
        sample=sample,
        seed_profiles=True,
        max_queue=max(4096, 2 * len(arrivals)),
        seed=seed,
        startup=scaling.startup if scaling is not None else None,
    ) as sim:
        # the trace starts at a round time, whatever the warm-up took: two configurations
        # that differ only in what they warmed up (a max batch no queue reaches) then replay
        # the trace at the same clock times, to the bit, and with the same drawn durations
        started = math.ceil(sim.start() / START_GRID) * START_GRID
        sim.idle_until(started)
        if sample is not None:  # nor on how many warm-up runs drew before it
            sample.restart()
        warm_up = dict(sim.engine.computing)  # the warm-up runs are not the trace's
        controller = sim.controller
        warm_batches = {n: controller.model_statistics(n).counts.batch_size for n in order}
        if scaling is not None:
            scaling.start(sim, arrivals, started - first)
        index = {name: i for i, name in enumerate(order)}
        if draws is None:
            draws = reach_draws(len(arrivals), seed)
        elif len(draws) != len(arrivals):
            raise ConfigError(f"{len(draws)} reach draws for {len(arrivals)} arrivals")
        reaches = np.asarray(draws)[:, None] < np.array([s.scale for s in stages])
        run = run_pipeline(
            sim,
            order,
            [[index[p] for p in s.parents] for s in stages],
            reaches,
            arrivals - first,
            timeout=HORIZON,
            give_up=give_up,
        )
        if not run.complete:
            return Estimate(
                latencies=np.where(np.isnan(run.finished), np.inf, run.latencies),
                reached={},
                busy={},
                duration=0.0,
                complete=False,
                queued=dict(zip(order, run.queued, strict=True)),
            )
        computing = {
            name: sim.engine.computing.get(key, 0.0) - warm_up.get(key, 0.0)
            for name in order
            for key in [sim.controller.model(name).config.key]
        }
        serving = {name: len(sim.controller.model(name).workers) for name in order}
        batch = {}
        for name in order:
            batches = controller.model_statistics(name).counts.batch_size
            actions = batches.count - warm_batches[name].count
            if actions:
                batch[name] = (batches.total - warm_batches[name].total) / actions
    latencies = run.latencies
    duration = float(arrivals[-1] - first) if len(arrivals) > 1 else 1.0
    done = latencies + arrivals - first
    span = max(float(np.nanmax(done)) if done.size else 0.0, duration, 1e-9)
    return Estimate(
        latencies=latencies,
        reached={name: int(reaches[:, i].sum()) for i, name in enumerate(order)},
        busy={name: computing[name] / (span * max(serving[name], 1)) for name in order},
        duration=duration,
        batch=batch,
        queued=dict(zip(order, run.queued, strict=True)),
    )
