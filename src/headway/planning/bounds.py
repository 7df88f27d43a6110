"""What no configuration can beat, from the profiles and the trace alone: the planner refuses
an SLO under it before any search.

- **The critical path**: every query that reaches a path of stages takes at least each
  stage's fastest time for one row (its batch-1 mean on its fastest kind), one after the
  other -- plus, with a frontend, its wait for the server's one event loop, which replicas
  cannot shorten (`frontend_waits`: one queue, one query at a time).
- **The tail**: with spread durations, every query's time at a stage is drawn from the
  log-normal of the batch it rides in. With each stage on the (kind, batch size) whose p99
  is least, and no query ever waiting, the P99 of the queries' sums along their paths
  (`service_tail`, drawn) is the most any number of replicas could give.
- **The throughput**: a stage whose share of the trace's rate needs more than the most
  replicas the planner gives one stage (`MAX_REPLICAS`), at its best rows a second, has a
  queue that grows for ever.

Each bound is a sum or a maximum of the least that each stage could take, so it holds for
every configuration the search could reach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from headway.planning.greedy import stage_done
from headway.planning.moves import MAX_REPLICAS
from headway.planning.pipeline import LatencyProfile, Pipeline
from headway.planning.simulator import lognormal_shape, reach_draws

#: Queries drawn for the tail bound: its P99 rests on the 200 slowest.
TAIL_DRAWS = 20_000


@dataclass(frozen=True)
class Bound:
    """The least P99 any configuration could have (seconds), and what sets it."""

    p99: float
    reason: str


def frontend_waits(arrivals: np.ndarray, seconds: float) -> np.ndarray:
    """Each query's time in the frontend stage (its wait and its own `seconds`): one
    server, one query at a time, in arrival order."""
    if seconds <= 0 or len(arrivals) == 0:
        return np.zeros(len(arrivals))
    times = np.asarray(arrivals, dtype=np.float64)
    done = stage_done(times, np.arange(len(times)), 1, 1, lambda rows: seconds)
    waits: np.ndarray = done - times
    return waits


def critical_path(
    pipeline: Pipeline, options: dict[str, list[LatencyProfile]], frontend: np.ndarray
) -> Bound:
    """The P99 of each query's frontend time plus the critical path of every stage's
    fastest batch-1 mean (the first bound of the module docstring)."""
    fastest = {s: min(p.latency(1) for p in options[s]) for s in pipeline.names}
    path = pipeline.critical_path(fastest)
    waited = float(np.percentile(frontend, 99)) if frontend.size and frontend.any() else 0.0
    return Bound(
        path + waited,
        f"the critical path's service time on the fastest hardware"
        f"{' (the frontend included)' if waited > 0 else ''} is {(path + waited) * 1e3:.1f} ms",
    )


def service_tail(
    pipeline: Pipeline,
    options: dict[str, list[LatencyProfile]],
    frontend: np.ndarray,
    *,
    seed: int = 0,
    draws: int = TAIL_DRAWS,
) -> Bound | None:
    """The P99 of the queries' sums of drawn times along their paths, with each stage on its
    least-tail (kind, batch) and no waiting but the frontend's (`frontend`, per query of
    the trace, cycled); None where no profile has a tail to draw."""
    rng = np.random.default_rng([seed, 0xB0])
    reach = reach_draws(draws, seed)
    done: dict[str, np.ndarray] = {}
    tailed = False
    for stage in pipeline.stages:
        best: tuple[float, float, tuple[float, float] | None] | None = None
        for profile in options[stage.name]:
            for size in profile.batch_sizes:
                mean, p99 = profile.latency(size), profile.tail(size)
                key = (p99 if p99 is not None and p99 > mean else mean, mean)
                if best is None or key < best[:2]:
                    best = (*key, lognormal_shape(mean, p99))
        assert best is not None
        shape = best[2]
        if shape is None:
            took = np.full(draws, best[1])
        else:
            tailed = True
            took = np.exp(shape[0] + shape[1] * rng.standard_normal(draws))
        start = (
            np.max([done[p] for p in stage.parents], axis=0) if stage.parents else np.zeros(draws)
        )
        done[stage.name] = start + np.where(reach < stage.scale, took, 0.0)
    if not tailed:
        return None
    waited = np.resize(frontend, draws) if frontend.size else np.zeros(draws)
    total = np.max([done[s] for s in pipeline.names], axis=0) + waited
    p99 = float(np.percentile(total, 99))
    return Bound(
        p99,
        f"the models' own tail is {p99 * 1e3:.1f} ms at the P99 with no query waiting "
        "(each stage on its kind and batch size of least p99)",
    )


def most_replicas_needed(
    pipeline: Pipeline, options: dict[str, list[LatencyProfile]], rate: float
) -> Bound | None:
    """A stage that needs more than `MAX_REPLICAS` replicas at its best throughput (the
    third bound), as an infinite bound; else None."""
    for stage in pipeline.stages:
        best = max(p.throughput(b) for p in options[stage.name] for b in p.batch_sizes)
        needed = math.floor(rate * stage.scale / best) + 1
        if needed > MAX_REPLICAS:
            return Bound(
                math.inf,
                f"stage {stage.name!r} takes {rate * stage.scale:.0f} queries/s and one replica "
                f"at most {best:.0f}: it would need more than {MAX_REPLICAS} replicas",
            )
    return None
