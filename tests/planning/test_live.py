"""Replica changes on a live controller with real worker processes: `Controller.scale`, and
the tuner applying its decisions (`headway serve --tune`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from headway.api.metrics import render
from headway.clock import ManualClock
from headway.control.controller import Controller
from headway.planning.envelope import envelope, window_lengths
from headway.planning.live import LiveTuner
from headway.planning.plan_file import PlanFile, PlannedStage
from headway.repository import Repository
from headway.runtime.engines.local import LocalEngine
from tests.integration import models

ROWS = {"input-0": np.zeros((1, 64))}


async def until(condition: object, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_scale_starts_and_retires_worker_processes(tmp_path: Path) -> None:
    models.digits_logreg(tmp_path)

    async def run() -> None:
        engine = LocalEngine(1)
        controller = Controller(Repository.scan(tmp_path), engine)
        await controller.start()
        try:
            model = controller.model("digits-logreg")
            assert controller.scale("digits-logreg", 3) == 3
            await until(lambda: len(model.workers) == 3)
            assert len(engine.pids()) == 3
            answers = await asyncio.gather(
                *(controller.infer("digits-logreg", ROWS) for _ in range(20))
            )
            assert len(answers) == 20
            assert controller.scale("digits-logreg", 1) == 1
            assert len(model.workers) == 1 and len(engine.pids()) == 1
            assert (await controller.infer("digits-logreg", ROWS)).outputs
            assert controller.scale("digits-logreg", 0) == 1  # never fewer than one
        finally:
            await controller.stop()

    asyncio.run(run())


def test_the_live_tuner_scales_up_on_a_burst_and_shows_it_in_metrics(tmp_path: Path) -> None:
    models.digits_logreg(tmp_path)
    steady = np.arange(480) / 8.0  # the plan: 8 queries/s
    stage = PlannedStage("only", "digits-logreg", "cpu1", 1, 1, 1.0, 100.0, 0.08)
    plan = PlanFile("app", 100.0, 8.0, envelope(steady, window_lengths(0.1)), (stage,))

    async def run() -> None:
        controller = Controller(Repository.scan(tmp_path), LocalEngine(1))
        clock = ManualClock()
        tuner = LiveTuner(controller, plan, clock=clock, max_replicas=2)
        await controller.start()
        try:
            clock.set(0.1)
            assert tuner.step() == []  # the counter's starting point
            await asyncio.gather(*(controller.infer("digits-logreg", ROWS) for _ in range(30)))
            clock.set(0.2)
            (change,) = tuner.step()  # 30 queries in 0.1 s against 8/s planned
            assert (change.before, change.after) == (1, 2)
            assert "over the plan's" in change.reason
            model = controller.model("digits-logreg")
            await until(lambda: len(model.workers) == 2)
            metrics = render(controller, None, tuner).decode()
            assert 'headway_tuner_replicas{model="digits-logreg",stage="only"} 2.0' in metrics
            assert 'headway_tuner_changes_total{direction="up",stage="only"} 1.0' in metrics
        finally:
            await controller.stop()

    asyncio.run(run())
