"""A stub controller for the application tests: models answer from plain functions of the
input's first value, on an injected `ManualClock` (each call takes a stated number of clock
seconds), and a model can be held back on an `asyncio.Event` (a straggler)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from headway.clock import ManualClock
from headway.control.controller import READY
from headway.control.request import InferenceRequest, Prediction
from headway.repository import TensorSpec


@dataclass
class StubModel:
    answer: Callable[[float], Any]
    seconds: float = 0.01  # clock seconds one call takes
    gate: asyncio.Event | None = None  # held back until set
    state: str = READY
    finished: int = 0
    config: Any = field(
        default_factory=lambda: SimpleNamespace(
            version=1, slo_ms=1000.0, inputs=(TensorSpec("input-0", "FP64", (-1, 1)),)
        )
    )


class StubController:
    """What a SelectionApplication needs of a Controller: clock, models, model(), infer()."""

    def __init__(self, **models: StubModel) -> None:
        self.clock = ManualClock()
        self.models = models
        self.repository = None

    def model(self, name: str) -> StubModel:
        return self.models[name]

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
