"""The inline engine: one worker that runs inside the frontend's process, beside its event loop.

Why: a hop to a worker process costs two process wake-ups and a round trip, more than a small
scikit-learn model takes to predict (docs/decisions.md). For such models, where the lowest
latency at low load matters more than isolation, `headway serve --engine inline` runs every
action in the frontend itself. The scheduler, deadlines, batching and early rejection are the
same; what is lost is isolation: a model that crashes the process takes the server with it.

Where an action runs (`runs`):
- `THREAD`: in one thread of its own, one action at a time, as a worker runs
  them. The frameworks release the interpreter's lock while they compute, so the loop goes on
  reading, answering and refusing on the other core; under overload the reads alone would
  otherwise take the loop's one core from the model. A batch that finds the worker idle and
  is predicted to run briefly (`LOOP_RUN_LIMIT_S`) still runs on the loop, at once, inside
  the call that sent it (`run_now`: a request alone inside the read that brought it, a batch
  inside the pump): the hop to the thread and back would cost more than it runs, and a
  small model that holds the interpreter's lock gains nothing beside the loop.
- `LOOP` (the default): on the event loop, between two turns of reads, nothing read while it
  runs; LOAD and UNLOAD in a thread. What a thread offers needs a second core for the server;
  without one (a machine shared with other work) the two threads only contend for one, and a
  model that holds the interpreter's lock while it computes (plain Python) gains nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sys
import threading
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
    Reply,
    Tensors,
)
from headway.runtime.worker import FRAMEWORKS_ENV, WorkerState, prepare

THREAD, LOOP = "thread", "loop"
#: Seconds a thread that wants the interpreter's lock waits before asking its holder to hand
#: it over (`sys.setswitchinterval`; Python's default is 5 ms), while the runs' thread is up.
#: The runs' thread needs the lock back several times a run (around the model's computation,
#: to take its action and to hand back its answer) while the loop holds it reading: each
#: wait is up to this long, with the model idle, and a shorter one costs the loop only a
#: hand-over when the thread asks (bench/RESULTS.md, "the inline engine's runs' thread under
#: overload"; bench/inline_gil.py).
SWITCH_INTERVAL_S = 0.0001
#: THREAD: the longest predicted run that an action finding the worker idle runs on the loop,
#: inside the call that sent it (the hop to the thread and back costs tens of microseconds,
#: which a small model's answer would feel); a longer one goes to the thread, so that the loop
#: is not held while it runs.
LOOP_RUN_LIMIT_S = 0.002
#: LOOP: `held_until` while an INFER holds the loop, and until its follow-up runs (`_next`).
HOLDING = float("inf")


class InlineEngine(Engine):
    """One in-process worker (`size` = 1) with the engine interface the controller uses."""

    kind = "inline"
    runs_inline = True

    def __init__(self, *, env: dict[str, str] | None = None, runs: str = LOOP) -> None:
        if runs not in (THREAD, LOOP):
            raise ValueError(f"an inline engine runs its actions in a {THREAD} or the {LOOP}")
        self.size = 1
        self.holds_loop = runs == LOOP
        self.frameworks = (env or {}).get(FRAMEWORKS_ENV, "")
        self.state = WorkerState()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # LOOP: the actions waiting for the loop, whether one runs, and the call that runs next
        self._queue: deque[Message] = deque()
        self._busy = False
        self._due: asyncio.Handle | None = None
        self._running = False  # inside a run or its reply (whose answers may submit more)
        # THREAD: actions to the runs' thread (None: stop), its answers back, and how many
        # actions were sent and not answered yet (read and written on the loop only)
        self._thread: threading.Thread | None = None
        self._switch_interval = 0.0  # the interpreter's, restored at stop (THREAD)
        self._inbox: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        #: each with whether it ends its action (else it is a part of a streamed answer)
        self._answers: deque[tuple[Answer, bool]] = deque()
        self._unanswered = 0
        self.on_ready: OnReady = lambda worker, pid: None
        self.on_message: OnMessage = lambda worker, header, tensors: None
        self.on_exit: OnExit = lambda worker, code: None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, prepare, self.frameworks)
        if not self.holds_loop:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            self._thread = threading.Thread(target=self._work, name="headway-inline", daemon=True)
            self._thread.start()
        self.on_ready(0, os.getpid())

    async def stop(self) -> None:
        """Stop taking actions; the one running (THREAD) ends first, its answer unheard, and
        the interpreter's switch interval is as it was before `start` again."""
        self._stopping = True
        self._queue.clear()
        if self._thread is not None:
            self._inbox.put(None)
            assert self._loop is not None
            await self._loop.run_in_executor(None, self._thread.join)
            if abs(sys.getswitchinterval() - SWITCH_INTERVAL_S) < 1e-6:  # unless changed since
                sys.setswitchinterval(self._switch_interval)

    def send(self, worker: int, action: Action, tensors: Tensors) -> bool:
        """Queue an action; it runs in the runs' thread or on a later turn of the loop, never
        inside the caller."""
        if self._stopping or self._loop is None:
            return False
        if self._thread is not None:
            self._unanswered += 1
            self._inbox.put((action, tensors))
            return True
        self._queue.append((action, tensors))
        if not self._busy:
            self._busy = True
            self._due = self._loop.call_soon(self._next)
        return True

    def run_sent(self) -> None:
        """LOOP: start the action sent since the last one ended, now, instead of on the loop's
        next turn, which reads first: a batch chosen after a turn of reads would otherwise run
        only after another, later than chosen for, and without the rows read meanwhile
        (they wait for the batch after it). THREAD: it has started already."""
        if self._due is not None:
            self._due.cancel()
            self._next()

    def run_now(
        self, worker: int, action: Action, tensors: Tensors, *, seconds: float | None = None
    ) -> Answer | None:
        """Run an action inside this call and return its reply, when nothing else is queued
        or running and (THREAD) its predicted run (`seconds`) is short enough to hold the
        loop for (`LOOP_RUN_LIMIT_S`); else None (the caller sends it instead)."""
        if not self.idle():
            return None
        if self._thread is not None and (seconds is None or seconds > LOOP_RUN_LIMIT_S):
            return None
        return self.state.handle(action, tensors, self._part)

    def _part(self, reply: Reply, tensors: Tensors) -> None:
        """A part of a streamed answer, made on the loop: handed on at once."""
        if not self._stopping:
            self.on_message(0, reply, tensors)

    def idle(self) -> bool:
        """Nothing runs, waits to run, or (LOOP) is still to follow up a run: until the run's
        follow-up (`_next`), the loop reads what came during the run, and an action sent
        meanwhile would start only after that whole turn of reads."""
        return not (
            self._busy or self._queue or self._unanswered or self._stopping or self._loop is None
        )

    def between_runs(self) -> bool:
        """LOOP: a batch sent now would run inside the caller (`run_sent`): nothing runs or
        waits to, only the last run's follow-up may be due. THREAD: never (it has its own)."""
        return (
            self.holds_loop
            and not self._running
            and not self._queue
            and not self._stopping
            and self._loop is not None
        )

    def catch_up(self) -> None:
        """THREAD: hear the answers the runs' thread has finished, now (each also schedules
        this on the loop, for when no turn of reads asks first)."""
        answers = self._answers
        while answers:
            answer, final = answers.popleft()
            if final:
                self._unanswered -= 1
            if not self._stopping:
                self.on_message(0, *answer)

    def pids(self) -> dict[int, int]:
        return {0: os.getpid()}

    # -- THREAD ---------------------------------------------------------------------------------
    def _work(self) -> None:
        """The runs' thread: one action at a time, each answer handed to the loop."""
        loop = self._loop
        assert loop is not None

        def part(reply: Reply, tensors: Tensors) -> None:  # in order with the answers
            self._answers.append(((reply, tensors), False))
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody hears it
                loop.call_soon_threadsafe(self.catch_up)

        while (message := self._inbox.get()) is not None:
            action, tensors = message
            try:  # a model's exception is its reply already (`WorkerState.handle`)
                answer = self.state.handle(action, tensors, part)
            except BaseException as exc:  # SystemExit from a model: the thread goes on
                answer = {"id": action.get("id"), "ok": False, "error": repr(exc)}, {}
            self._answers.append((answer, True))
            try:
                loop.call_soon_threadsafe(self.catch_up)
            except RuntimeError:  # the loop is closed: nobody is left to answer
                return

    # -- LOOP -----------------------------------------------------------------------------------
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
            future = self._loop.run_in_executor(None, self.state.handle, action, tensors, None)
            future.add_done_callback(lambda done: self._reply(done.result()))
            return
        # Held from here until this `_next` is called again (`_reply` calls it soon): the loop
        # polls in between without sleeping, so whatever it reads then may have arrived
        # during the run, however long the answers or the machine kept it from reading.
        self.held_until = HOLDING
        self._running = True
        try:
            self._reply(self.state.handle(action, tensors, self._part))
        finally:
            self._running = False

    def _reply(self, result: Answer) -> None:
        if not self._stopping:
            self.on_message(0, *result)
        assert self._loop is not None
        self._due = self._loop.call_soon(self._next)
