"""The calls a flow makes through the controller, the served flow's and the simulator's alike.

Each call is given what is left of its query's deadline (`call`), and is withdrawn once it is
no longer wanted (`withdraw`: the copies of a competing stage once the first good answer won,
`race`; the calls of a query cut off at its deadline): still queued, it never takes a worker;
already sent, it runs and its answer is ignored (`Controller.withdraw`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from headway.control.doors import Serving
from headway.control.request import FutureReceiver, InferenceRequest, Prediction, Ticket
from headway.errors import HeadwayError, ModelStopped
from headway.flows.deadline import QueryDeadline
from headway.flows.tensors import CPU

#: A call in flight: its ticket (`Controller.submit`) and the future of its answer.
Call = tuple[Ticket, asyncio.Future[Prediction]]
#: What `call` runs the moment the call's future is settled (`FutureReceiver`'s `then`).
Then = Callable[[asyncio.Future[Prediction]], None]


def call(
    controller: Serving, name: str, version: str | None, tensors: dict[str, np.ndarray],
    deadline: QueryDeadline, where: str, then: Then | None = None,
) -> Call:  # fmt: skip
    """Ask model `name` (at `version`; None: its default) for `tensors` with what is left of
    the query's `deadline` (FlowDeadlinePassed, naming `where`, when nothing is)."""
    timeout = deadline.remaining(where)
    future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
    request = InferenceRequest(name, version=version, timeout=timeout, inputs=tensors)
    return controller.submit(request, FutureReceiver(future, then)), future


async def first(futures: list[asyncio.Future[Any]]) -> Any:
    """The result of the first future to succeed; the first error when all fail. The others
    are left to finish (their results are ignored); a cancelled one counts as no answer."""
    pending = set(futures)
    errors: list[BaseException] = []
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for future in (f for f in futures if f in done):  # ties go to the first listed
            if future.cancelled():
                continue
            error = future.exception()
            if error is None:
                for other in pending:
                    other.add_done_callback(retrieve)
                return future.result()
            errors.append(error)
    if not errors:
        raise asyncio.CancelledError
    raise errors[0]


def retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's error as seen (it was reported through another path, or ignored)."""
    if not future.cancelled():
        future.exception()


def withdraw(controller: Serving, calls: list[Call]) -> None:
    """Withdraw the calls not answered (still pending, or cancelled with the task that
    awaited them)."""
    for ticket, future in calls:
        if not future.done() or future.cancelled():
            future.cancel()
            controller.withdraw(ticket)


@dataclass
class RaceStats:
    """What the races of a flow's competing stages did: each race, which copy won, and its
    losers: withdrawn while still queued (they never took a worker), or already running when
    the race was won: stopped where their worker can stop them, else run to their end on their
    own worker; `loser_cpu_s` counts the CPU time those spent, once they ended."""

    races: int = 0
    won_by: dict[int, int] = field(default_factory=dict)
    losers_withdrawn: int = 0
    losers_running: int = 0
    #: Of `losers_running`: those their worker was asked to stop (a local worker process).
    losers_stopped: int = 0
    loser_cpu_s: float = 0.0

    def won(self, copy: int) -> None:
        self.races += 1
        self.won_by[copy] = self.won_by.get(copy, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "races": self.races,
            "won_by_copy": {str(k): v for k, v in sorted(self.won_by.items())},
            "losers_withdrawn": self.losers_withdrawn,
            "losers_running": self.losers_running,
            "losers_stopped": self.losers_stopped,
            "loser_cpu_s": self.loser_cpu_s,
        }


async def race(
    controller: Serving, names: list[str], tensors: dict[str, np.ndarray],
    deadline: QueryDeadline, where: str, stats: RaceStats | None = None,
) -> Prediction:  # fmt: skip
    """Send one copy of a call to each of the models `names` (a competing stage's copies, each
    on a worker of its own: `Controller.keep_apart`), each with what is left of `deadline`, as
    `call` gives it; the first good answer wins. The moment it arrives (inside its reply,
    before the worker it freed takes its next action) the copies still queued are withdrawn,
    so a loser never takes a worker after the race is won; a copy already running is told to
    stop (`Controller.stop_running`, where its worker can) or finishes, its answer ignored
    and its CPU time counted (`stats`). All unanswered copies are withdrawn if the race is
    abandoned."""
    calls: list[Call] = []
    running: list[asyncio.Future[Prediction]] = []  # losers left to finish
    refused: HeadwayError | None = None

    def won(future: asyncio.Future[Prediction]) -> None:
        if running or future.cancelled() or future.exception() is not None:
            return
        if any(
            f.done() and not f.cancelled() and not f.exception()
            for _, f in calls
            if f is not future
        ):
            return  # decided already
        if stats is not None:
            stats.won(next((i for i, c in enumerate(calls) if c[1] is future), len(calls)))
        for ticket, other in calls:
            if other is future or other.done():
                continue
            if controller.withdraw_queued(ticket):
                other.cancel()
                if stats is not None:
                    stats.losers_withdrawn += 1
            else:
                running.append(other)
                stopped = controller.stop_running(ticket)
                if stats is not None:
                    stats.losers_running += 1
                    stats.losers_stopped += stopped
                    other.add_done_callback(partial(loser_cpu, stats))

    try:
        for name in names:
            if any(c[1].done() and not c[1].cancelled() and not c[1].exception() for c in calls):
                break  # answered inside `submit` (an engine that runs in this process)
            try:
                calls.append(call(controller, name, None, tensors, deadline, where, then=won))
            except HeadwayError as exc:
                refused = exc
                continue
        if not calls:
            assert refused is not None
            raise refused
        winner: Prediction = await first([c[1] for c in calls])
        return winner
    finally:
        withdraw(controller, [c for c in calls if not any(c[1] is f for f in running)])


def loser_cpu(stats: RaceStats, future: asyncio.Future[Prediction]) -> None:
    """Count the CPU time a race's loser spent running: its stage's `CPU` output, or what
    its worker reported when it stopped it (`ModelStopped.cpu_s`)."""
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        if isinstance(error, ModelStopped):
            stats.loser_cpu_s += error.cpu_s
        return
    spent = future.result().outputs.get(CPU)
    if spent is not None:
        stats.loser_cpu_s += float(spent.sum())
