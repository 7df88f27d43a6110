"""`--engine inline`'s runs' thread (`--inline-runs thread`): the real engine on a
real event loop. A batch runs beside the loop, which goes on with its other callbacks (its
reads) meanwhile; answers and a model's errors come back to the loop; a short request that
finds the worker idle still runs inside the caller; stopping waits for the running action.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.clock import LoopClock
from headway.control.dispatch.relay import Relay
from headway.control.engine import Action, Reply, Tensors
from headway.errors import ModelError
from headway.repository import read_model
from headway.runtime.engines.inline import (
    LOOP_RUN_LIMIT_S,
    SWITCH_INTERVAL_S,
    THREAD,
    InlineEngine,
)
from tests.control.helpers import awaited, ms, request, scheduler, seed
from tests.runtime.workers import model_config

NAPPER = textwrap.dedent(
    """
    import time

    class Napper:
        def predict(self, batch):
            time.sleep(0.3)
            return batch + 1
    """
)


def napper_config(tmp_path: Path) -> dict[str, Any]:
    folder = tmp_path / "napper"
    (folder / "1").mkdir(parents=True)
    (folder / "model.py").write_text(NAPPER)
    (folder / "model.yaml").write_text("framework: python\nentrypoint: model.py:Napper\n")
    return read_model(folder).to_wire()


class Replies:
    """The engine's replies, in order, each resolving the future of its action's id."""

    def __init__(self, engine: InlineEngine) -> None:
        self.loop = asyncio.get_running_loop()
        self.waiting: dict[int, asyncio.Future[tuple[Reply, Tensors]]] = {}
        self.order: list[int | None] = []
        engine.on_message = self.heard

    def heard(self, worker: int, reply: Reply, tensors: Tensors) -> None:
        self.order.append(reply["id"])
        self.waiting.pop(reply["id"] or 0).set_result((reply, tensors))

    def expect(self, action_id: int) -> asyncio.Future[tuple[Reply, Tensors]]:
        future = self.loop.create_future()
        self.waiting[action_id] = future
        return future


async def load(engine: InlineEngine, replies: Replies, model: str, config: dict[str, Any]) -> None:
    loaded = replies.expect(1)
    assert engine.send(0, {"op": "load", "id": 1, "model": model, "config": config}, {})
    reply, _ = await loaded
    assert reply["ok"], reply


def infer(action_id: int, model: str, rows: int) -> Action:
    return {"op": "infer", "id": action_id, "model": model, "rows": rows}


def test_a_batch_runs_beside_the_loop_which_goes_on_meanwhile(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], np.ndarray]:
        engine = InlineEngine(runs=THREAD)
        await engine.start()
        replies = Replies(engine)
        await load(engine, replies, "napper@1", napper_config(tmp_path))
        events: list[str] = []
        answered = replies.expect(2)
        answered.add_done_callback(lambda _: events.append("answered"))
        batch = np.zeros((3, 2), dtype=np.float32)
        assert engine.send(0, infer(2, "napper@1", 3), {"input-0": batch})
        asyncio.get_running_loop().call_later(0.05, events.append, "the loop's next read")
        _, outputs = await answered
        await engine.stop()
        return events, outputs["output-0"]

    events, output = asyncio.run(scenario())
    # the read came while the 0.3 s batch ran: on the loop, it would have come after
    assert events == ["the loop's next read", "answered"]
    np.testing.assert_array_equal(output, np.ones((3, 2), dtype=np.float32))


def test_a_models_error_and_each_answer_come_back_in_order(tmp_path: Path) -> None:
    async def scenario() -> list[Reply]:
        engine = InlineEngine(runs=THREAD)
        await engine.start()
        replies = Replies(engine)
        await load(engine, replies, "scaler@1", model_config(tmp_path, "scaler"))
        futures = [replies.expect(i) for i in (2, 3, 4)]
        good = np.array([[1, 2]], dtype=np.float32)
        engine.send(0, infer(2, "scaler@1", 1), {"input-0": good})
        engine.send(0, infer(3, "scaler@1", 1), {"input-0": -good})  # the model raises
        engine.send(0, infer(4, "scaler@1", 1), {"input-0": good * 3})
        answers = await asyncio.gather(*futures)
        await engine.stop()
        assert [a[1]["output-0"].tolist() for a in answers if a[0]["ok"]] == [[[2, 4]], [[6, 12]]]
        return [reply for reply, _ in answers]

    replies = asyncio.run(scenario())
    assert [r["ok"] for r in replies] == [True, False, True]
    assert replies[1]["error"] == "ValueError: negative input"


def test_only_a_short_run_that_finds_the_worker_idle_runs_inside_the_caller(
    tmp_path: Path,
) -> None:
    async def scenario() -> list[object]:
        engine = InlineEngine(runs=THREAD)
        await engine.start()
        replies = Replies(engine)
        await load(engine, replies, "scaler@1", model_config(tmp_path, "scaler"))
        row = {"input-0": np.array([[1, 2]], dtype=np.float32)}
        short = engine.run_now(0, infer(2, "scaler@1", 1), row, seconds=0.0001)
        long = engine.run_now(0, infer(3, "scaler@1", 1), row, seconds=0.5)
        unknown = engine.run_now(0, infer(4, "scaler@1", 1), row)
        sent = replies.expect(5)
        engine.send(0, infer(5, "scaler@1", 1), row)
        busy = engine.run_now(0, infer(6, "scaler@1", 1), row, seconds=0.0001)
        await sent
        after = engine.run_now(0, infer(7, "scaler@1", 1), row, seconds=0.0001)
        await engine.stop()
        return [short, long, unknown, busy, after]

    short, long, unknown, busy, after = asyncio.run(scenario())
    assert isinstance(short, tuple) and short[0]["ok"] and short[0]["id"] == 2
    assert long is None and unknown is None  # sent to the thread by the caller instead
    assert busy is None  # an action was in the thread: this one waits its turn there
    assert isinstance(after, tuple) and after[0]["id"] == 7


def test_stop_waits_for_the_running_action_and_nothing_is_heard_after(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[int | None], bool, bool]:
        engine = InlineEngine(runs=THREAD)
        await engine.start()
        replies = Replies(engine)
        await load(engine, replies, "napper@1", napper_config(tmp_path))
        replies.expect(2)
        engine.send(0, infer(2, "napper@1", 1), {"input-0": np.zeros((1, 2), np.float32)})
        await asyncio.sleep(0.05)  # it runs
        await engine.stop()
        thread = engine._thread
        await asyncio.sleep(0.05)  # an answer scheduled on the loop would be heard by now
        refused = engine.send(0, infer(3, "napper@1", 1), {})
        return replies.order, thread is not None and thread.is_alive(), refused

    heard, alive, refused = asyncio.run(scenario())
    assert heard == [1], "the batch's answer came after stop"
    assert not alive and not refused


def test_the_switch_interval_is_short_while_the_thread_runs_and_as_it_was_after() -> None:
    """The runs' thread takes the interpreter's lock back from the loop several times a run,
    each after up to a switch interval with the model idle: shortened while it runs (to at
    most a tenth of a millisecond), the process's own again once the engine stops."""

    async def scenario() -> tuple[float, float]:
        engine = InlineEngine(runs=THREAD)
        await engine.start()
        running = sys.getswitchinterval()
        await engine.stop()
        return running, sys.getswitchinterval()

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.003)  # not the default: what the process chose stays its own
    try:
        running, after = asyncio.run(scenario())
    finally:
        sys.setswitchinterval(before)
    assert running == pytest.approx(SWITCH_INTERVAL_S) and SWITCH_INTERVAL_S <= 0.0001
    assert after == pytest.approx(0.003)


