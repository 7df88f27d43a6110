"""A stand-in for the scheduler under a flow app, on an injected `ManualClock`: each model call
takes a stated number of clock seconds, and a model marked `refuses` is refused at once when its
call is given less time than it takes (as the scheduler refuses a request its profile says
cannot meet its deadline)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import numpy as np

from headway.adapters import adapter_class
from headway.clock import ManualClock
from headway.control.doors import Serving
from headway.control.models.states import ModelState
from headway.control.request import FutureReceiver, InferenceRequest, Prediction, Receiver, Ticket
from headway.errors import DeadlineUnmeetable, ModelNotFound
from headway.repository import ModelConfig, Repository, TensorSpec

#: Rows each counting function of a test flow saw, by name. The frontend's flow and the copy a
#: stage's worker adapter imports share it: a flow file is imported afresh, its imports are not.
SEEN: Counter[str] = Counter()


class StubRepository(Repository):
    """What a flow app's stage models need of the repository: each model's config."""

    def get(self, name: str) -> ModelConfig:
        return ModelConfig(name, 1, "sklearn", Path("."))


class StubController:
    """What a FlowApplication with two repository-model stages needs of a controller
    (`headway.control.doors.Serving`): it serves no model of its own, and answers calls."""

    def __init__(self, seconds: dict[str, float], refuses: frozenset[str] = frozenset()) -> None:
        self.clock = ManualClock()
        self.repository: Repository = StubRepository(Path("."))
        self.seconds = seconds
        self.refuses = refuses
        #: Each call: the model, when it was made, and the seconds it was given.
        self.calls: list[tuple[str, float, float]] = []
        #: The calls withdrawn (`Controller.withdraw`): the model of each.
        self.withdrawn: list[str] = []

    def withdraw(self, ticket: Ticket) -> bool:
        assert isinstance(ticket, StubTicket)
        self.withdrawn.append(ticket.model)
        ticket.receiver = None
        return True

    def withdraw_queued(self, ticket: Ticket) -> bool:
        """A call still queued is one whose answer has not come: here, every one."""
        return self.withdraw(ticket)

    def served(self, name: str, version: int | None = None) -> ModelState | None:
        return None

    def model(self, name: str, version: str | None = None) -> ModelState:
        raise ModelNotFound(f"model {name!r}: the stub serves no model of its own")

    def shares_workers(self, name: str) -> bool:
        return False

    def keep_apart(self, names: list[str], why: str) -> None:
        pass

    def stop_running(self, ticket: Ticket) -> bool:
        return False

    async def infer(self, request: InferenceRequest) -> Prediction:
        future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        self.submit(request, FutureReceiver(future))
        return await future

    def register(self, config: ModelConfig) -> None:
        self.repository.models[config.name] = config

    def deregister(self, name: str) -> None:
        self.repository.models.pop(name, None)

    async def load(self, name: str, version: str | None = None) -> ModelState:
        return self.model(name, version)

    async def unload(self, name: str, version: str | None = None) -> None:
        pass

    def warm_up(self, name: str, inputs: tuple[TensorSpec, ...]) -> None:
        pass

    def warming(self, name: str, version: int | None = None) -> bool:
        return False

    def submit(self, request: InferenceRequest, receiver: Receiver) -> Ticket:
        name, timeout, tensors = request.model, request.timeout, request.inputs
        assert timeout is not None and tensors is not None
        self.calls.append((name, self.clock.now(), timeout))
        seconds = self.seconds[name]
        if name in self.refuses and seconds > timeout:
            raise DeadlineUnmeetable(f"model {name!r} takes {seconds * 1000:g} ms")
        ticket = StubTicket(name, receiver)
        rows = len(next(iter(tensors.values())))

        def finish() -> None:
            self.clock.advance(seconds)  # runs the app's deadline timer if it falls due
            if ticket.receiver is not None:
                ticket.receiver.done(Prediction(name, 1, {"y": np.full((rows, 1), 2.0)}))

        asyncio.get_running_loop().call_soon(finish)
        return ticket


class StubTicket:
    """A call the stub answers: its model, and where the answer goes (None: withdrawn)."""

    def __init__(self, model: str, receiver: Receiver | None) -> None:
        self.model = model
        self.receiver = receiver


class WorkerStub(StubController):
    """The stub's models as it answers them; a flow's stage model run by the worker's own
    adapter (`FlowStageAdapter`), so a call to it is a worker's action."""

    def submit(self, request: InferenceRequest, receiver: Receiver) -> Ticket:
        name = request.model
        if name in self.seconds:
            return super().submit(request, receiver)
        assert request.timeout is not None and request.inputs is not None
        self.calls.append((name, self.clock.now(), request.timeout))
        adapter = adapter_class("flow")(self.repository.models[name].to_wire())
        adapter.load()
        receiver.done(Prediction(name, 1, adapter.predict(request.inputs)))
        return StubTicket(name, None)


#: Checked by mypy (pyproject `files`): the stub is what callers are typed against.
_SERVING: type[Serving] = StubController
