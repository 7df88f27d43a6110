"""Replica changes on a live controller with real worker processes: `Controller.scale`, and
the tuner applying its decisions (`headway serve --tune`)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from headway.api.metrics import render
from headway.clock import ManualClock
from headway.control.controller import Controller
from headway.launcher import ServerProcess
from headway.planning.envelope import envelope, window_lengths
from headway.planning.live import LiveTuner
from headway.planning.plan_file import PlanFile, PlannedStage, write_plan
from headway.repository import Repository
from headway.runtime.engines.local import LocalEngine
from tests.control.helpers import infer
from tests.integration import models
from tests.integration.oip_client import infer_json

pytestmark = pytest.mark.integration

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
                *(infer(controller, "digits-logreg", ROWS) for _ in range(20))
            )
            assert len(answers) == 20
            assert controller.scale("digits-logreg", 1) == 1
            assert len(model.workers) == 1 and len(engine.pids()) == 1
            assert (await infer(controller, "digits-logreg", ROWS)).outputs
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
            await asyncio.gather(*(infer(controller, "digits-logreg", ROWS) for _ in range(30)))
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


def test_serve_with_tune_scales_up_a_live_server_under_a_spike(tmp_path: Path) -> None:
    """`headway serve --plan --tune` over HTTP: a burst far over the plan's 8 queries/s
    starts a second worker process, logged with its reason and counted in /metrics."""
    models.digits_logreg(tmp_path / "repo")
    steady = np.arange(480) / 8.0
    stage = {"model": "digits-logreg", "hardware": "cpu1", "max_batch_size": 1, "replicas": 1}
    stage.update(scale=1.0, throughput_qps=100.0, utilisation=0.08)
    plan = {"app": "only", "slo_ms": 100.0, "feasible": True, "rate_qps": 8.0}
    plan["envelope"] = envelope(steady, window_lengths(0.1))
    plan["stages"] = {"only": stage}
    write_plan(plan, tmp_path / "plan.yaml")
    tuning = ["--plan", str(tmp_path / "plan.yaml"), "--tune", "--tune-max-replicas", "2"]
    log = tmp_path / "server.log"
    with ServerProcess(
        tmp_path / "repo",
        state=tmp_path / "state.db",
        grpc_port=0,
        extra=[*tuning, "--log-level", "info"],
        log=log,
    ) as server:

        async def burst() -> list[int]:
            async with httpx.AsyncClient(timeout=60) as client:
                # a deadline far beyond any wait, so that every answer must be a 200 however
                # busy the machine: what is tested is the tuner, not admission
                body = {
                    "inputs": [
                        {"name": "input-0", "shape": [1, 64], "datatype": "FP64", "data": [0] * 64}
                    ],
                    "parameters": {"slo_ms": 60_000},
                }
                url = f"{server.url}/v2/models/digits-logreg/infer"
                answers = await asyncio.gather(*(client.post(url, json=body) for _ in range(60)))
                return [a.status_code for a in answers]

        assert asyncio.run(burst()) == [200] * 60
        up = 'headway_tuner_changes_total{direction="up",stage="only"} 1.0'
        deadline = time.monotonic() + 90
        while True:
            metrics = httpx.get(f"{server.url}/metrics").text
            if up in metrics and "headway_workers 2.0" in metrics:
                break
            assert time.monotonic() < deadline, metrics
            time.sleep(0.2)
        assert 'headway_tuner_replicas{model="digits-logreg",stage="only"} 2.0' in metrics
        assert infer_json(server.url, "digits-logreg", np.zeros((1, 64))).status_code == 200
    changes = [line for line in log.read_text().splitlines() if "headway.tuner" in line]
    assert len(changes) == 1, changes  # capped at 2 replicas: one change, up
    assert "only (model digits-logreg): 1 -> 2 replicas" in changes[0]
    assert "over the plan's" in changes[0]
