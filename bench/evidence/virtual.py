"""A real `SelectionApplication` (`headway.apps`) over a stub controller, in virtual time.

Model selection and straggler mitigation are pure logic over an event loop: the application
asks the policy which models to call, calls them at once, waits with `asyncio.wait` until its
deadline, combines what arrived and learns from feedback. Here that code runs unchanged on an
event loop whose clock jumps to its next timer instead of sleeping, and each model call is an
`asyncio.sleep` of a drawn latency followed by the answer that a real model, trained here,
gave for that row (computed once, up front). Runs are deterministic and take no wall time
waiting, so thousands of feedback events over many seeds take seconds.
"""

from __future__ import annotations

import asyncio
import random
import selectors
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from headway.apps import SelectionApplication, parse_app
from headway.clock import Timer, TimerClock
from headway.control.doors import Serving
from headway.control.models.states import READY, ModelState
from headway.control.request import InferenceRequest, Prediction
from headway.repository import ModelConfig, Repository, TensorSpec
from headway.testing import ApplicationServing

T = TypeVar("T")
#: The input every stub model declares: one number, the id of the query's row.
ROW = (TensorSpec("input-0", "FP64", (-1, 1)),)


class _Jump(selectors.BaseSelector):
    """A selector with nothing to watch whose `select` moves the loop's clock by its timeout."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self.loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        raise NotImplementedError("the virtual-time loop does no I/O")

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("the virtual-time loop has nothing left to wait for")
        self.loop.now += max(0.0, timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return {}


class VirtualTimeLoop(asyncio.BaseEventLoop):
    """asyncio's own loop (tasks, timers, `asyncio.wait` with a timeout), with a clock that
    jumps to the next timer when nothing is ready."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self._selector = _Jump(self)
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self.now

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion in virtual time."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)


class _LoopClock:
    """The controller's clock as the SelectionApplication reads it: the running loop's time,
    which jumps in virtual time, with its timers on that loop."""

    @staticmethod
    def now() -> float:
        return asyncio.get_running_loop().time()

    @staticmethod
    def call_at(when: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_at(when, callback)


#: (model, row id) -> the class it answers
Answers = Callable[[str, int], int]
#: (model) -> seconds its call takes this time
Latency = Callable[[str], float]


class StubController(ApplicationServing):
    """What a `SelectionApplication` needs of a controller (`ApplicationServing`): a clock,
    the models' states and configs, and `infer`, which sleeps a drawn latency and answers the
    model's precomputed class."""

    def __init__(self, models: list[str], answers: Answers, latency: Latency | None = None):
        configs = {
            m: ModelConfig(m, 1, "python", Path(m), slo_ms=1000.0, inputs=ROW) for m in models
        }
        self.repository = Repository(Path("stub"), models=configs, names=sorted(configs))
        self.states = {m: ModelState(config, state=READY) for m, config in configs.items()}
        self.clock: TimerClock = _LoopClock()
        self.answers = answers
        self.latency = latency

    def served(self, name: str, version: int | None = None) -> ModelState | None:
        return self.states.get(name) if version in (None, 1) else None

    async def infer(self, request: InferenceRequest) -> Prediction:
        name, inputs = request.model, request.inputs
        assert inputs is not None
        if self.latency is not None:
            await asyncio.sleep(self.latency(name))
        row = int(inputs["input-0"][0, 0])
        return Prediction(name, 1, {"label": np.array([self.answers(name, row)])})


def application(controller: StubController, seed: int, **raw: Any) -> SelectionApplication:
    """An application over the stub controller, as `headway serve` builds one from its config."""
    config = parse_app("evidence", raw)
    return SelectionApplication(config, controller, rng=random.Random(seed))


#: Checked by mypy (pyproject `files`): the stub is what callers are typed against.
_SERVING: type[Serving] = StubController
