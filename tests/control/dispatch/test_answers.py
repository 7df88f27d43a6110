"""How a batch's results become answers: inside the worker's reply, with no loop turn between.

The controller runs over the fake engine, its INFER replies held and released by hand, so the
order of events inside one reply is visible: whether a request's `then` ran, with its future
done, before the reply returned, and which batches had been sent by then.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.clock import ManualClock
from headway.control.controller import Controller
from headway.control.engine import Action, Reply, Tensors
from headway.errors import ModelError, ModelStopped
from headway.repository import Repository
from headway.testing import FakeEngine
from tests.control.helpers import submit

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\n"
)


def row(value: float) -> dict[str, np.ndarray]:
    return {"x": np.full((1, 2), value, np.float32)}


def tenfold(action: Action, tensors: Tensors) -> Tensors:
    return {"y": tensors["x"][:, :1] * 10}


@pytest.fixture
def repository(tmp_path: Path) -> Repository:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)
    return Repository.scan(tmp_path)


async def started(repository: Repository) -> tuple[Controller, FakeEngine]:
    """A controller whose model is loaded and warmed up, with INFER replies now held."""
    engine = FakeEngine(compute=tenfold, duration=1e-3)
    controller = Controller(repository, engine, clock=ManualClock())
    await controller.start()
    for _ in range(200):  # the warm-up runs answer on their own, one per loop turn or two
        await asyncio.sleep(0)
    assert controller.scheduler.queue_length("m@1") == 0
    assert not controller.scheduler.placement.busy_workers()
    engine.hold = True
    return controller, engine


def test_then_runs_inside_the_reply_and_the_next_batch_goes_out_on_the_next_turn(
    repository: Repository,
) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        seen: list[tuple[float, bool, list[int]]] = []

        def then(future: asyncio.Future[Any]) -> None:
            value = float(future.result().outputs["y"][0, 0])
            seen.append((value, future.done(), engine.infers()))

        first = submit(controller, "m", row(1.0), then=then)
        await asyncio.sleep(0)  # the pump sends it: the worker is busy from now on
        assert engine.infers() == [1]
        later = [submit(controller, "m", row(v), then=then) for v in (2.0, 3.0, 4.0)]
        await asyncio.sleep(0)
        assert engine.infers() == [1]  # queued behind the busy worker (not a full batch)

        engine.release()  # inside this call: the first answer
        assert seen == [(10.0, True, [])]
        assert first.done()
        await asyncio.sleep(0)  # the pump's turn: the three queued rows go out as one batch
        assert engine.infers() == [3]
        engine.release()
        assert [s[0] for s in seen] == [10.0, 20.0, 30.0, 40.0]
        assert all(f.done() for f in later)
        await controller.stop()

    asyncio.run(scenario())


def test_catch_up_answers_waiting_replies_and_sends_the_next_batch_without_a_loop_turn(
    repository: Repository,
) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        answered: list[float] = []

        def then(future: asyncio.Future[Any]) -> None:
            answered.append(float(future.result().outputs["y"][0, 0]))

        submit(controller, "m", row(1.0), then=then)
        await asyncio.sleep(0)
        assert engine.infers() == [1]
        submit(controller, "m", row(2.0), then=then)
        submit(controller, "m", row(3.0), then=then)
        controller.catch_up()  # as a long turn of reads would, with no await in between
        assert answered == [10.0]
        assert engine.infers() == [2]  # the two queued rows went out at once
        controller.catch_up()
        assert answered == [10.0, 20.0, 30.0]
        await controller.stop()

    asyncio.run(scenario())


def test_a_then_that_raises_is_logged_and_the_batch_is_still_answered(
    repository: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        answered: list[float] = []

        def broken(future: asyncio.Future[Any]) -> None:
            raise RuntimeError("a bug in a caller")

        def then(future: asyncio.Future[Any]) -> None:
            answered.append(float(future.result().outputs["y"][0, 0]))

        submit(controller, "m", row(1.0), then=then)
        await asyncio.sleep(0)
        submit(controller, "m", row(2.0), then=broken)
        submit(controller, "m", row(3.0), then=then)
        await asyncio.sleep(0)
        engine.release()
        await asyncio.sleep(0)
        engine.release()
        assert answered == [10.0, 30.0]
        await controller.stop()

    with caplog.at_level(logging.ERROR, logger="headway.controller"):
        asyncio.run(scenario())
    assert "answering a request failed" in caplog.text and "a bug in a caller" in caplog.text


def test_then_runs_for_requests_failed_when_the_server_stops(repository: Repository) -> None:
    async def scenario() -> list[str]:
        controller, _ = await started(repository)
        errors: list[str] = []
        submit(controller, "m", row(1.0))
        await asyncio.sleep(0)
        submit(
            controller, "m", row(2.0), then=lambda future: errors.append(str(future.exception()))
        )
        await controller.stop()
        return errors

    assert asyncio.run(scenario()) == ["server stopping"]


def test_requests_that_cannot_form_one_batch_fail_and_free_the_worker(tmp_path: Path) -> None:
    """A model with no declared inputs: requests with other tensor names meet in one batch.
    Each is answered with the reason, none hangs, and the worker takes the next batch."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text("framework: python\nentrypoint: m.py:M\n")

    async def scenario() -> None:
        controller, engine = await started(Repository.scan(tmp_path))
        first = submit(controller, "m", row(1.0))
        await asyncio.sleep(0)  # the worker is busy with it
        mixed = [
            submit(controller, "m", {"x": np.ones((1, 2), np.float32)}),
            submit(controller, "m", {"z": np.ones((1, 2), np.float32)}),
        ]
        engine.release()
        await asyncio.sleep(0)  # the pump's turn: the two go out as one batch, which fails
        for future in mixed:
            with pytest.raises(
                ModelError, match=r"could not be formed.*declare the model.s inputs"
            ):
                await asyncio.wait_for(future, 1)
        assert first.done()
        last = submit(controller, "m", row(4.0))
        await asyncio.sleep(0)
        engine.release()
        assert (await asyncio.wait_for(last, 1)).outputs["y"][0, 0] == 40.0
        await controller.stop()

    asyncio.run(scenario())


