"""Competing copies through the controller: each copy a model of its own, kept on a worker of its
own; once one answers, a copy still queued is withdrawn and never takes a worker, one already
running is left to finish and counted; a call abandoned with its query leaves the queue too.

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
from headway.flows.calls import RaceStats, race
from headway.flows.deadline import QueryDeadline
from headway.repository import Repository
from headway.testing import FakeEngine

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 1\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 1]}]\n"
)
COPIES = ["c0", "c1"]


@pytest.fixture
def repository(tmp_path: Path) -> Repository:
    for name in COPIES:
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "model.yaml").write_text(YAML)
    return Repository.scan(tmp_path)


def query(value: float) -> dict[str, np.ndarray]:
    return {"x": np.full((1, 1), value, np.float32)}


async def started(repository: Repository) -> tuple[Controller, FakeEngine]:
    """Two workers, each holding one copy, warmed up, with INFER replies now held."""
    engine = FakeEngine(size=2, duration=1e-3)
    controller = Controller(repository, engine, clock=ManualClock())
    controller.keep_apart(COPIES, "the test's stage")
    await controller.start()
    for _ in range(200):  # the warm-up runs answer on their own
        await asyncio.sleep(0)
    replicas = {name: controller.model_statistics(name).scheduling.replicas for name in COPIES}
    assert set(replicas["c0"]) | set(replicas["c1"]) == {0, 1}
    assert idle(controller)
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


def queued(controller: Controller) -> int:
    return sum(controller.queue_length(name) for name in COPIES)


def idle(controller: Controller) -> bool:
    """Whether no worker runs an action now."""
    return all(worker.running is None for worker in controller.statistics().workers)


def test_a_queued_loser_is_withdrawn_and_a_running_one_finishes_counted(
    repository: Repository,
) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        since = len(engine.sent)
        stats = RaceStats()
        races = {}
        for value in (1.0, 2.0, 3.0):
            races[value] = asyncio.ensure_future(
                race(controller, COPIES, query(value), ten_seconds(controller), "m", stats)
            )
            for _ in range(3):
                await asyncio.sleep(0)
        # each worker runs its copy of query 1 and was sent its copy of query 2 ahead
        assert sorted(sent_values(engine, since)) == [1.0, 1.0, 2.0, 2.0]
        assert {w for w, a in engine.sent[since:] if a["op"] == "infer"} == {0, 1}
        assert queued(controller) == 2
        answer(engine, 1.0)  # one copy wins query 1; the other runs on: left to finish
        assert (stats.races, stats.losers_running, stats.losers_withdrawn) == (1, 1, 0)
        for _ in range(5):
            await asyncio.sleep(0)
        engine.catch_up()  # the rest of the copies sent end; query 3's copies are sent
        for _ in range(5):
            await asyncio.sleep(0)
        engine.catch_up()
        for value, task in races.items():
            assert (await task).outputs["x"][0, 0] == value
        assert not engine.held and idle(controller)
        await controller.stop()

    asyncio.run(scenario())


def test_a_loser_still_queued_when_the_race_is_won_never_runs(repository: Repository) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        stats = RaceStats()
        busy = [  # worker 1 (the other copy's) runs one and was sent the next ahead
            asyncio.ensure_future(race(controller, ["c1"], query(v), ten_seconds(controller), "m"))
            for v in (8.0, 9.0)
        ]
        for _ in range(3):
            await asyncio.sleep(0)
        since = len(engine.sent)
        task = asyncio.ensure_future(
            race(controller, COPIES, query(1.0), ten_seconds(controller), "m", stats)
        )
        for _ in range(3):
            await asyncio.sleep(0)
        answer(engine, 1.0)  # the copy on worker 0 wins while the other waits in its queue
        assert (stats.losers_withdrawn, stats.losers_running) == (1, 0)
        assert queued(controller) == 0
        engine.catch_up()
        for _ in range(5):
            await asyncio.sleep(0)
        engine.catch_up()
        assert (await task).outputs["x"][0, 0] == 1.0
        assert [(await b).outputs["x"][0, 0] for b in busy] == [8.0, 9.0]
        assert len(sent_values(engine, since)) == 1  # the winner; the loser was never sent
        await controller.stop()

    asyncio.run(scenario())


def test_copies_of_an_abandoned_race_leave_the_queue(repository: Repository) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        since = len(engine.sent)
        busy = [
            asyncio.ensure_future(race(controller, COPIES, query(v), ten_seconds(controller), "m"))
            for v in (1.0, 2.0)
        ]  # a copy of each runs on each worker, or was sent ahead to it
        for _ in range(3):
            await asyncio.sleep(0)
        cut = asyncio.ensure_future(
            race(controller, COPIES, query(3.0), ten_seconds(controller), "m")
        )
        for _ in range(3):
            await asyncio.sleep(0)
        assert queued(controller) == 2
        cut.cancel()  # its query was cut off at its deadline
        with pytest.raises(asyncio.CancelledError):
            await cut
        assert queued(controller) == 0
        engine.catch_up()
        for _ in range(5):
            await asyncio.sleep(0)
        engine.catch_up()
        assert [(await t).outputs["x"][0, 0] for t in busy] == [1.0, 2.0]
        assert not engine.held and len(sent_values(engine, since)) == 4  # none of query 3
        await controller.stop()

    asyncio.run(scenario())


def test_a_stopped_losers_cpu_time_reaches_the_race_as_the_errors_field(
    repository: Repository,
) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        stats = RaceStats()
        task = asyncio.ensure_future(
            race(controller, COPIES, query(1.0), ten_seconds(controller), "m", stats)
        )
        for _ in range(3):
            await asyncio.sleep(0)
        loser = engine.held[1][1]  # both copies run; the first one held wins
        answer(engine, 1.0)
        assert (await task).outputs["x"][0, 0] == 1.0
        assert stats.losers_running == 1
        worker, action, _ = engine.held.pop(0)
        assert action is loser
        stopped = {"id": action["id"], "ok": False, "error": "ActionStopped: stopped while it ran"}
        engine.on_message(worker, {**stopped, "stopped": True, "cpu_s": 0.25}, {})
        await asyncio.sleep(0)
        assert stats.loser_cpu_s == 0.25
        await controller.stop()

    asyncio.run(scenario())
