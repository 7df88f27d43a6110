"""Stopping a worker's action while it runs, or before it starts (`runtime.stopping`)."""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import numpy as np

from headway.control.engine import stopped_cpu
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


def sleeper(tmp_path: Path) -> dict[str, object]:
    folder = tmp_path / "sleeper"
    (folder / "1").mkdir(parents=True)
    (folder / "model.py").write_text(SLEEPER)
    (folder / "model.yaml").write_text("framework: python\nentrypoint: model.py:predict\n")
    return read_model(folder).to_wire()


def test_a_marked_action_is_stopped_while_it_runs_and_one_not_started_never_runs(
    tmp_path: Path,
) -> None:
    stops = StopFile(str(tmp_path / "w0.stops"))
    state = WorkerState()
    state.stops = StopMarks(stops.path)
    previous = signal.getsignal(SIGNAL)
    state.stops.install()
    try:
        call(state, {"op": "load", "id": 1, "model": "s", "config": sleeper(tmp_path)})
        batch = {"input-0": np.zeros((1, 1), np.float32)}

        def stop() -> None:
            stops.mark(7)
            os.kill(os.getpid(), SIGNAL)

        timer = threading.Timer(0.2, stop)
        timer.start()
        began = time.monotonic()
        reply, _ = call(state, {"op": "infer", "id": 7, "model": "s", "rows": 1}, batch)
        assert time.monotonic() - began < 10  # not the model's 30 s
        assert reply["ok"] is False and reply["id"] == 7
        assert (cpu := stopped_cpu(reply["error"])) is not None and cpu >= 0.0, reply
        assert state.stops.running is None
        os.kill(os.getpid(), SIGNAL)  # a stale signal between actions does nothing
        stops.mark(8)
        reply, _ = call(state, {"op": "infer", "id": 8, "model": "s", "rows": 1}, batch)
        assert reply["error"] == "ActionStopped: stopped before it started"
        assert stopped_cpu(reply["error"]) is None
    finally:
        signal.signal(SIGNAL, previous)
        stops.close()