def test_a_stopped_action_fails_its_requests_with_the_cpu_time_its_worker_reported(
    repository: Repository,
) -> None:
    async def scenario() -> None:
        controller, engine = await started(repository)
        error = "ActionStopped: stopped while it ran"
        stopped: Reply = {"id": None, "ok": False, "error": error, "stopped": True, "cpu_s": 0.125}
        plain: Reply = {"id": None, "ok": False, "error": "ValueError: negative input"}
        errors: list[ModelError] = []
        for reply in (stopped, plain):
            future = submit(controller, "m", row(1.0))
            await asyncio.sleep(0)
            worker, action, _ = engine.held.pop(0)
            reply["id"] = action["id"]
            engine.on_message(worker, reply, {})
            with pytest.raises(ModelError) as raised:
                await asyncio.wait_for(future, 1)
            errors.append(raised.value)
        assert isinstance(errors[0], ModelStopped) and errors[0].cpu_s == 0.125
        assert "stopped while it ran" in errors[0].message
        assert not isinstance(errors[1], ModelStopped)
        await controller.stop()

    asyncio.run(scenario())


class Watch:
    """A transport's reply watch: what it was told, in order."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.told: list[tuple[str, Any]] = []

    def expect_reply(self, seconds: float, requests: int) -> None:
        self.told.append(("expect", (seconds, requests, self.engine.infers())))

    def replies_in(self) -> None:
        self.told.append(("in", self.engine.infers()))


def test_the_reply_watch_hears_each_infer_sent_and_the_reply_that_leaves_no_worker_busy(
    repository: Repository,
) -> None:
    # The HTTP server polls for a reply due soon instead of sleeping: it is told, after each
    # INFER is sent, the model's predicted run for its rows and how many requests it carries,
    # and when a reply leaves no worker busy, so that it stops polling.
    async def scenario() -> None:
        controller, engine = await started(repository)
        watch = Watch(engine)
        controller.watch_replies(watch)
        run = controller.scheduler.estimator.estimate("m@1", 1)
        assert run is not None
        submit(controller, "m", row(1.0))
        await asyncio.sleep(0)
        assert watch.told == [("expect", (run, 1, [1]))]  # after the send
        for v in (2.0, 3.0):
            submit(controller, "m", row(v))
        engine.release()
        assert watch.told[1:] == [("in", [])]
        await asyncio.sleep(0)  # the two queued rows go out as one batch
        two = controller.scheduler.estimator.estimate("m@1", 2)
        assert watch.told[2:] == [("expect", (two, 2, [2]))]
        engine.release()
        assert watch.told[3:] == [("in", [])]
        await controller.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("both", [False, True])
def test_each_request_of_a_batch_gets_its_rows_of_the_outputs_it_asked_for(
    repository: Repository, both: bool
) -> None:
    """One output (the usual batch) or two: each request's answer holds its own rows, of the
    outputs it named (all of them when it named none)."""

    def compute(action: Action, tensors: Tensors) -> Tensors:
        outputs = {"y": tensors["x"][:, :1] * 10}
        if both:
            outputs["z"] = tensors["x"][:, 1:] + 1
        return outputs

    async def scenario() -> None:
        controller, engine = await started(repository)
        engine.compute = compute
        submit(controller, "m", row(0.0))  # keeps the worker busy while the batch queues
        await asyncio.sleep(0)
        wanted: list[tuple[str, ...] | None] = [None, ("y",), ("z",), ("y", "z"), None]
        two_rows = {"x": np.array([[4.0, 4.0], [5.0, 5.0]], np.float32)}
        futures = [
            submit(controller, "m", row(float(n + 1)), outputs=w) for n, w in enumerate(wanted[:-1])
        ] + [submit(controller, "m", two_rows)]
        engine.release()
        await asyncio.sleep(0)
        assert engine.infers() == [6]  # the five requests went out as one batch
        engine.release()
        answers = [f.result().outputs for f in futures]
        every = {"y", "z"} if both else {"y"}
        expected_names = [every, {"y"}, {"z"} & every, {"y", "z"} & every, every]
        assert [set(a) for a in answers] == expected_names
        for n, answer in enumerate(answers[:-1]):
            if "y" in answer:
                assert answer["y"].tolist() == [[(n + 1) * 10.0]]
            if "z" in answer:
                assert answer["z"].tolist() == [[n + 2.0]]
        assert answers[-1]["y"].tolist() == [[40.0], [50.0]]
        await controller.stop()

    asyncio.run(scenario())
