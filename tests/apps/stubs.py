"""A stub controller for the application tests: models answer from plain functions of the
input's first value, on an injected `ManualClock` (each call takes a stated number of clock
seconds), and a model can be held back on an `asyncio.Event` (a straggler). It serves what
applications use of a controller (`headway.control.doors.Serving`), nothing more."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from headway.clock import ManualClock
from headway.control.doors import Serving
from headway.control.models.states import READY, ModelState
from headway.control.request import InferenceRequest, Prediction, Receiver, Ticket
from headway.errors import ModelNotFound
from headway.repository import ModelConfig, Repository, TensorSpec


@dataclass
class StubModel:
    answer: Callable[[float], Any]
    seconds: float = 0.01  # clock seconds one call takes
    gate: asyncio.Event | None = None  # held back until set
    state: str = READY
    finished: int = 0


class StubController:
    """What a SelectionApplication needs of a controller: its clock and repository, its
    models by name (`served`, `model`), and `infer`. The calls a flow makes (`submit`,
    `withdraw`, registering, unloading and warming models) are not the applications' and are
    refused."""

    def __init__(self, **models: StubModel) -> None:
        self.clock = ManualClock()
        self.models = models
        configs = {
            name: ModelConfig(
                name, 1, "python", Path(name), inputs=(TensorSpec("input-0", "FP64", (-1, 1)),)
            )
            for name in models
        }
        self.repository = Repository(Path("stub"), models=configs, names=sorted(configs))

    def served(self, name: str, version: int | None = None) -> ModelState | None:
        model = self.models.get(name)
        if model is None or version not in (None, 1):
            return None
        return ModelState(self.repository.models[name], state=model.state)

    def model(self, name: str, version: str | None = None) -> ModelState:
        state = self.served(name, None if version is None else int(version))
        if state is None:
            raise ModelNotFound(f"model {name!r} is not served")
        return state

    def shares_workers(self, name: str) -> bool:
        return False  # each model on a worker of its own: a straggler finishes late

    async def infer(self, request: InferenceRequest) -> Prediction:
        name, inputs = request.model, request.inputs
        assert inputs is not None and request.timeout is not None
        model = self.models[name]
        if model.gate is not None:
            await model.gate.wait()
        self.clock.advance(model.seconds)
        model.finished += 1
        value = model.answer(float(inputs["input-0"][0, 0]))
        return Prediction(name, 1, {"output-0": np.array([[value]])})

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


#: Checked by mypy (pyproject `files`): the stub is what callers are typed against.
_SERVING: type[Serving] = StubController
