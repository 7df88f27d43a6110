"""A pipeline's queries through the simulated server, as a flow's executor sends them.

Each stage is one of the server's models. A query's stage is submitted to the controller once
every parent of the stage has answered for that query (a join waits for all of them), with
what is left of the query's deadline, and only if the query reaches the stage (`reaches`: a
cascade's second model sees only the uncertain share). The query is done when the last stage
it reaches answers.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from headway.control.models import Prediction
from headway.errors import HeadwayError
from headway.sim.server import INPUT, ServerSimulation


@dataclass(frozen=True)
class PipelineRun:
    """When each query was done (clock seconds; NaN: not done), and its arrival."""

    arrivals: np.ndarray
    finished: np.ndarray
    #: False: the replay stopped early, once `give_up` was known to be exceeded.
    complete: bool = True
    #: per stage, the most requests its model's queue held at once (until the replay ended)
    queued: tuple[int, ...] = ()

    @property
    def latencies(self) -> np.ndarray:
        seconds: np.ndarray = self.finished - self.arrivals
        return seconds


def run_pipeline(
    sim: ServerSimulation,
    stages: Sequence[str],
    parents: Sequence[Sequence[int]],
    reaches: np.ndarray,
    times: np.ndarray,
    *,
    timeout: float,
    give_up: float | None = None,
    drain: float = 1e6,
) -> PipelineRun:
    """Replay `times` (sorted, seconds from now) through the pipeline whose stage i is the
    model `stages[i]` after the stages `parents[i]`; query q reaches stage i iff
    `reaches[q, i]`. Each query has `timeout` seconds from its arrival; a request the server
    refuses or fails raises a HeadwayError saying so.

    With `give_up` (seconds), the replay stops as soon as more than 1% of the queries (and 2)
    are known to take longer than that -- answered late, or still open that long after their
    arrival -- so that the P99 is known to be over it: the run is incomplete."""
    queries, count = reaches.shape
    children: list[list[int]] = [[] for _ in range(count)]
    for stage, above in enumerate(parents):
        for parent in above:
            children[parent].append(stage)
    inputs = [i for i in range(count) if not parents[i]]
    # per (query, stage), flat at query * count + stage (Python lists: read and written once
    # per request, faster than numpy's items; one list each, built without a loop per query)
    reach: list[bool] = reaches.ravel().tolist()
    waiting = [len(p) for p in parents] * queries
    left: list[int] = reaches.sum(axis=1).tolist()
    finished = [math.nan] * queries
    arrivals = [0.0] * queries
    arrived = [0]  # queries that have arrived (in order)
    deadlines = [0.0] * queries
    failed: list[BaseException] = []
    row = np.zeros((1, 1), np.float32)
    name = INPUT.name
    state = {"open": queries, "late": 0, "passed": 0}
    stale = [False] * queries  # counted late while still open
    too_many = 0.01 * queries + 2
    controller, clock = sim.controller, sim.clock
    keys = [controller.model(stage).config.key for stage in stages]
    queue_length = controller.scheduler.queue_length
    queued = [0] * count  # per stage, the most requests queued at once

    def submit(query: int, stage: int, now: float) -> None:
        controller.submit(
            stages[stage],
            {name: row},
            timeout=deadlines[query] - now,
            then=partial(answered, query, stage),
        )
        length = queue_length(keys[stage])  # a queue is longest just after a request joins
        if length > queued[stage]:
            queued[stage] = length

    def answered(query: int, stage: int, future: asyncio.Future[Prediction]) -> None:
        error = None if future.cancelled() else future.exception()
        if future.cancelled() or error is not None:
            failed.append(error or asyncio.CancelledError())
            return
        now = clock.now()
        left[query] -= 1
        if not left[query]:
            finished[query] = now
            state["open"] -= 1
            if give_up is not None and now - arrivals[query] > give_up and not stale[query]:
                state["late"] += 1
        base = query * count
        for child in children[stage]:
            at = base + child
            if reach[at]:
                waiting[at] -= 1
                if not waiting[at]:
                    submit(query, child, now)

    def arrive(query: int) -> None:
        now = clock.now()
        arrivals[query] = now
        arrived[0] = query + 1
        deadlines[query] = now + timeout
        if not left[query]:  # it reaches no stage: answered at once
            finished[query] = now
            state["open"] -= 1
            return
        base = query * count
        for stage in inputs:
            if reach[base + stage]:
                submit(query, stage, now)

    def done() -> bool:
        if give_up is not None:  # queries open longer than `give_up` are late already
            now, passed = clock.now(), state["passed"]
            while passed < queries and passed < arrived[0] and arrivals[passed] < now - give_up:
                if math.isnan(finished[passed]):
                    stale[passed] = True
                    state["late"] += 1
                passed += 1
            state["passed"] = passed
        return bool(failed) or not state["open"] or state["late"] >= too_many

    try:
        begun = sim.replay(times, arrive, drain=drain, done=done)
    except HeadwayError as error:
        raise HeadwayError(f"the simulated server refused a request: {error.message}") from None
    if failed:
        raise HeadwayError(f"the simulated server failed a request: {failed[0]}")
    return PipelineRun(
        times + begun,
        np.array(finished),
        complete=state["late"] < too_many,
        queued=tuple(queued),
    )
