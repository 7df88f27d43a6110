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
