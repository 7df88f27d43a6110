"""The simulator's workers: an engine whose workers run no models, in virtual time.

Clockwork's `worker_dummy`: each worker runs one action at a time for the duration that
`durations` gives it (a profiled one), and its reply comes when that time has passed on the
clock, with what `compute` makes of its inputs. Everything else is a real worker's behaviour:
which models it holds, a LOAD that fails, an INFER of a model it does not hold, and an INFER
that would start after its latest start, refused unrun. A generative model's STEP advances
each sequence the worker holds by one part (a zero), and a sequence ends after its cap of
parts, as a model that writes to its `max_tokens` does. The simulated cluster can grow
(`grow`: a worker ready `startup` seconds after it was asked for) and shrink (`retire`).

`ModellessEngine`, the part that answers as a worker would, is also what `headway.testing`'s
test engine builds on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import partial

import numpy as np

from headway.clock import Timer, TimerClock
from headway.control.actions import INFER, LOAD, STEP, UNLOAD
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


class Zeros:
    """What a simulated model computes: one column `y` of zeros per row (one array per batch
    size, kept: nobody writes to an answer)."""

    def __init__(self) -> None:
        self._by_rows: dict[int, np.ndarray] = {}

    def __call__(self, action: Action, tensors: Tensors) -> Tensors:
        rows = action.get("rows", 1)
        zeros = self._by_rows.get(rows)
        if zeros is None:
            zeros = self._by_rows[rows] = np.zeros((rows, 1), np.float32)
            zeros.flags.writeable = False
        return {"y": zeros}


class ModellessEngine(Engine):
    """`size` workers in this process that run no models: a LOAD succeeds (with an empty
    signature) unless its model key is in `fail_loads`; an INFER of a model the worker holds
    answers `compute(action, inputs)`, of one it does not hold fails as a worker's would
    (`answer`). Subclasses say when the replies come (`send`)."""

    kind = "modelless"

    def __init__(
        self,
        size: int = 1,
        *,
        compute: Compute,
        fail_loads: Collection[str] = (),
        duration: float = 1e-4,
    ) -> None:
        self.size = size
        self.compute = compute
        self.fail_loads = fail_loads
        #: The seconds each reply reports.
        self.duration = duration
        #: Every action sent, in order, with its worker.
        self.sent: list[tuple[int, Action]] = []
        #: The models each worker holds.
        self.resident: list[set[str]] = [set() for _ in range(size)]
        #: Each worker's generative sequences, by model: number -> [parts made, cap].
        self.sequences: list[dict[str, dict[int, list[int]]]] = [{} for _ in range(size)]
        self.on_ready: OnReady = lambda worker, pid: None
        self.on_message: OnMessage = lambda worker, reply, tensors: None
        self.on_exit: OnExit = lambda worker, code: None

    async def stop(self) -> None:
        return None

    def pids(self) -> dict[int, int]:
        return {worker: 1000 + worker for worker in range(self.size)}

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
        elif op == STEP:
            if model not in self.resident[worker]:
                error = f"LookupError: model {model!r} is not loaded on this worker"
                return {"id": action.get("id"), "ok": False, "error": error}, {}
            order, finished = self._step(self.sequences[worker].setdefault(model, {}), action)
            reply["order"], reply["finished"], reply["failed"] = order, finished, []
            outputs = {"y": np.zeros((len(order), 1), np.float32)}
        return reply, outputs

    @staticmethod
    def _step(held: dict[int, list[int]], action: Action) -> tuple[list[int], list[int]]:
        """Stop, start and advance the sequences a STEP names, as a worker does: the ones
        it ran, and those that ended."""
        for number in action.get("stop") or ():
            held.pop(number, None)
        for number, _, cap in action.get("start") or ():
            held[number] = [0, int(cap)]
        order = [number for number in action.get("run") or () if number in held]
        finished = []
        for number in order:
            sequence = held[number]
            sequence[0] += 1
            if sequence[0] >= sequence[1]:
                finished.append(number)
                del held[number]
        return order, finished


class SimulatedEngine(ModellessEngine):
    """`size` simulated workers on `clock` (see the module docstring): an action reaches its
    worker `rpc` seconds after it is sent, waits for the actions before it, runs for
    `durations(worker, action)` seconds, and its reply takes `rpc` seconds back. With
    `startup` (seconds), `grow` starts a new worker, ready that long after; `retire` stops
    one it started, and whatever that worker was running is never answered."""

    kind = "simulated"

    def __init__(
        self,
        size: int,
        *,
        clock: TimerClock,
        durations: Durations,
        compute: Compute | None = None,
        fail_loads: Collection[str] = (),
        rpc: float = 0.0,
        startup: float | None = None,
    ) -> None:
        super().__init__(size, compute=compute or Zeros(), fail_loads=fail_loads)
        self._fixed = size
        self.clock = clock
        self.durations = durations
        self.rpc = rpc
        self.startup = startup
        #: When each worker finishes what it was sent, and the seconds spent running each
        #: kind of action.
        self.busy_until = [0.0] * size
        self.busy: dict[str, float] = {INFER: 0.0, LOAD: 0.0, STEP: 0.0}
        #: Seconds spent running each model's INFERs, on every worker.
        self.computing: dict[str, float] = {}
        #: The workers `grow` started and not retired, with the timer of their start.
        self.grown: dict[int, Timer] = {}
        #: Actions sent and not yet answered.
        self.in_flight = 0

    async def start(self) -> None:
        for worker in range(self.size):
            self.clock.call_at(self.clock.now(), partial(self.on_ready, worker, 1000 + worker))

    def pids(self) -> dict[int, int]:
        running = [*range(self._fixed), *self.grown]
        return {worker: 1000 + worker for worker in running}

    def grow(self, config: ModelConfig) -> int | None:
        """One more worker (with a `startup`), ready `startup` seconds from now."""
        if self.startup is None:
            return None
        worker = self.size
        self.size += 1
        self.resident.append(set())
        self.sequences.append({})
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
        self.sequences[worker].clear()
        return True

    def send(self, worker: int, action: Action, tensors: Tensors) -> bool:
        self.sent.append((worker, action))
        clock = self.clock
        start = max(clock.now() + self.rpc, self.busy_until[worker])
        latest = action.get("latest")
        if action["op"] == INFER and latest is not None and start > latest:
            late: Reply = {"id": action.get("id"), "ok": False, "late": True, "duration": 0.0}
            self.in_flight += 1
            clock.call_at(start + self.rpc, partial(self._deliver, worker, late, {}))
            return True
        reply, outputs = self.answer(worker, action, tensors)
        seconds = self.durations(worker, action)
        reply["duration"] = seconds
        self.busy_until[worker] = start + seconds
        if action["op"] in self.busy:
            self.busy[action["op"]] += seconds
        if action["op"] in (INFER, STEP):
            model = action["model"]
            self.computing[model] = self.computing.get(model, 0.0) + seconds
        self.in_flight += 1
        clock.call_at(start + seconds + self.rpc, partial(self._deliver, worker, reply, outputs))
        return True

    def _deliver(self, worker: int, reply: Reply, outputs: Tensors) -> None:
        self.in_flight -= 1
        if worker < len(self.resident) and (worker < self._fixed or worker in self.grown):
            self.on_message(worker, reply, outputs)
