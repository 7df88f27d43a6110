"""Stopping a worker's action while it runs, or before it starts (`runtime.stopping`)."""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from headway.repository import read_model
from headway.runtime.stopping import SIGNAL, StopFile, StopMarks
from headway.runtime.worker import WorkerState
from tests.runtime.workers import call

SLEEPER = textwrap.dedent(
    """
    import time

    def predict(batch):
        time.sleep(30)
        return batch
    """
)


SPINNER = textwrap.dedent(
    """
    def predict(batch):
        while True:  # Python code: stopped at its next bytecode
            pass
    """
)


def sleeper(tmp_path: Path, code: str = SLEEPER) -> dict[str, object]:
    folder = tmp_path / "sleeper"
    (folder / "1").mkdir(parents=True)
    (folder / "model.py").write_text(code)
    (folder / "model.yaml").write_text("framework: python\nentrypoint: model.py:predict\n")
    return read_model(folder).to_wire()


@pytest.fixture
def stopping(tmp_path: Path) -> Iterator[tuple[WorkerState, StopFile]]:
    """A worker's state reading a stop file, with its signal handler installed."""
    stops = StopFile(str(tmp_path / "w0.stops"))
    state = WorkerState()
    state.stops = StopMarks(stops.path)
    previous = signal.getsignal(SIGNAL)
    state.stops.install()
    try:
        yield state, stops
    finally:
        signal.signal(SIGNAL, previous)
        stops.close()


def stop_soon(stops: StopFile, action: int) -> None:
    """The frontend stops `action` in a moment: marks it and signals this process."""

    def stop() -> None:
        stops.mark(action)
        os.kill(os.getpid(), SIGNAL)

    threading.Timer(0.2, stop).start()


BATCH = {"input-0": np.zeros((1, 1), np.float32)}


def test_a_marked_action_is_stopped_while_it_runs_and_one_not_started_never_runs(
    tmp_path: Path, stopping: tuple[WorkerState, StopFile]
) -> None:
    state, stops = stopping
    call(state, {"op": "load", "id": 1, "model": "s", "config": sleeper(tmp_path)})
    stop_soon(stops, 7)
    began = time.monotonic()
    reply, _ = call(state, {"op": "infer", "id": 7, "model": "s", "rows": 1}, BATCH)
    assert time.monotonic() - began < 10  # not the model's 30 s
    assert reply["ok"] is False and reply["id"] == 7
    assert reply["error"] == "ActionStopped: stopped while it ran"
    assert reply["stopped"] is True and 0.0 <= reply["cpu_s"] < 10.0, reply
    assert state.stops is not None and state.stops.running is None
    os.kill(os.getpid(), SIGNAL)  # a stale signal between actions does nothing
    stops.mark(8)
    reply, _ = call(state, {"op": "infer", "id": 8, "model": "s", "rows": 1}, BATCH)
    assert reply["error"] == "ActionStopped: stopped before it started"
    assert reply["stopped"] is True and reply["cpu_s"] == 0.0, reply


def test_a_stopped_action_replies_with_the_cpu_time_it_spent_as_a_field(
    tmp_path: Path, stopping: tuple[WorkerState, StopFile]
) -> None:
    state, stops = stopping
    call(state, {"op": "load", "id": 1, "model": "s", "config": sleeper(tmp_path, SPINNER)})
    stop_soon(stops, 2)
    reply, _ = call(state, {"op": "infer", "id": 2, "model": "s", "rows": 1}, BATCH)
    assert reply["ok"] is False and reply["stopped"] is True, reply
    assert isinstance(reply["cpu_s"], float) and reply["cpu_s"] > 0.0, reply  # it spun
    assert "stopped while it ran" in reply["error"] and "CPU" not in reply["error"]