def test_a_short_batch_that_finds_the_worker_idle_runs_in_the_pump_a_long_one_in_the_thread(
    tmp_path: Path,
) -> None:
    """The pump sends the batch it chose: predicted under `LOOP_RUN_LIMIT_S`, with the worker
    idle, it runs inside the pump (its answer is there when the pump returns; a small model's
    batch would pay more for the hop than it runs); predicted longer, it goes to the thread
    and is answered later, the loop free meanwhile."""

    async def scenario(run_ms: float) -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        clock = LoopClock()
        s = scheduler(clock, {0: ["m"]}, max_batch=4)
        seed(s, "m", {1: ms(run_ms)})
        engine = InlineEngine(runs=THREAD)
        await engine.start()
        relay = Relay(s, engine, clock)
        relay.loop = loop
        engine.on_message = relay.on_reply
        read = request(clock, "read", ms(500))
        answer = awaited(read)
        s.submit(read)
        relay._pump()
        in_the_pump = answer.done()
        with contextlib.suppress(ModelError):  # its worker holds no model `m`: it fails
            await answer
        await engine.stop()
        return in_the_pump, answer.done()

    limit_ms = LOOP_RUN_LIMIT_S * 1000
    assert asyncio.run(scenario(limit_ms / 4)) == (True, True)
    assert asyncio.run(scenario(limit_ms * 10)) == (False, True)
