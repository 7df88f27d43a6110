"""What a model's statistics count as its traffic, and what a worker's memory counts: the
figures the dashboard and `/metrics` show must mean what they say.

A model that served no client must show no batches (its warm-up runs and its sweep of batch
sizes are counted apart, as measuring runs); a worker holding models must count their memory
whether or not a memory budget is set; and a worker says what it spent its time on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.controller import Controller
from headway.control.engine import Action, Answer, Tensors
from headway.control.request import InferenceRequest
from headway.repository import Repository
from headway.testing import FakeEngine

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\n"
)
#: What each LOAD of the engine below says the model took (the worker's resident growth).
LOADED_MB = 12.5


class MeasuringEngine(FakeEngine):
    """A fake engine whose loads report the memory they took, as real workers do."""

    def answer(self, worker: int, action: Action, tensors: Tensors) -> Answer:
        reply, outputs = super().answer(worker, action, tensors)
        if action["op"] == "load" and reply["ok"]:
            reply["memory_mb"] = LOADED_MB
        return reply, outputs


@pytest.fixture
def repository(tmp_path: Path) -> Repository:
    for name in ("served", "idle"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "model.yaml").write_text(YAML)
    return Repository.scan(tmp_path)


async def warmed(repository: Repository) -> Controller:
    """A controller whose two models are loaded on its one worker, warm-up and sweep done."""
    controller = Controller(
        repository, MeasuringEngine(compute=lambda a, t: {"y": t["x"]}), clock=ManualClock()
    )
    await controller.start()
    for _ in range(500):  # the measuring runs answer on their own, a loop turn or two each
        await asyncio.sleep(0)
        if not controller.measuring.warming:
            break
    assert not controller.measuring.warming
    return controller


def test_warm_up_runs_and_the_sweep_are_counted_apart_from_traffic(
    repository: Repository,
) -> None:
    async def scenario() -> None:
        controller = await warmed(repository)
        idle = controller.model_statistics("idle").counts
        assert idle.requests == 0
        assert idle.batch_size.count == 0 and idle.compute.count == 0  # no traffic: no batches
        assert idle.measuring.runs > 0 and idle.measuring.rows >= idle.measuring.runs
        rows = {"x": np.ones((3, 2), np.float32)}
        for _ in range(2):
            await controller.infer(InferenceRequest("served", inputs=rows))
        served = controller.model_statistics("served").counts
        assert (served.batch_size.count, served.batch_size.total) == (2, 6)  # 3 rows, twice
        assert served.queue.count == 2 and served.per_request.count == 2
        assert served.measuring == idle.measuring  # the same warm-up, counted apart
        await controller.stop()

    asyncio.run(scenario())


def test_a_workers_memory_counts_its_models_without_a_budget(repository: Repository) -> None:
    async def scenario() -> None:
        controller = await warmed(repository)
        snapshot = controller.statistics()
        (worker,) = snapshot.workers
        assert worker.budget_mb is None and worker.resident == 2
        assert worker.used_mb == pytest.approx(2 * LOADED_MB)
        assert all(m.status.memory_mb == pytest.approx(LOADED_MB) for m in snapshot.models)
        await controller.stop()

    asyncio.run(scenario())


def test_a_worker_says_what_it_spent_its_time_on(repository: Repository) -> None:
    async def scenario() -> None:
        controller = await warmed(repository)
        (worker,) = controller.statistics().workers
        assert worker.running is None  # idle now
        assert set(worker.ran_s) == {"served@1", "idle@1"}  # loads and measuring runs
        assert all(seconds > 0 for seconds in worker.ran_s.values())
        await controller.stop()

    asyncio.run(scenario())
