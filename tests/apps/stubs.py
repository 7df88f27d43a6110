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
from headway.control.request import InferenceRequest, Prediction
from headway.repository import ModelConfig, Repository, TensorSpec
from headway.testing import ApplicationServing


@dataclass
class StubModel:
    answer: Callable[[float], Any]
    seconds: float = 0.01  # clock seconds one call takes
    gate: asyncio.Event | None = None  # held back until set
    state: str = READY
    finished: int = 0


class StubController(ApplicationServing):
    """What a SelectionApplication needs of a controller (`ApplicationServing`): its clock
    and repository, its models by name (`served`), and `infer`."""

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


#: Checked by mypy (pyproject `files`): the stub is what callers are typed against.
_SERVING: type[Serving] = StubController
