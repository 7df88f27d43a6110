"""A worker's start-up imports (HEADWAY_WORKER_FRAMEWORKS) and its collections on UNLOAD."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from headway.runtime import worker
from headway.runtime.wire import pack, unpack
from headway.runtime.worker import WorkerState

PROBE = """
import gc, json, sys
from headway.runtime.worker import prepare
missing = prepare(sys.argv[1])
print(json.dumps({
    "missing": missing,
    "ensemble": "sklearn.ensemble" in sys.modules,
    "frozen": gc.get_freeze_count(),
}))
"""


@pytest.mark.integration
def test_prepare_imports_the_frameworks_and_freezes_them_out_of_the_collector() -> None:
    pytest.importorskip("sklearn")
    # In a process of its own: freezing is for the rest of a process's life.
    done = subprocess.run(
        [sys.executable, "-c", PROBE, " sklearn,no-such-framework,"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["missing"] == ["no-such-framework"]  # reported at LOAD, as before
    assert result["ensemble"]  # what unpickling a forest would import in a LOAD
    assert result["frozen"] > 0


def test_unload_collects_only_the_young_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(worker.gc, "collect", lambda *generation: calls.append(generation) or 0)
    state = WorkerState()
    header, _ = unpack(pack({"op": "unload", "id": 1, "model": "m"}))
    reply, _ = state.handle(header, {})
    assert reply["ok"]
    assert calls == [(0,)]
