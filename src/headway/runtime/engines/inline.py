"""The inline engine: one worker that runs inside the frontend's process, on its event loop.

Why: a hop to a worker process costs two process wake-ups and a round trip, more than a small
scikit-learn model takes to predict (docs/decisions.md). For such models, where the lowest latency at low load matters more than
isolation, `headway serve --engine inline` runs every action in the frontend itself. The
scheduler, deadlines, batching and early rejection are the same; what is lost is isolation: a
model that crashes the process takes the server with it, and an INFER holds the event loop for
as long as it runs (LOAD and UNLOAD run in a thread, one action at a time as in a worker).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque

from headway.control.engine import (
    Action,
    Answer,
    Engine,
    Message,
    OnExit,
    OnMessage,
    OnReady,
    Tensors,
)
from headway.runtime.worker import FRAMEWORKS_ENV, WorkerState, prepare

#: `held_until` while an INFER holds the loop, and until its follow-up runs (see `_next`).
HOLDING = float("inf")


class InlineEngine(Engine):
    """One in-process worker (`size` = 1) with the engine interface the controller uses."""

    kind = "inline"
    runs_inline = True

    def __init__(self, *, env: dict[str, str] | None = None) -> None:
        self.size = 1
        self.frameworks = (env or {}).get(FRAMEWORKS_ENV, "")
        self.state = WorkerState()
        self._queue: deque[Message] = deque()
        self._busy = False
        self._due: asyncio.Handle | None = None  # the call of `_next` that runs the queue on
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.on_ready: OnReady = lambda worker, pid: None
        self.on_message: OnMessage = lambda worker, header, tensors: None
        self.on_exit: OnExit = lambda worker, code: None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, prepare, self.frameworks)
        self.on_ready(0, os.getpid())

    async def stop(self) -> None:
        self._stopping = True
        self._queue.clear()

    def send(self, worker: int, action: Action, tensors: Tensors) -> bool:
        """Queue an action; it runs on a later turn of the loop, never inside the caller."""
        if self._stopping or self._loop is None:
            return False
        self._queue.append((action, tensors))
        if not self._busy:
            self._busy = True
            self._due = self._loop.call_soon(self._next)
        return True

    def run_sent(self) -> None:
        """Start the action sent since the last one ended, now, instead of on the loop's next
        turn, which reads first: a batch chosen after a turn of reads would otherwise run
        only after another, later than chosen for, and without the rows read meanwhile
        (they wait for the batch after it)."""
        if self._due is not None:
            self._due.cancel()
            self._next()

    def run_now(self, worker: int, action: Action, tensors: Tensors) -> Answer | None:
        """Run an action inside this call and return its reply, when nothing else is queued
        or running; else None (the caller sends it instead)."""
        if self._busy or self._queue or self._stopping or self._loop is None:
            return None
        return self.state.handle(action, tensors)

    def pids(self) -> dict[int, int]:
        return {0: os.getpid()}

    def _next(self) -> None:
        self._due = None
        if self.held_until == HOLDING:  # the last run's follow-up: the loop is free from here
            self.held_until = time.monotonic()
        if not self._queue or self._stopping:
            self._busy = False
            return
        action, tensors = self._queue.popleft()
        assert self._loop is not None
        if action["op"] in ("load", "unload"):  # seconds, perhaps: off the event loop
            future = self._loop.run_in_executor(None, self.state.handle, action, tensors)
            future.add_done_callback(lambda done: self._reply(done.result()))
            return
        # Held from here until this `_next` is called again (`_reply` calls it soon): the loop
        # polls in between without sleeping, so whatever it reads then may have arrived
        # during the run, however long the answers or the machine kept it from reading.
        self.held_until = HOLDING
        self._reply(self.state.handle(action, tensors))

    def _reply(self, result: Answer) -> None:
        if not self._stopping:
            self.on_message(0, *result)
        assert self._loop is not None
        self._due = self._loop.call_soon(self._next)
