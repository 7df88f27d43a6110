"""A stand-in for the scheduler under a flow app, on an injected `ManualClock`: each model call
takes a stated number of clock seconds, and a model marked `refuses` is refused at once when its
call is given less time than it takes (as the scheduler refuses a request its profile says
cannot meet its deadline)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from headway.adapters import adapter_class
from headway.clock import ManualClock
from headway.control.models import Prediction
from headway.errors import DeadlineUnmeetable
from headway.repository import ModelConfig

#: Rows each counting function of a test flow saw, by name. The frontend's flow and the copy a
#: stage's worker adapter imports share it: a flow file is imported afresh, its imports are not.
SEEN: Counter[str] = Counter()


class StubRepository:
    """What a flow app's stage models need of the repository: each model's config."""

    def __init__(self) -> None:
        self.models: dict[str, ModelConfig] = {}

    def get(self, name: str) -> ModelConfig:
        return ModelConfig(name, 1, "sklearn", Path("."))


class StubController:
    """What a FlowApplication with two repository-model stages needs of a Controller."""

    def __init__(self, seconds: dict[str, float], refuses: frozenset[str] = frozenset()) -> None:
        self.clock = ManualClock()
        self.repository = SimpleNamespace(models={})
        self.measuring = SimpleNamespace(warming=set())
        self.seconds = seconds
        self.refuses = refuses
        #: Each call: the model, when it was made, and the seconds it was given.
        self.calls: list[tuple[str, float, float]] = []
        #: The calls withdrawn (`Controller.cancel`): the model of each.
        self.withdrawn: list[str] = []

    def cancel(self, future: asyncio.Future[Prediction], name: str, version: Any = None) -> bool:
        self.withdrawn.append(name)
        future.cancel()
        return True

    def served(self, name: str, version: int | None = None) -> None:
        return None

    def submit(
        self,
        name: str,
        tensors: dict[str, np.ndarray],
        *,
        version: Any,
        timeout: float,
        then: Any = None,
    ) -> asyncio.Future[Prediction]:
        assert then is None, "the served flow awaits its calls"
        self.calls.append((name, self.clock.now(), timeout))
        seconds = self.seconds[name]
        if name in self.refuses and seconds > timeout:
            raise DeadlineUnmeetable(f"model {name!r} takes {seconds * 1000:g} ms")
        future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        rows = len(next(iter(tensors.values())))

        def finish() -> None:
            self.clock.advance(seconds)  # runs the app's deadline timer if it falls due
            if not future.done():
                future.set_result(Prediction(name, 1, {"y": np.full((rows, 1), 2.0)}))

        asyncio.get_running_loop().call_soon(finish)
        return future


class WorkerStub(StubController):
    """The stub's models as it answers them; a flow's stage model run by the worker's own
    adapter (`FlowStageAdapter`), so a call to it is a worker's action."""

    def submit(
        self,
        name: str,
        tensors: dict[str, np.ndarray],
        *,
        version: Any = None,
        timeout: float,
        then: Any = None,
    ) -> asyncio.Future[Prediction]:
        if name in self.seconds:
            return super().submit(name, tensors, version=version, timeout=timeout)
        self.calls.append((name, self.clock.now(), timeout))
        adapter = adapter_class("flow")(self.repository.models[name].to_wire())
        adapter.load()
        future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        future.set_result(Prediction(name, 1, adapter.predict(tensors)))
        return future
