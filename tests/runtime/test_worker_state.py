"""A worker's actions, in-process: load, infer, unload, and failures that never kill it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.runtime.worker import WorkerState
from tests.runtime.workers import call, model_config


def load(state: WorkerState, tmp_path: Path, name: str, entrypoint: str) -> dict[str, Any]:
    config = model_config(tmp_path, name, entrypoint)
    reply, _ = call(state, {"op": "load", "id": 1, "model": f"{name}@1", "config": config})
    return reply


def test_load_infer_unload(tmp_path: Path) -> None:
    state = WorkerState()
    reply = load(state, tmp_path, "scaler", "model.py:Scaler")
    assert reply["ok"] is True, reply
    assert reply["id"] == 1
    assert reply["duration"] >= 0
    assert reply["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 2]}]
    assert reply["outputs"] == [{"name": "output-0", "datatype": "FP32", "shape": [-1, 2]}]
    assert reply["memory_mb"] >= 0

    batch = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)
    reply, outputs = call(
        state, {"op": "infer", "id": 2, "model": "scaler@1", "rows": 3}, {"input-0": batch}
    )
    assert reply["ok"] is True, reply
    assert reply["id"] == 2
    assert reply["duration"] >= 0
    np.testing.assert_array_equal(outputs["output-0"], batch * 2)
    assert outputs["output-0"].dtype == np.float32

    reply, _ = call(state, {"op": "ping", "id": 3})
    assert reply["models"] == ["scaler@1"]

    reply, _ = call(state, {"op": "unload", "id": 4, "model": "scaler@1"})
    assert reply["ok"] is True
    assert state.models == {}
    reply, outputs = call(
        state, {"op": "infer", "id": 5, "model": "scaler@1", "rows": 3}, {"input-0": batch}
    )
    assert reply["ok"] is False
    assert reply["error"] == "LookupError: model 'scaler@1' is not loaded on this worker"
    assert outputs == {}


def test_unknown_op_is_an_error_reply(tmp_path: Path) -> None:
    state = WorkerState()
    reply, outputs = call(state, {"op": "frobnicate", "id": 9})
    assert reply["ok"] is False
    assert reply["id"] == 9
    assert "frobnicate" in reply["error"]
    assert outputs == {}


def test_a_model_that_raises_is_reported_and_the_worker_survives(tmp_path: Path) -> None:
    state = WorkerState()
    assert load(state, tmp_path, "scaler", "model.py:Scaler")["ok"]
    bad = np.array([[-1, 0]], dtype=np.float32)
    reply, outputs = call(
        state, {"op": "infer", "id": 2, "model": "scaler@1", "rows": 1}, {"input-0": bad}
    )
    assert reply["ok"] is False
    assert reply["error"] == "ValueError: negative input"
    assert reply["id"] == 2
    assert outputs == {}

    good = np.array([[1, 1]], dtype=np.float32)
    reply, outputs = call(
        state, {"op": "infer", "id": 3, "model": "scaler@1", "rows": 1}, {"input-0": good}
    )
    assert reply["ok"] is True
    np.testing.assert_array_equal(outputs["output-0"], [[2, 2]])


def test_output_without_the_batch_dimension_is_refused(tmp_path: Path) -> None:
    state = WorkerState()
    assert load(state, tmp_path, "first", "model.py:FirstRowOnly")["ok"]
    batch = np.ones((3, 2), dtype=np.float32)
    reply, outputs = call(
        state, {"op": "infer", "id": 2, "model": "first@1", "rows": 3}, {"input-0": batch}
    )
    assert reply["ok"] is False
    assert reply["error"] == (
        "ValueError: output 'output-0' has shape [1, 2]; its first dimension must be the batch "
        "(3 rows)"
    )
    assert outputs == {}


def test_a_model_that_fails_to_load_is_reported(tmp_path: Path) -> None:
    state = WorkerState()
    reply = load(state, tmp_path, "broken", "model.py:Broken")
    assert reply["ok"] is False
    assert reply["error"].startswith("ConfigError: ")
    assert "no weights here" in reply["error"]
    assert state.models == {}


@pytest.mark.parametrize("entrypoint", ["model.py:Missing", "nothing.py:Scaler"])
def test_a_bad_entrypoint_is_reported(tmp_path: Path, entrypoint: str) -> None:
    state = WorkerState()
    reply = load(state, tmp_path, "m", entrypoint)
    assert reply["ok"] is False
    assert entrypoint.split(":")[0 if "nothing" in entrypoint else 1] in reply["error"]


def test_each_model_computes_with_its_own_threads(tmp_path: Path) -> None:
    from headway.repository import read_model
    from headway.runtime.threads import set_threads
    from tests.runtime.workers import threads_model

    state = WorkerState()
    batch = np.zeros((2, 1), dtype=np.float32)
    try:
        for number, (name, threads) in enumerate([("three", 3), ("one", None)]):
            config = read_model(threads_model(tmp_path, name, threads)).to_wire()
            call(state, {"op": "load", "id": number, "model": name, "config": config})
        answers = []
        for name in ("three", "one", "three"):
            reply, outputs = call(
                state, {"op": "infer", "id": 9, "model": name, "rows": 2}, {"input-0": batch}
            )
            assert reply["ok"] is True, reply
            answers.append(int(outputs["output-0"][0, 0]))
        assert answers == [3, 1, 3]
        reply, _ = call(state, {"op": "ping", "id": 10})
        assert reply["threads"] == 3
    finally:
        set_threads(1)  # this process's pools, as the test found them
