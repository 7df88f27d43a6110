"""InferLine's own estimator, for the planner's quick look at a candidate.

A batched stage is replicas on one shared queue: a replica that is free takes as many queued
requests as the stage's max batch allows, the most urgent (the earliest query) first, and is
busy for the profiled time of that many rows. A query reaches a stage once every parent has
answered for it (a join), and only if its share allows (`headway.planning.pipeline`); it is
done when the last stage it reached answers. In a pipeline (a DAG, no cycles) each stage's
queue depends only on when its requests arrive, so the stages are replayed one after another
in the pipeline's order, each over its requests in time order: a few microseconds a request,
where the server's own controller (`headway.planning.simulator.simulate`) takes tens.

It leaves out what the controller adds to the greedy rule (an action sent ahead to a worker
about to be free, the replies' hops), so it is mostly as fast or faster than the controller's
replay of the same trace and configuration: where both form the same batches, with the same
durations drawn (`SpreadDurations` draws each stage's batches from a stream of its own), it
gives the same latencies to the bit. The planner refuses a candidate without the controller's
replay when this estimate is clearly over the SLO (`headway.planning.feasibility`).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from functools import partial

import numpy as np

from headway.planning.pipeline import Configuration, Pipeline, Profiles, profile_of
from headway.planning.simulator import SpreadDurations, reach_draws

#: seconds for a batch of `rows` rows at a stage
Duration = Callable[[int], float]


def stage_done(
    ready: np.ndarray,
    urgency: np.ndarray,
    replicas: int,
    max_batch: int,
    duration: Duration,
    hop: float = 0.0,
) -> np.ndarray:
    """When each request of one stage is answered: request i is queued at `ready[i]`,
    `urgency[i]` orders the queue (lower first), and each of `replicas` free replicas takes up
    to `max_batch` queued requests for `duration(rows)` seconds; each answer comes `hop`
    seconds after its batch ends (the round trip to the worker, which the replica does not
    wait for)."""
    order = np.lexsort((urgency, ready))
    times: list[float] = ready[order].tolist()
    ranks = urgency[order]
    if len(ranks) < 2 or bool(np.all(ranks[1:] > ranks[:-1])):
        done = _in_order(times, replicas, max_batch, duration, hop)
    else:
        done = _by_urgency(times, ranks.tolist(), replicas, max_batch, duration, hop)
    answered = np.empty(len(times))
    answered[order] = done
    return answered


def _in_order(
    times: list[float], replicas: int, max_batch: int, duration: Duration, hop: float
) -> list[float]:
    """`stage_done` where the queue's order is the order of arrival (`times`, sorted): the
    queue is a run of the arrivals, each batch its first rows."""
    count = len(times)
    done = [0.0] * count
    free = [0.0] * replicas  # when each replica is next free (a heap)
    head = arrived = 0  # the queue: times[head:arrived]
    now = 0.0
    while head < count:
        start = free[0] if free[0] > now else now
        if head == arrived and times[head] > start:
            start = times[head]
        arrived = bisect.bisect_right(times, start, arrived)
        rows = min(arrived - head, max_batch)
        end = start + duration(rows)
        done[head : head + rows] = [end + hop] * rows
        head += rows
        now = start
        heapq.heapreplace(free, end)
    return done


def _by_urgency(
    times: list[float],
    ranks: list[int],
    replicas: int,
    max_batch: int,
    duration: Duration,
    hop: float,
) -> list[float]:
    """`stage_done` where requests arrive out of their queue order (`ranks`, by `times`)."""
    count = len(times)
    done = [0.0] * count
    free = [0.0] * replicas
    queue: list[tuple[int, int]] = []  # (rank, request), a heap
    now, arrived = 0.0, 0
    while arrived < count or queue:
        start = free[0] if free[0] > now else now
        if not queue and times[arrived] > start:
            start = times[arrived]
        while arrived < count and times[arrived] <= start:
            heapq.heappush(queue, (ranks[arrived], arrived))
            arrived += 1
        now = start
        rows = min(max_batch, len(queue))
        end = start + duration(rows) + hop
        for _ in range(rows):
            done[heapq.heappop(queue)[1]] = end
        heapq.heapreplace(free, end - hop)
    return done


def greedy_latencies(
    pipeline: Pipeline,
    config: Configuration,
    profiles: Profiles,
    arrivals: np.ndarray,
    *,
    seed: int = 0,
    spread: bool = False,
    rpc_seconds: float = 0.0,
    draws: np.ndarray | None = None,
) -> np.ndarray:
    """Each query's latency (seconds, arrival order) through `pipeline` under `config`, by
    the greedy rule (the module docstring). `seed`, `spread`, `draws` and `rpc_seconds` mean
    what they mean to `simulate`: with `spread`, each batch's time is drawn as the
    controller's replay draws it."""
    times = np.asarray(arrivals, dtype=np.float64)
    times = times - times[0] if len(times) else times
    if draws is None:
        draws = reach_draws(len(times), seed)
    sample = SpreadDurations(pipeline, config, profiles, seed) if spread else None
    done: dict[str, np.ndarray] = {}
    for stage in pipeline.stages:
        c = config[stage.name]
        profile = profile_of(profiles, stage.model, c.hardware)
        ready = np.max([done[p] for p in stage.parents], axis=0) if stage.parents else times
        reached = np.nonzero(draws < stage.scale)[0]
        finished = ready.copy()  # a stage a query does not reach answers at once
        if len(reached):
            if sample is not None:
                duration: Duration = partial(sample, stage.name)
            else:
                duration = [0.0, *map(profile.latency, range(1, c.max_batch + 1))].__getitem__
            finished[reached] = stage_done(
                ready[reached],
                reached,
                c.replicas,
                c.max_batch,
                duration,
                hop=2 * rpc_seconds,
            )
        done[stage.name] = finished
    last = np.max([done[s.name] for s in pipeline.stages], axis=0)
    latencies: np.ndarray = last - times
    return latencies
