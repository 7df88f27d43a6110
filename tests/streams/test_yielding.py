"""A `framework: python` model whose `predict` is a generator streams: each part it yields
reaches the submitter's `Receiver.part` as it is made, through a real worker process, and
the stream ends with `done` (or `fail`, naming the model's error)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from headway.api.metrics import render
from headway.control.controller import Controller
from headway.control.request import InferenceRequest
from headway.errors import ModelError, WorkerFailed
from headway.repository import Repository
from headway.runtime.engines.local import LocalEngine
from tests.streams.receivers import Recorder

pytestmark = pytest.mark.integration

COUNTER = '''
import os
import time
import numpy as np


class Counter:
    """Counts to each row's value, one part per number, a pause between parts. A row of
    -1 makes it raise at the fourth part; a row of -5 kills its worker there."""

    inputs = [{"name": "n", "datatype": "INT64", "shape": [-1, 1]}]
    outputs = [{"name": "count", "datatype": "INT64", "shape": [-1]}]

    def predict(self, batch):
        for i in range(int(batch.max())):
            if i == 3 and (batch == -5).any():
                os._exit(5)
            if i == 3 and (batch < 0).any():
                raise RuntimeError("negative rows break the count at 3")
            time.sleep(0.05)
            yield {"count": np.minimum(batch[:, 0], i + 1)}
'''


@pytest.fixture
def repository(tmp_path: Path) -> Repository:
    (tmp_path / "counter" / "1").mkdir(parents=True)
    (tmp_path / "counter" / "model.py").write_text(COUNTER)
    (tmp_path / "counter" / "model.yaml").write_text(
        "framework: python\nentrypoint: model.py:Counter\nslo_ms: 5000\n"
    )
    return Repository.scan(tmp_path)


async def serving(repository: Repository) -> Controller:
    controller = Controller(repository, LocalEngine(1), ready_timeout=60)
    await controller.start()
    return controller


def test_each_part_reaches_the_receiver_as_it_is_made(repository: Repository) -> None:
    async def scenario() -> None:
        controller = await serving(repository)
        try:
            assert controller.model("counter").config.streams
            recorder = Recorder()
            started = time.monotonic()
            request = InferenceRequest("counter", inputs={"n": np.array([[5]])}, stream=True)
            controller.submit(request, recorder)
            await asyncio.wait_for(recorder.ended, 10)
            assert recorder.kinds == ["part"] * 5 + ["done"]
            assert [int(p["count"][0]) for p in recorder.parts()] == [1, 2, 3, 4, 5]
            times = [t for _, _, t in recorder.calls]
            # parts arrive as made (a pause of 50 ms between them), not all at the end
            assert times[1] - times[0] > 0.03 and times[0] - started < times[-1] - started - 0.1
            prediction = recorder.calls[-1][1]
            assert prediction.outputs == {}  # type: ignore[attr-defined]
            counts = controller.model_statistics("counter").counts
            assert counts.streams == 1 and counts.parts == 5
            assert counts.first_part.count == 1 and counts.part_gap.count == 4
            metrics = render(controller).decode()
            assert 'headway_time_to_first_part_seconds_count{model="counter"} 1.0' in metrics
            assert 'headway_time_per_part_seconds_count{model="counter"} 4.0' in metrics
            assert 'headway_parts_total{model="counter"} 5.0' in metrics
            assert 'headway_streams_total{model="counter"} 1.0' in metrics
            assert 'headway_parts_per_second{model="counter"} 0.5' in metrics
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_a_request_taken_whole_gets_its_parts_gathered(repository: Repository) -> None:
    async def scenario() -> None:
        controller = await serving(repository)
        try:
            prediction = await controller.infer(
                InferenceRequest("counter", inputs={"n": np.array([[3], [2]])})
            )
            np.testing.assert_array_equal(prediction.outputs["count"], [[1, 2, 3], [1, 2, 2]])
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_an_error_inside_the_stream_ends_it_naming_the_cause(repository: Repository) -> None:
    async def scenario() -> None:
        controller = await serving(repository)
        try:
            recorder = Recorder()
            request = InferenceRequest("counter", inputs={"n": np.array([[-9]])}, stream=True)
            controller.submit(request, recorder)
            await asyncio.wait_for(recorder.ended, 10)
            assert recorder.kinds == ["done"]  # the max row is -9: a stream of no parts
            recorder = Recorder()
            request = InferenceRequest("counter", inputs={"n": np.array([[6], [-1]])}, stream=True)
            controller.submit(request, recorder)
            await asyncio.wait_for(recorder.ended, 10)
            assert recorder.kinds == ["part"] * 3 + ["fail"]
            assert isinstance(recorder.error, ModelError)
            assert "negative rows break the count at 3" in str(recorder.error)
        finally:
            await controller.stop()

    asyncio.run(scenario())


def test_a_worker_killed_mid_stream_ends_it_without_repeating_parts(
    repository: Repository,
) -> None:
    async def scenario() -> None:
        controller = await serving(repository)
        try:
            recorder = Recorder()
            request = InferenceRequest("counter", inputs={"n": np.array([[6], [-5]])}, stream=True)
            controller.submit(request, recorder)
            await asyncio.wait_for(recorder.ended, 30)
            # its parts went out: a retry would send them again, so the stream fails
            assert recorder.kinds == ["part"] * 3 + ["fail"]
            assert isinstance(recorder.error, WorkerFailed)
            assert "after 3 parts" in str(recorder.error)
            # the worker restarts and serves the next stream
            after = Recorder()
            request = InferenceRequest("counter", inputs={"n": np.array([[2]])}, stream=True)
            controller.submit(request, after)
            await asyncio.wait_for(after.ended, 60)
            assert after.kinds == ["part", "part", "done"]
        finally:
            await controller.stop()

    asyncio.run(scenario())
