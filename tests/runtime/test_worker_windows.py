"""A worker's side of Clockwork's timed actions, in-process: an action that can no longer start
by its `latest` time is refused unrun, and a LOAD first evicts the models it names."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from headway.runtime.worker import WorkerState
from tests.runtime.workers import call, model_config

LATE = {"ok": False, "late": True, "duration": 0.0}


def load(state: WorkerState, tmp_path: Path, name: str, ident: int, **extra: Any) -> dict[str, Any]:
    header = {
        "op": "load",
        "id": ident,
        "model": f"{name}@1",
        "config": model_config(tmp_path, name),
    }
    reply, _ = call(state, {**header, **extra})
    return reply


def infer(state: WorkerState, model: str, batch: np.ndarray, ident: int, **extra: Any) -> Any:
    header = {"op": "infer", "id": ident, "model": model, "rows": len(batch), **extra}
    return call(state, header, {"input-0": batch})


# -- the start window ---------------------------------------------------------------------------


def test_an_infer_past_its_latest_start_is_refused_unrun(tmp_path: Path) -> None:
    state = WorkerState()
    assert load(state, tmp_path, "scaler", 1)["ok"]
    negative = np.array([[-1, 0]], dtype=np.float32)  # would raise, were the model run
    reply, outputs = infer(state, "scaler@1", negative, 2, latest=time.monotonic() - 1.0)
    assert reply == {"id": 2, **LATE}
    assert outputs == {}


def test_an_infer_within_its_window_runs(tmp_path: Path) -> None:
    state = WorkerState()
    assert load(state, tmp_path, "scaler", 1)["ok"]
    batch = np.array([[1, 2], [3, 4]], dtype=np.float32)
    for ident, extra in [(2, {"latest": time.monotonic() + 60.0}), (3, {"latest": None}), (4, {})]:
        reply, outputs = infer(state, "scaler@1", batch, ident, **extra)
        assert reply["ok"] is True, reply
        assert (reply["id"], "late" in reply) == (ident, False)
        np.testing.assert_array_equal(outputs["output-0"], batch * 2)


def test_any_action_past_its_latest_start_is_refused(tmp_path: Path) -> None:
    state = WorkerState()
    past = time.monotonic() - 1.0
    assert load(state, tmp_path, "scaler", 1, latest=past) == {"id": 1, **LATE}
    assert state.models == {}  # not loaded
    assert load(state, tmp_path, "other", 2)["ok"]
    reply, _ = call(state, {"op": "unload", "id": 3, "model": "other@1", "latest": past})
    assert reply == {"id": 3, **LATE}
    assert sorted(state.models) == ["other@1"]  # not unloaded


# -- eviction on LOAD -----------------------------------------------------------------------------


def test_a_load_evicts_the_models_it_names_first(tmp_path: Path) -> None:
    state = WorkerState()
    assert load(state, tmp_path, "a", 1)["ok"]
    assert load(state, tmp_path, "b", 2)["ok"]
    reply = load(state, tmp_path, "c", 3, evict=["a@1", "gone@1"])  # unknown names are no harm
    assert reply["ok"] is True, reply
    assert reply["memory_mb"] >= 0
    reply, _ = call(state, {"op": "ping", "id": 4})
    assert reply["models"] == ["b@1", "c@1"]

    batch = np.ones((1, 2), dtype=np.float32)
    reply, _ = infer(state, "a@1", batch, 5)
    assert reply["ok"] is False
    assert reply["error"] == "LookupError: model 'a@1' is not loaded on this worker"
    reply, outputs = infer(state, "c@1", batch, 6)
    assert reply["ok"] is True
    np.testing.assert_array_equal(outputs["output-0"], batch * 2)


def test_a_failed_load_still_evicts_what_it_named(tmp_path: Path) -> None:
    # The controller counts the named models gone as soon as it sends the LOAD.
    state = WorkerState()
    assert load(state, tmp_path, "a", 1)["ok"]
    broken = model_config(tmp_path, "broken", "model.py:Broken")
    header = {"op": "load", "id": 2, "model": "broken@1", "config": broken, "evict": ["a@1"]}
    reply, _ = call(state, header)
    assert reply["ok"] is False
    assert "no weights here" in reply["error"]
    assert state.models == {}


def test_a_refused_load_evicts_nothing(tmp_path: Path) -> None:
    state = WorkerState()
    assert load(state, tmp_path, "a", 1)["ok"]
    reply = load(state, tmp_path, "c", 2, evict=["a@1"], latest=time.monotonic() - 1.0)
    assert reply == {"id": 2, **LATE}
    assert sorted(state.models) == ["a@1"]
