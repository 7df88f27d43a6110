"""The infer route asks whether a request waited too long to be read (`Controller.screen`)
only when its wait was noticeable: one read sooner that cannot make its deadline is refused by
admission instead, and under a policy that does not reject early every request is asked.
A real controller over `FakeEngine` workers, the clock injected."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from headway.api.app import HeadwayApp
from headway.api.errors import Response
from headway.clock import ManualClock
from headway.control.admission.overload import NOTICEABLE_WAIT_S
from headway.control.controller import Controller
from headway.control.policy import CLIPPER, HEADWAY, SchedulingPolicy
from headway.repository import Repository
from headway.testing import FakeEngine

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\n"
)
READ_LATE = "to be read"  # the stale check's refusal; admission's does not say it


def answers(
    tmp_path: Path, policy: SchedulingPolicy, requests: list[tuple[float, float]]
) -> list[Response]:
    """The answers to one-row requests, each (its wait to be read, its timeout beyond one row's
    predicted run), sent one at a time to a warm model whose one-row run takes 2 ms."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)

    async def scenario() -> list[Response]:
        clock = ManualClock(start=100.0)
        engine = FakeEngine(compute=lambda a, t: {"y": t["x"]}, duration=0.002)
        controller = Controller(Repository.scan(tmp_path), engine, clock=clock, policy=policy)
        app = HeadwayApp(controller)
        await app.start()
        for _ in range(200):  # the warm-up runs answer on their own
            await asyncio.sleep(0)
        service = controller.scheduler.durations.service_time("m@1", 1)
        assert service is not None
        out = []
        for waited, spare in requests:
            timeout_us = round((service + spare) * 1e6)
            body = orjson.dumps(
                {
                    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}],
                    "parameters": {"timeout": timeout_us},
                }
            )
            out.append(
                await app.handle("POST", "/v2/models/m/infer", {}, body, clock.now() - waited)
            )
        await app.stop()
        return out

    return asyncio.run(scenario())


def error(response: Response) -> str:
    return str(orjson.loads(response[1])["error"])


def test_a_request_read_late_is_refused_as_read_late(tmp_path: Path) -> None:
    late, timely = answers(tmp_path, HEADWAY, [(0.060, 0.050), (0.0, 0.050)])
    assert late[0] == 503 and READ_LATE in error(late), late
    assert "waited 60.0 ms" in error(late)
    assert timely[0] == 200, timely


def test_a_request_read_promptly_that_cannot_make_its_deadline_is_refused_by_admission(
    tmp_path: Path,
) -> None:
    """Read within the noticeable wait, with less time left than one row's run: not asked
    whether it was read late (its wait is not the news), and still refused, at admission."""
    waited = NOTICEABLE_WAIT_S / 2
    (prompt,) = answers(tmp_path, HEADWAY, [(waited, waited / 2)])
    assert prompt[0] == 503, prompt
    assert READ_LATE not in error(prompt) and "needs ~" in error(prompt), error(prompt)


@pytest.mark.parametrize("waited", [NOTICEABLE_WAIT_S / 2, 0.060])
def test_without_early_rejection_every_late_read_is_refused_as_such(
    tmp_path: Path, waited: float
) -> None:
    """Admission refuses nothing under Clipper's policy, so the stale check is all there is."""
    (late,) = answers(tmp_path, CLIPPER, [(waited, waited / 2)])
    assert late[0] == 503 and READ_LATE in error(late), late
