"""The contract between control and runtime: the `Engine` protocol and the messages it carries.

The controller sends a worker an `Action` (a small header) with its tensors and hears back a
`Reply` with the action's outputs. Both are typed dicts: on the wire they are the JSON header
frame itself (`runtime/wire.py`), so typing them costs nothing per message. Control owns this
contract; every engine (local processes, inline, the tests' fake, the simulator's) implements it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NotRequired, Protocol, TypedDict

import numpy as np

from headway.repository import ModelConfig

Tensors = dict[str, np.ndarray]


class Action(TypedDict):
    """What a worker is told to do. Which keys are present depends on `op`."""

    #: "load", "infer", "step", "unload" (`control/actions.py`), "ping" or "stop".
    op: str
    id: NotRequired[int]
    model: NotRequired[str]
    #: INFER: the batch's rows, the outputs to compute (None: all) and, when the batch has a
    #: deadline, the latest start (monotonic seconds) after which the worker refuses it.
    rows: NotRequired[int]
    outputs: NotRequired[list[str] | None]
    latest: NotRequired[float]
    #: STEP: the sequences to start ([number, parameters, cap] each, their inputs the
    #: tensors' rows in order), to stop first (numbers), and to run (numbers, in order).
    start: NotRequired[list[list[Any]]]
    stop: NotRequired[list[int]]
    run: NotRequired[list[int]]
    #: LOAD: the model's wire config (`ModelConfig.to_wire`) and the models to evict first.
    config: NotRequired[dict[str, Any] | None]
    evict: NotRequired[list[str]]
    #: Added by `wire.pack`: [name, dtype, shape] of each tensor frame.
    tensors: NotRequired[list[Any]]


class Reply(TypedDict):
    """What a worker answers to an `Action`."""

    id: int | None
    ok: bool
    #: Seconds the action ran on the worker (absent or 0.0 for a refused one).
    duration: NotRequired[float]
    #: INFER of a streaming model: this message is one part of the answer (its tensors), and
    #: the action goes on; the last message, without it, ends the action. `first`: seconds
    #: from the action's start to its first part; `parts`: how many parts it sent.
    part: NotRequired[bool]
    first: NotRequired[float]
    parts: NotRequired[int]
    #: LOAD: the model's answers come in parts (its `predict` is a generator).
    streams: NotRequired[bool]
    #: STEP: the sequences whose parts the outputs' rows are, in order; those that ended
    #: with this part; and those that failed, [number, error] each (not in `order`).
    order: NotRequired[list[int]]
    finished: NotRequired[list[int]]
    failed: NotRequired[list[list[Any]]]
    #: The action reached the worker after its `latest` start and was not run.
    late: NotRequired[bool]
    error: NotRequired[str]
    #: INFER: the frontend stopped the action (`Engine.stop_action`), after it had spent
    #: `cpu_s` seconds of CPU time (0 if it never started); `error` says so in words.
    stopped: NotRequired[bool]
    cpu_s: NotRequired[float]
    #: LOAD: the signature the model reports and the memory its load took.
    inputs: NotRequired[list[dict[str, Any]]]
    outputs: NotRequired[list[dict[str, Any]]]
    memory_mb: NotRequired[float]
    #: PING: the worker's process id, the models it holds and its native threads now.
    pid: NotRequired[int]
    models: NotRequired[list[str]]
    threads: NotRequired[int]
    tensors: NotRequired[list[Any]]


Message = tuple[Action, Tensors]
Answer = tuple[Reply, Tensors]

OnReady = Callable[[int, int], None]
"""(worker, pid): the worker started and can take actions."""
OnMessage = Callable[[int, Reply, Tensors], None]
"""(worker, reply, outputs): a worker answered an action (or sent a part of its answer)."""
Emit = Callable[[Reply, Tensors], None]
"""(reply, outputs): a worker sends one part of an action's answer, before its last reply."""
OnExit = Callable[[int, int | None], None]
"""(worker, exit code): the worker died; the engine starts a replacement."""


