"""A competing stage on a real server started with one worker: the server starts the second
worker its race needs, each copy runs in its own worker process, and each race's loser is
withdrawn (still queued) or left to finish with its CPU time counted."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
import yaml

from headway.launcher import ServerProcess
from tests.flows.examples import EXAMPLES

pytestmark = pytest.mark.integration
QUERIES = 12


def test_two_copies_race_in_two_worker_processes(tmp_path: Path) -> None:
    root = tmp_path / "repository"
    root.mkdir()
    shutil.copy(EXAMPLES / "heavy_tail.py", tmp_path)
    app = {"flow": "heavy_tail.py:flow", "slo_ms": 20_000}
    (tmp_path / "headway.yaml").write_text(yaml.safe_dump({"apps": {"heavy-tail": app}}))
    extra = ["--config", str(tmp_path / "headway.yaml")]
    with ServerProcess(root, state=tmp_path / "s.db", workers=1, extra=extra,
                       log=tmp_path / "server.log") as server:  # fmt: skip
        url = server.url
        described = httpx.get(f"{url}/apps/heavy-tail", timeout=30).json()
        (stage,) = [s for s in described["flow"]["stages"] if s["high_variance"]]
        copies = stage["served_as"]
        workers = httpx.get(f"{url}/dashboard/data.json", timeout=30).json()["workers"]
        holding = {
            c: [w["pid"] for w in workers if any(c in m for m in w["models"])] for c in copies
        }
        for value in range(QUERIES):
            answer = httpx.post(f"{url}/apps/heavy-tail/predict", json={"input": {"x": value}},
                                timeout=60)  # fmt: skip
            assert answer.status_code == 200 and not answer.json()["default"], answer.text
        races = httpx.get(f"{url}/apps/heavy-tail", timeout=30).json()["statistics"]["races"]
    assert len(copies) == 2 and all(len(pids) == 1 for pids in holding.values()), holding
    assert holding[copies[0]] != holding[copies[1]]  # two processes, one copy each
    assert races["races"] >= QUERIES  # the warm-up raced nothing; every query raced
    assert races["losers_withdrawn"] + races["losers_running"] == races["races"]
    assert races["loser_cpu_s"] >= 0.0


SLOW_COPY = """
import fcntl
import time
from pathlib import Path

from headway.flows import Flow, Row


def claim() -> bool:
    # the first worker process to run the operator holds the lock for its life: it is slow
    handle = open(Path(__file__).with_name("slow.lock"), "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    globals()["held"] = handle
    return True


def work(slow: bool, row: Row) -> float:
    if slow and row["x"] > 0:  # warm-up rows are zeros
        time.sleep(30)
    return float(row["x"]) + 1


flow = Flow("slow-copy", {"x": float})
flow.map(work, init=claim, high_variance=True, names=["y"])
"""


def test_a_losing_copy_still_running_is_stopped_and_its_worker_freed(tmp_path: Path) -> None:
    root = tmp_path / "repository"
    root.mkdir()
    (tmp_path / "slow_copy.py").write_text(SLOW_COPY)
    app = {"flow": "slow_copy.py:flow", "slo_ms": 60_000}
    (tmp_path / "headway.yaml").write_text(yaml.safe_dump({"apps": {"slow": app}}))
    extra = ["--config", str(tmp_path / "headway.yaml")]
    with ServerProcess(root, state=tmp_path / "s.db", workers=2, extra=extra,
                       log=tmp_path / "server.log") as server:  # fmt: skip
        url = server.url
        for value in (1, 2, 3):  # each would wait 30 s for the slow copy, were it not stopped
            answer = httpx.post(f"{url}/apps/slow/predict", json={"input": {"x": value}},
                                timeout=25)  # fmt: skip
            assert answer.status_code == 200, answer.text
            assert answer.json()["output"] == [{"y": value + 1.0}], answer.text
        races = httpx.get(f"{url}/apps/slow", timeout=30).json()["statistics"]["races"]
    assert races["races"] == 3
    # the slow copy lost each race while it ran (or before it started, sent ahead)
    assert races["losers_stopped"] == races["losers_running"] >= 1, races
    assert races["loser_cpu_s"] < 5.0, races  # a sleep costs no CPU, and it was cut short


def test_a_server_that_cannot_start_workers_refuses_a_race_saying_why(tmp_path: Path) -> None:
    root = tmp_path / "repository"
    (root / "flows").mkdir(parents=True)
    shutil.copy(EXAMPLES / "heavy_tail.py", root / "flows")
    with ServerProcess(root, state=tmp_path / "s.db", extra=["--engine", "inline"],
                       log=tmp_path / "server.log") as server:  # fmt: skip
        body = {"flow": "flows/heavy_tail.py:flow", "slo_ms": 20_000}
        refused = httpx.put(f"{server.url}/apps/heavy", json=body, timeout=30)
        assert refused.status_code == 400, refused.text
        assert "races 2 copies, which need 2 distinct workers" in refused.text
        assert "inline engine cannot start more" in refused.text
        alone = httpx.put(f"{server.url}/apps/heavy", json={**body, "compete": False}, timeout=30)
        assert alone.status_code == 201, alone.text
