"""Test doubles for the control layer: an engine whose workers run no models.

`FakeEngine` implements the `Engine` protocol in this process, so a `Controller` can be driven
without worker processes. On the event loop (the default) every action is answered on the next
loop turn, or, with `hold` set, when the test releases it. On a `TimerClock` (the simulator's)
each worker runs one action at a time for the duration `durations` gives it, and its reply
comes when that time has passed on the clock: the simulated cluster, which can also grow
(`grow`: a worker that is ready `startup` seconds after it was asked for) and shrink (`retire`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from functools import partial

from headway.clock import Timer, TimerClock
from headway.control.actions import INFER, LOAD, UNLOAD
from headway.control.engine import (
    Action,
    Answer,
    Engine,
    OnExit,
    OnMessage,
    OnReady,
    Reply,
    Tensors,
)
from headway.repository import ModelConfig

#: What an INFER computes from its action and input tensors.
Compute = Callable[[Action, Tensors], Tensors]
#: How long an action runs on a simulated worker (given the worker's number), in seconds.
Durations = Callable[[int, Action], float]


def echo(action: Action, tensors: Tensors) -> Tensors:
    """Each input comes back as the output of the same name."""
    return dict(tensors)


class FakeEngine(Engine):
    """`size` in-process workers that run no models. A LOAD succeeds (with an empty signature)
    unless its model key is in `fail_loads`; an INFER of a loaded model answers with
    `compute(action, inputs)`, of a model not loaded there fails as a worker's would.

    Without a clock, replies come on the next loop turn, never inside `send`; while `hold` is
    set, INFERs wait in `held` until `release` answers the oldest inside that call (`catch_up`
    answers all). With a clock, see the module docstring: an action reaches its worker `rpc`
    seconds after it is sent, waits for the actions before it, and an INFER that would start
    after its `latest` is refused unrun, as a real worker does. With `startup` (seconds) as
    well, `grow` starts a new worker, ready that long after; `retire` stops one it started,
    and whatever that worker was running is never answered.
    """

    kind = "fake"

    def __init__(
        self,
        size: int = 1,
        *,
        compute: Compute = echo,
        fail_loads: Collection[str] = (),
        duration: float = 1e-4,
        clock: TimerClock | None = None,
        durations: Durations | None = None,
        rpc: float = 0.0,
        startup: float | None = None,
    ) -> None:
        self.size = size
        self._fixed = size
        self.compute = compute
        self.fail_loads = fail_loads
        self.duration = duration
        self.clock = clock
        self.durations = durations
        self.rpc = rpc
        self.startup = startup
        self.hold = False
        #: Every action sent, in order, with its worker.
        self.sent: list[tuple[int, Action]] = []
        #: The INFERs waiting for `release`, with their worker and inputs.
        self.held: list[tuple[int, Action, Tensors]] = []
        #: The models each worker holds.
        self.resident: list[set[str]] = [set() for _ in range(size)]
        #: When each worker finishes what it was sent (on the clock), and the seconds it spent
        #: running each kind of action.
        self.busy_until = [0.0] * size
        self.busy: dict[str, float] = {INFER: 0.0, LOAD: 0.0}
        #: Seconds spent running each model's INFERs, on every worker.
        self.computing: dict[str, float] = {}
        #: The workers `grow` started and not retired, with the timer of their start.
        self.grown: dict[int, Timer] = {}
        #: Replies on their way (with a clock): actions sent and not yet answered.
        self.in_flight = 0
        self.on_ready: OnReady = lambda worker, pid: None
        self.on_message: OnMessage = lambda worker, reply, tensors: None
        self.on_exit: OnExit = lambda worker, code: None

    async def start(self) -> None:
        for worker in range(self.size):
            ready = partial(self.on_ready, worker, 1000 + worker)
            if self.clock is not None:
                self.clock.call_at(self.clock.now(), ready)
            else:
                asyncio.get_running_loop().call_soon(ready)

    async def stop(self) -> None:
        return None

    def pids(self) -> dict[int, int]:
        running = [*range(self._fixed), *self.grown]
        return {worker: 1000 + worker for worker in running}

    def grow(self, config: ModelConfig) -> int | None:
        """One more worker (with a clock and a `startup`), ready `startup` seconds from now."""
        if self.clock is None or self.startup is None:
            return None
        worker = self.size
        self.size += 1
        self.resident.append(set())
        self.busy_until.append(0.0)
        ready = partial(self.on_ready, worker, 1000 + worker)
        self.grown[worker] = self.clock.call_at(self.clock.now() + self.startup, ready)
        return worker

    def retire(self, worker: int) -> bool:
        """Stop a worker `grow` started: it takes nothing more, and its replies are lost."""
        timer = self.grown.pop(worker, None)
        if timer is None:
            return False
        timer.cancel()
        self.resident[worker].clear()
        return True

    def send(self, worker: int, action: Action, tensors: Tensors) -> bool:
        self.sent.append((worker, action))
        if self.clock is not None:
            self._run_timed(self.clock, worker, action, tensors)
        elif action["op"] == INFER and self.hold:
            self.held.append((worker, action, tensors))
        else:
            asyncio.get_running_loop().call_soon(self._reply, worker, action, tensors)
        return True

    def catch_up(self) -> None:
        while self.held:
            self.release()

    def release(self) -> None:
        """Answer the oldest held INFER, inside this call."""
        self._reply(*self.held.pop(0))

    def infers(self) -> list[int]:
        """The row counts of the held INFERs."""
        return [action["rows"] for _, action, _ in self.held]

    def loads(self) -> list[tuple[int, Action]]:
        """Every LOAD sent, with its worker."""
        return [(worker, action) for worker, action in self.sent if action["op"] == LOAD]

    def answer(self, worker: int, action: Action, tensors: Tensors) -> Answer:
        """The reply of `worker` to `action`, as a real worker would give it."""
        op, model = action["op"], action.get("model", "")
        reply: Reply = {"id": action.get("id"), "ok": True, "duration": self.duration}
        outputs: Tensors = {}
        if op == LOAD:
            if model in self.fail_loads:
                return {"id": action.get("id"), "ok": False, "error": "weights file is corrupt"}, {}
            self.resident[worker].difference_update(action.get("evict") or ())
            self.resident[worker].add(model)
            reply["inputs"], reply["outputs"], reply["memory_mb"] = [], [], 0.0
        elif op == UNLOAD:
            self.resident[worker].discard(model)
        elif op == INFER:
            if model not in self.resident[worker]:
                error = f"LookupError: model {model!r} is not loaded on this worker"
                return {"id": action.get("id"), "ok": False, "error": error}, {}
            outputs = self.compute(action, tensors)
        return reply, outputs

    def _reply(self, worker: int, action: Action, tensors: Tensors) -> None:
        self.on_message(worker, *self.answer(worker, action, tensors))

    def _run_timed(self, clock: TimerClock, worker: int, action: Action, tensors: Tensors) -> None:
        start = max(clock.now() + self.rpc, self.busy_until[worker])
        latest = action.get("latest")
        if action["op"] == INFER and latest is not None and start > latest:
            late: Reply = {"id": action.get("id"), "ok": False, "late": True, "duration": 0.0}
            self.in_flight += 1
            clock.call_at(start + self.rpc, partial(self._deliver, worker, late, {}))
            return
        reply, outputs = self.answer(worker, action, tensors)
        seconds = self.durations(worker, action) if self.durations is not None else self.duration
        reply["duration"] = seconds
        self.busy_until[worker] = start + seconds
        if action["op"] in self.busy:
            self.busy[action["op"]] += seconds
        if action["op"] == INFER:
            model = action["model"]
            self.computing[model] = self.computing.get(model, 0.0) + seconds
        self.in_flight += 1
        clock.call_at(start + seconds + self.rpc, partial(self._deliver, worker, reply, outputs))

    def _deliver(self, worker: int, reply: Reply, outputs: Tensors) -> None:
        self.in_flight -= 1
        if worker < len(self.resident) and (worker < self._fixed or worker in self.grown):
            self.on_message(worker, reply, outputs)
