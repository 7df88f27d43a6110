"""How cheap any configuration could be: a lower bound on every feasible configuration's cost,
and the cheapest feasible one by exhaustive best-first search -- to judge a plan against the
best possible (`bench/planner/exhaustive.py`), not to plan with: the search estimates every
configuration cheaper than its answer, where the planner's greedy descents estimate a few.

`lower_bound`: a feasible configuration keeps every stage below its throughput
(`Planner.feasible`), so each stage costs at least the fewest replicas that carry its share of
the trace's mean rate, on whichever (kind, batch size) does that most cheaply; latency aside.

`cheapest`: every shape -- one (kind, batch size) per stage, among the profiled ones, whose
critical path at full batches is within the SLO -- enters a priority queue at the fewest
replicas below its throughput. The cheapest (shape, replica counts) of all is popped and
estimated (`Planner.feasible`); if it misses, each configuration with one replica more at one
stage is pushed. More replicas never make a query later (the planner's searches rely on it
too), and every configuration of a shape is reached from its start by adding replicas, each
adding cost: so the first feasible pop is the cheapest feasible configuration of the space.
Stopped early, the next pop's cost is still a lower bound on that answer.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from headway.planning.moves import MAX_REPLICAS
from headway.planning.pipeline import Configuration, StageConfig
from headway.planning.planner import Planner


def lower_bound(planner: Planner, slo: float | None = None) -> dict[str, tuple[float, StageConfig]]:
    """Per stage, the least it can cost below its throughput, and where (the kind, batch and
    replicas); with `slo`, only on batch sizes whose service time is within it."""
    found: dict[str, tuple[float, StageConfig]] = {}
    for stage in planner.pipeline.names:
        options = []
        for kind in planner.hardware_for(stage):
            profile = planner.profile(stage, kind)
            for size in profile.batch_sizes:
                if slo is not None and profile.latency(size) > slo:
                    continue
                alone = Configuration({stage: StageConfig(kind, size)})
                count = planner.least_replicas(alone, stage)
                cost = count * planner.catalogue[kind].cost_per_hour
                options.append((cost, kind, size, count))
        if options:
            cost, kind, size, count = min(options)
            found[stage] = (cost, StageConfig(kind, size, count))
    return found


def shapes(planner: Planner) -> list[dict[str, tuple[str, int]]]:
    """Every (kind, batch size) per stage whose critical path at full batches (the frontend's
    time included) is within the goal (the SLO less the headroom)."""
    names = planner.pipeline.names
    per_stage = [
        [(k, b) for k in planner.hardware_for(s) for b in planner.profile(s, k).batch_sizes]
        for s in names
    ]
    found = []
    for combo in itertools.product(*per_stage):
        service = {
            s: planner.profile(s, k).latency(b) for s, (k, b) in zip(names, combo, strict=True)
        }
        if planner.frontend_seconds + planner.pipeline.critical_path(service) <= planner.goal:
            found.append(dict(zip(names, combo, strict=True)))
    return found


@dataclass(frozen=True)
class Cheapest:
    """`cheapest`'s answer: the configuration (None when the search stopped or found none)."""

    config: Configuration | None
    #: the least any feasible configuration of the space can cost ($/h): the answer's cost, or
    #: the next unestimated one's when the search stopped (inf: the space has no feasible one)
    at_least: float
    #: configurations tried (`Planner.feasible` asked)
    estimates: int
    #: shapes searched
    shapes: int


def cheapest(
    planner: Planner,
    estimates: int | None = None,
    seconds: float = math.inf,
    clock: Callable[[], float] = time.monotonic,
) -> Cheapest:
    """The cheapest configuration `planner.feasible` accepts, by best-first search over every
    shape's replica counts (see the module); stopped after `estimates` configurations or
    `seconds` of `clock`."""
    names = planner.pipeline.names
    every = shapes(planner)
    prices = {k: planner.catalogue[k].cost_per_hour for k in planner.catalogue}

    def config_of(index: int, counts: tuple[int, ...]) -> Configuration:
        shape = every[index]
        return Configuration(
            {s: StageConfig(*shape[s], n) for s, n in zip(names, counts, strict=True)}
        )

    def cost_of(index: int, counts: tuple[int, ...]) -> float:
        shape = every[index]
        return sum(prices[shape[s][0]] * n for s, n in zip(names, counts, strict=True))

    heap: list[tuple[float, int, tuple[int, ...]]] = []
    for index in range(len(every)):
        start = config_of(index, tuple(1 for _ in names))
        counts = tuple(planner.least_replicas(start, s) for s in names)
        heap.append((cost_of(index, counts), index, counts))
    heapq.heapify(heap)
    seen: set[tuple[int, tuple[int, ...]]] = set()
    made, started = 0, clock()
    while heap:
        cost, index, counts = heap[0]
        if (index, counts) in seen:  # pushed again from another predecessor
            heapq.heappop(heap)
            continue
        if (estimates is not None and made >= estimates) or clock() - started >= seconds:
            return Cheapest(None, cost, made, len(every))
        heapq.heappop(heap)
        seen.add((index, counts))
        config = config_of(index, counts)
        made += 1
        if planner.feasible(config):
            return Cheapest(config, cost, made, len(every))
        for i in range(len(names)):
            more = (*counts[:i], counts[i] + 1, *counts[i + 1 :])
            if counts[i] < MAX_REPLICAS and (index, more) not in seen:
                heapq.heappush(heap, (cost_of(index, more), index, more))
    return Cheapest(None, math.inf, made, len(every))
