"""A pipeline's queries through the simulated server, by the flow executor the server runs.

Each stage is one of the server's models. The flow executor (`headway.flows.executor`) walks
each query through the stages as it walks a served flow's: a stage starts once every parent
has answered for the query (a join waits for all of them), and calls its model through the
controller with what is left of the query's deadline (`headway.flows.calls.call`), only if
the query reaches it (`reaches`: a cascade's second model sees only the uncertain share; a
stage the query does not reach answers at once, as a served stage whose rows were all
filtered out does). The query is done when the last stage it reaches answers.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from headway.control.request import Prediction
from headway.errors import HeadwayError
from headway.flows.calls import call
from headway.flows.deadline import QueryDeadline
from headway.flows.executor import Executor, QueryRun, StageGraph
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
    # per (query, stage), flat at query * count + stage (a Python list: read once per
    # request, faster than numpy's items, and built without a loop per query)
    reach: list[bool] = reaches.ravel().tolist()
    finished = [math.nan] * queries
    arrivals = [0.0] * queries
    arrived = [0]  # queries that have arrived (in order)
    failed: list[BaseException] = []
    row = np.zeros((1, 1), np.float32)
    name = INPUT.name
    state = {"open": queries, "late": 0, "passed": 0}
    stale = [False] * queries  # counted late while still open
    too_many = 0.01 * queries + 2
    controller, clock = sim.controller, sim.clock
    queue_length = controller.queue_length
    queued = [0] * count  # per stage, the most requests queued at once

    def step(run: QueryRun, stage: int, inputs: list[Any]) -> None:
        if not reach[run.key * count + stage]:
            executor.finish(run, stage, None)  # no rows to send: done at once
            return
        then = partial(answered, run, stage)
        try:
            call(controller, stages[stage], None, {name: row}, run.deadline, stages[stage], then)
        except HeadwayError as error:  # refused: the stage fails, as a served flow's does
            executor.fail(run, stage, error)
            return
        length = queue_length(stages[stage])  # a queue is longest just after a request joins
        if length > queued[stage]:
            queued[stage] = length

    def answered(run: QueryRun, stage: int, future: asyncio.Future[Prediction]) -> None:
        if future.cancelled():
            executor.fail(run, stage, asyncio.CancelledError())
        elif (error := future.exception()) is not None:
            executor.fail(run, stage, error)
        else:
            executor.finish(run, stage, None)

    def settled(run: QueryRun) -> None:
        query = run.key
        if run.error is not None:
            failed.append(run.error)
            return
        now = clock.now()
        finished[query] = now
        state["open"] -= 1
        if give_up is not None and now - arrivals[query] > give_up and not stale[query]:
            state["late"] += 1

    executor = Executor(StageGraph(parents), step, settled)

    def arrive(query: int) -> None:
        now = clock.now()
        arrivals[query] = now
        arrived[0] = query + 1
        executor.start(query, QueryDeadline(clock, now + timeout, timeout * 1e3), None)

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

    begun = sim.replay(times, arrive, drain=drain, done=done)
    if failed:
        raise HeadwayError(f"the simulated server refused or failed a request: {failed[0]}")
    return PipelineRun(
        times + begun,
        np.array(finished),
        complete=state["late"] < too_many,
        queued=tuple(queued),
    )