class Engine(Protocol):
    """What the controller needs from the runtime: start workers, send them actions, hear their
    replies and exits. Engines subclass it to inherit the defaults of the optional parts."""

    #: "local" (worker processes), "inline" (the server's own process), ...
    kind: str
    #: How many workers, numbered 0 .. size-1.
    size: int
    on_ready: OnReady
    on_message: OnMessage
    on_exit: OnExit
    #: Whether `run_now` can run an action inside the caller (an in-process worker).
    runs_inline: bool = False
    #: Whether the actions it is sent run on the event loop, so that nothing is read while
    #: one runs (the inline engine's runs on the loop); False where they run beside it.
    holds_loop: bool = False
    #: When (`time.monotonic()`) an action that held the event loop last ended, for an engine
    #: that runs actions on it (inline); never, else; infinity while one holds it, until the
    #: loop is free to sleep again (a reply to hand on or the next run to start keeps it
    #: turning). The frontend's reads date their bytes from it: what arrived while the loop
    #: ran a model waited for that run, however late after the run the loop reads it.
    held_until: float = float("-inf")

    async def start(self) -> None:
        """Start the workers; each reports through `on_ready` once it can take actions."""
        ...

    async def stop(self) -> None:
        """Stop every worker; no callback runs afterwards."""
        ...

    def send(self, worker: int, action: Action, tensors: Tensors) -> bool:
        """Queue `action` for `worker`; its reply comes through `on_message`, later (never
        inside this call). False if the worker is gone (its exit is reported)."""
        ...

    def pids(self) -> dict[int, int]:
        """The process id of each running worker."""
        ...

    def run_now(
        self, worker: int, action: Action, tensors: Tensors, *, seconds: float | None = None
    ) -> Answer | None:
        """Run `action` inside this call and return its reply, when the engine can (it runs
        actions in this process and the worker is idle, and it is not too long to hold the
        caller: `seconds`, its predicted run); None otherwise."""
        return None

    def idle(self) -> bool:
        """Whether an action sent now would start at once: an in-process worker with nothing
        running, queued or (on the loop) still to follow up. The controller asks before it
        chooses a request to run alone (`run_now`); False for an engine that cannot."""
        return False

    def between_runs(self) -> bool:
        """For an engine that runs actions on the event loop (`holds_loop`): whether a batch
        sent now would run inside the caller, between two reads of one turn (nothing runs,
        nothing else waits to). False for the others."""
        return False

    def catch_up(self) -> None:
        """Hear the replies that already wait, now (through `on_message`)."""
        return None

    def run_sent(self) -> None:
        """For an engine that runs actions on the event loop (`runs_inline`): start the
        action sent last, now, outside the sender's call; others have nothing to do."""
        return None

    def place(self, config: ModelConfig) -> list[int] | None:
        """For an engine that starts workers for each model (Ray's actors): start the workers
        of `config`'s replicas and return their numbers (they report through `on_ready`), or
        raise ModelNotReady saying why none can be placed. None: the controller places the
        model among the engine's `size` workers."""
        return None

    def stop_action(self, worker: int, action: int) -> bool:
        """Stop the action `action` on `worker` if it runs there or has not started (its reply
        is then an error saying so, `stopped`, with the CPU seconds it had spent, `cpu_s`);
        whether the engine could ask. Only a worker process of this machine can be stopped
        (`runtime.stopping`)."""
        return False

    def retire(self, worker: int) -> bool:
        """Stop `worker` for good if it was started by `place` or `grow` (its model is gone);
        whether it was. An engine's own fixed workers stay."""
        return False

    def grow(self, config: ModelConfig) -> int | None:
        """Start one more worker for `config` (the tuner asked for a replica) and return its
        number (it reports through `on_ready`); None when the engine cannot."""
        return None

    def nodes(self) -> dict[int, str]:
        """The cluster node hosting each worker; empty for an engine on one machine."""
        return {}
