"""A generative model served with real worker processes: sequences stepped together, a new one
joining a running batch, a withdrawn one freed at the next step, the memory bound's refusals,
and the faults (a failed start, a failed step, a worker killed mid-stream)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.api.metrics import render
from headway.control.controller import Controller
from headway.control.request import InferenceRequest, Ticket
from headway.errors import ModelError, SequencesFull, WorkerFailed
from headway.repository import Repository
from headway.runtime.engines.local import LocalEngine
from tests.streams.models import counting
from tests.streams.receivers import Recorder

pytestmark = pytest.mark.integration


async def serving(root: Path) -> Controller:
    controller = Controller(Repository.scan(root), LocalEngine(1), ready_timeout=60)
    await controller.start()
    for _ in range(1000):  # the warm-up's sequences profile its steps
        if not controller.warming("counting"):
            break
        await asyncio.sleep(0.01)
    assert not controller.warming("counting")
    return controller


def count(controller: Controller, n: int, **fields: Any) -> tuple[Recorder, Ticket]:
    recorder = Recorder()
    request = InferenceRequest("counting", inputs={"n": np.array([[n]])}, stream=True, **fields)
    return recorder, controller.submit(request, recorder)


def counts(recorder: Recorder) -> list[int]:
    return [int(part["count"][0]) for part in recorder.parts()]


async def parts(recorder: Recorder, at_least: int) -> None:
    for _ in range(2000):
        if len(recorder.parts()) >= at_least or recorder.ended.done():
            return
        await asyncio.sleep(0.005)


def test_a_new_sequence_joins_the_running_batch_at_the_next_step(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = await serving(counting(tmp_path))
        try:
            long, _ = count(controller, 60)
            await parts(long, 5)
            short, _ = count(controller, 3)
            await asyncio.wait_for(short.ended, 10)
            assert counts(short) == [1, 2, 3] and short.kinds[-1] == "done"
            assert not long.ended.done()  # it ended while the long one still ran
            assert 'headway_running_sequences{model="counting"} 1.0' in render(controller).decode()
            await asyncio.wait_for(long.ended, 10)
            assert counts(long) == list(range(1, 61))
            statistics = controller.model_statistics("counting")
            assert statistics.counts.streams == 2
            assert statistics.counts.first_part.count == 2
            assert statistics.counts.part_gap.count == 59 + 2
            # the steps held both sequences at once: one action per step, not per part
            sizes = statistics.counts.batch_size
            assert sizes.cumulative()[0][1] < sizes.count  # some steps had 2 sequences
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_the_warm_up_steps_are_counted_apart_from_clients_traffic(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = await serving(counting(tmp_path))
        try:
            counts_ = controller.model_statistics("counting").counts
            assert counts_.measuring.runs > 0  # the warm-up stepped its sequences
            assert counts_.batch_size.count == 0 and counts_.compute.count == 0
            recorder, _ = count(controller, 3)
            await asyncio.wait_for(recorder.ended, 10)
            counts_ = controller.model_statistics("counting").counts
            assert counts_.batch_size.count == 3  # one step per part, all a client's
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_parts_are_capped_by_max_tokens_and_gathered_when_not_streamed(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = await serving(counting(tmp_path))
        try:
            capped, _ = count(controller, 50, parameters={"max_tokens": 4})
            await asyncio.wait_for(capped.ended, 10)
            assert counts(capped) == [1, 2, 3, 4]
            request = InferenceRequest("counting", inputs={"n": np.array([[3]])})
            whole = await controller.infer(request)
            np.testing.assert_array_equal(whole.outputs["count"], [[1, 2, 3]])
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_a_withdrawn_sequence_frees_its_slot_at_the_next_step(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = await serving(counting(tmp_path, max_sequences=1))
        try:
            first, ticket = count(controller, 300)
            await parts(first, 3)
            second, _ = count(
                controller, 2, ttft=120.0
            )  # waits for the slot, however slow the steps
            await asyncio.sleep(0.05)
            assert not second.parts()  # the one slot is taken
            controller.withdraw(ticket)
            await asyncio.wait_for(second.ended, 5)
            assert counts(second) == [1, 2]
            assert not first.ended.done()  # a withdrawn request is never answered again
            assert len(first.parts()) < 300
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_a_full_memory_bound_refuses_at_once_when_no_slot_frees_in_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = await serving(counting(tmp_path, max_sequences=1))
        try:
            running, _ = count(controller, 300)
            await parts(running, 2)
            with pytest.raises(SequencesFull, match="max_sequences"):
                count(controller, 2, ttft=0.2)
            # with time enough for the running one to end, it waits for the slot
            waiting, _ = count(controller, 2, ttft=30.0)
            await asyncio.wait_for(waiting.ended, 20)
            assert counts(waiting) == [1, 2]
            events = controller.statistics().scheduler.events
            assert events["counting@1", "rejected_at_admission", "sequences_full"] == 1
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_errors_inside_a_stream_end_it_naming_the_cause(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = await serving(counting(tmp_path))
        try:
            fine, _ = count(controller, 40)
            await parts(fine, 2)
            unstartable, _ = count(controller, -1)
            await asyncio.wait_for(unstartable.ended, 5)
            assert unstartable.kinds == ["fail"]
            assert isinstance(unstartable.error, ModelError)
            assert "a count cannot start from -1" in str(unstartable.error)
            assert not fine.ended.done()  # a failed start fails that sequence alone
            breaking, _ = count(controller, -2)
            await asyncio.wait_for(breaking.ended, 5)
            await asyncio.wait_for(fine.ended, 5)
            for recorder in (breaking, fine):  # a step that raises fails all it ran
                assert isinstance(recorder.error, ModelError)
                assert "the count broke on a -2" in str(recorder.error)
            again, _ = count(controller, 3)
            await asyncio.wait_for(again.ended, 5)
            assert counts(again) == [1, 2, 3]
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_a_worker_killed_mid_stream_ends_its_streams_and_serves_after_restart(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        controller = await serving(counting(tmp_path, max_sequences=2))
        try:
            streaming, _ = count(controller, 200)
            await parts(streaming, 3)
            killer, _ = count(controller, -3)
            await asyncio.wait_for(streaming.ended, 10)
            await asyncio.wait_for(killer.ended, 10)
            assert isinstance(streaming.error, WorkerFailed)
            assert "died" in str(streaming.error) and "parts" in str(streaming.error)
            assert isinstance(killer.error, WorkerFailed)
            assert controller.model_statistics("counting").scheduling.running == 0
            for _ in range(1000):  # the replacement loads the model (and warms it up)
                if controller.model_statistics("counting").status.workers:
                    break
                await asyncio.sleep(0.01)
            after, _ = count(controller, 3, ttft=30.0)
            await asyncio.wait_for(after.ended, 30)
            assert counts(after) == [1, 2, 3]
        finally:
            await controller.stop()

    asyncio.run(scenario())


class Spans:
    """A stand-in for a transport's trace (`api.tracing.Trace`): the spans written to it."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float, dict[str, Any]]] = []

    def span(self, name: str, start: float, end: float, **attributes: Any) -> None:
        self.spans.append((name, start, end, attributes))


def test_each_step_of_a_traced_stream_is_a_span(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = await serving(counting(tmp_path))
        controller.tracing = True
        try:
            trace = Spans()
            recorder, _ = count(controller, 4, trace=trace)
            await asyncio.wait_for(recorder.ended, 10)
            assert [name for name, *_ in trace.spans] == ["step"] * 4
            assert [a["step.part"] for *_, a in trace.spans] == [1, 2, 3, 4]
            assert all(start <= end for _, start, end, _ in trace.spans)
        finally:
            await controller.stop()

    asyncio.run(scenario())
