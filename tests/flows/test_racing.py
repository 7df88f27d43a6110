"""Competing copies through the controller: once one answers, a copy still queued is withdrawn
and never takes a worker; a call abandoned with its query leaves the queue too.

The controller runs over the fake engine with its INFER replies held and released by hand, on a
manual clock (no deadline passes), so which copies were ever sent is exact.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.controller import Controller
from headway.flows.calls import race
from headway.flows.deadline import QueryDeadline
from headway.repository import Repository
from headway.testing import FakeEngine

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 1\nreplicas: 2\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 1]}]\n"
)


@pytest.fixture
def repository(tmp_path: Path) -> Repository:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)
    return Repository.scan(tmp_path)


def query(value: float) -> dict[str, np.ndarray]:
    return {"x": np.full((1, 1), value, np.float32)}


async def started(repository: Repository) -> tuple[Controller, FakeEngine]:
    """Two workers both holding the model, warmed up, with INFER replies now held."""
    engine = FakeEngine(size=2, duration=1e-3)
    controller = Controller(repository, engine, clock=ManualClock())
    await controller.start()
    for _ in range(200):  # the warm-up runs answer on their own
        await asyncio.sleep(0)
    assert controller.scheduler.placement.replicas("m@1") == {0, 1}
    assert not controller.scheduler.placement.busy_workers()
    engine.hold = True
    return controller, engine


def ten_seconds(controller: Controller) -> QueryDeadline:
    """A query's deadline ten seconds from now (the clock does not move)."""
    return QueryDeadline.starting(controller.clock, controller.clock.now(), 10_000.0)


def sent_values(engine: FakeEngine, since: int) -> list[float]:
    """The query values of the INFERs sent after the first `since` actions (held or not)."""
    held = {id(action): float(t["x"][0, 0]) for _, action, t in engine.held}
    return [held.get(id(a), -1.0) for _, a in engine.sent[since:] if a["op"] == "infer"]


def answer(engine: FakeEngine, value: float) -> None:
    """The first held INFER of the query `value` answers now, inside this call."""
    index = next(i for i, (_, _, t) in enumerate(engine.held) if t["x"][0, 0] == value)
    worker, action, tensors = engine.held.pop(index)
    engine.on_message(worker, *engine.answer(worker, action, tensors))


def test_a_queued_losing_copy_is_never_sent_after_the_winner_answers(
    repository: Repository,
) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        since = len(engine.sent)
        races = {}
        for value in (1.0, 2.0, 3.0):
            races[value] = asyncio.ensure_future(
                race(controller, "m", query(value), 2, ten_seconds(controller), "m")
            )
            for _ in range(3):
                await asyncio.sleep(0)
        # each worker runs a copy of query 1 and was sent one of query 2 ahead; 3 waits
        assert sorted(sent_values(engine, since)) == [1.0, 1.0, 2.0, 2.0]
        assert controller.scheduler.queue_length("m@1") == 2
        answer(engine, 1.0)  # one worker's copy wins query 1, and it takes a copy of 3
        for _ in range(5):
            await asyncio.sleep(0)
        assert sent_values(engine, since).count(3.0) == 1
        assert controller.scheduler.queue_length("m@1") == 1
        answer(engine, 3.0)  # it wins query 3: the copy still queued is withdrawn at once
        assert controller.scheduler.queue_length("m@1") == 0
        engine.catch_up()  # every copy sent ends; nothing is left to send
        for _ in range(5):
            await asyncio.sleep(0)
        engine.catch_up()
        assert len(sent_values(engine, since)) == 5  # 2 copies of queries 1 and 2, 1 of 3
        for value, task in races.items():
            assert (await task).outputs["x"][0, 0] == value
        assert not engine.held and not controller.scheduler.placement.busy_workers()
        await controller.stop()

    asyncio.run(scenario())


def test_copies_of_an_abandoned_race_leave_the_queue(repository: Repository) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        since = len(engine.sent)
        busy = [
            asyncio.ensure_future(race(controller, "m", query(v), 2, ten_seconds(controller), "m"))
            for v in (1.0, 2.0)
        ]  # a copy of each runs on each worker, or was sent ahead to it
        for _ in range(3):
            await asyncio.sleep(0)
        cut = asyncio.ensure_future(
            race(controller, "m", query(3.0), 2, ten_seconds(controller), "m")
        )
        for _ in range(3):
            await asyncio.sleep(0)
        assert controller.scheduler.queue_length("m@1") == 2
        cut.cancel()  # its query was cut off at its deadline
        with pytest.raises(asyncio.CancelledError):
            await cut
        assert controller.scheduler.queue_length("m@1") == 0
        engine.catch_up()
        for _ in range(5):
            await asyncio.sleep(0)
        engine.catch_up()
        assert [(await t).outputs["x"][0, 0] for t in busy] == [1.0, 2.0]
        assert not engine.held and len(sent_values(engine, since)) == 4  # none of query 3
        await controller.stop()

    asyncio.run(scenario())
