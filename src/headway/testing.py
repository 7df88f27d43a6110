"""Test doubles for the control layer: an engine whose workers run no models, and the part of
a controller that applications never use.

`FakeEngine` implements the `Engine` protocol in this process, so a `Controller` can be driven
without worker processes: every action is answered on the next loop turn, or, with `hold` set,
when the test releases it. It answers as a worker would (`headway.sim.workers.ModellessEngine`);
the simulator's workers in virtual time are `headway.sim.workers.SimulatedEngine`.

`ApplicationServing` is a stub controller's common part for the application tests and the
selection evidence (`bench/evidence`): each gives its models (`served`) and calls (`infer`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from functools import partial

from headway.control.actions import INFER
from headway.control.engine import Action, Tensors
from headway.control.models.states import ModelState
from headway.control.request import InferenceRequest, Prediction, Receiver, Ticket
from headway.errors import ModelNotFound
from headway.repository import ModelConfig, TensorSpec
from headway.sim.workers import Compute, ModellessEngine


def echo(action: Action, tensors: Tensors) -> Tensors:
    """Each input comes back as the output of the same name."""
    return dict(tensors)


class FakeEngine(ModellessEngine):
    """`size` in-process workers that run no models (`ModellessEngine`). Replies come on the
    next loop turn, never inside `send`; while `hold` is set, INFERs wait in `held` until
    `release` answers the oldest inside that call (`catch_up` answers all)."""

    kind = "fake"

    def __init__(
        self,
        size: int = 1,
        *,
        compute: Compute = echo,
        fail_loads: Collection[str] = (),
        duration: float = 1e-4,
    ) -> None:
        super().__init__(size, compute=compute, fail_loads=fail_loads, duration=duration)
        self.hold = False
        #: The INFERs waiting for `release`, with their worker and inputs.
        self.held: list[tuple[int, Action, Tensors]] = []

    async def start(self) -> None:
        for worker in range(self.size):
            asyncio.get_running_loop().call_soon(partial(self.on_ready, worker, 1000 + worker))

    def send(self, worker: int, action: Action, tensors: Tensors) -> bool:
        self.sent.append((worker, action))
        if action["op"] == INFER and self.hold:
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

    def _reply(self, worker: int, action: Action, tensors: Tensors) -> None:
        self.on_message(worker, *self.answer(worker, action, tensors))


class ApplicationServing:
    """What a `SelectionApplication` asks of its controller (`headway.control.doors.Serving`)
    beyond its clock and repository, as a stub gives it: models by name (`served`, `model`,
    `load`), each on workers of its own (a straggler finishes late), none warming. The calls
    a flow makes (`submit`, `withdraw`, registering, unloading and warming models) are not
    an application's and are refused. A subclass gives `served` and `infer`."""

    def served(self, name: str, version: int | None = None) -> ModelState | None:
        raise NotImplementedError

    async def infer(self, request: InferenceRequest) -> Prediction:
        raise NotImplementedError

    def model(self, name: str, version: str | None = None) -> ModelState:
        state = self.served(name, None if version is None else int(version))
        if state is None:
            raise ModelNotFound(f"model {name!r} is not served")
        return state

    def shares_workers(self, name: str) -> bool:
        return False

    def submit(self, request: InferenceRequest, receiver: Receiver) -> Ticket:
        raise NotImplementedError("applications await their calls (`infer`)")

    def withdraw(self, ticket: Ticket) -> bool:
        raise NotImplementedError("applications await their calls (`infer`)")

    def withdraw_queued(self, ticket: Ticket) -> bool:
        raise NotImplementedError("applications await their calls (`infer`)")

    def stop_running(self, ticket: Ticket) -> bool:
        raise NotImplementedError("applications await their calls (`infer`)")

    def keep_apart(self, names: list[str], why: str) -> None:
        raise NotImplementedError("a flow keeps its racing copies apart, not an application")

    def register(self, config: ModelConfig) -> None:
        raise NotImplementedError("a flow registers its stages' models, not an application")

    def deregister(self, name: str) -> None:
        raise NotImplementedError("a flow registers its stages' models, not an application")

    async def load(self, name: str, version: str | None = None) -> ModelState:
        return self.model(name, version)

    async def unload(self, name: str, version: str | None = None) -> None:
        raise NotImplementedError("applications do not unload models")

    def warm_up(self, name: str, inputs: tuple[TensorSpec, ...]) -> None:
        raise NotImplementedError("a flow's stages are warmed up, not an application's")

    def warming(self, name: str, version: int | None = None) -> bool:
        return False
