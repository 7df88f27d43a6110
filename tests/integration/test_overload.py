"""Under overload a request that would be late is refused at once, before it is decoded.

On live servers: a request due no later than one that admission refused for the work ahead
(`backlog`), and requests that waited longest while the frontend is behind (`shed`), are
answered 503 by the connection layer with `Retry-After`, an `error` naming the model and a
`reason`, and counted in /metrics by model and reason (`headway_refused_unread`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.oip_client import body

pytestmark = pytest.mark.integration

SLEEPY = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}


def sample(metrics: str, prefix: str) -> float:
    lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
    return sum(float(line.split()[-1]) for line in lines)


def test_a_request_due_no_later_than_one_refused_for_the_work_ahead_is_refused_unread(
    tmp_path: Path,
) -> None:
    """One worker, busy for 1.5 s with a slow model: a request to the fast model due in 1 s is
    refused at admission (its worker is busy); one due sooner, sent just after, is refused
    before it is decoded, saying why."""
    root = tmp_path / "repo"
    rows, _ = models.digits_logreg(root)
    models.sleeper(root, "slow", 1.5, extra="max_batch_size: 1\n")
    with (
        ServerProcess(root, state=tmp_path / "s.db", workers=1) as server,
        ThreadPoolExecutor(1) as pool,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        row = body(rows[:1], parameters={"slo_ms": 1000})
        assert client.post("/v2/models/digits-logreg/infer", json=row).status_code == 200
        running = pool.submit(
            client.post, "/v2/models/slow/infer", json={**SLEEPY, "parameters": {"slo_ms": 9000}}
        )
        time.sleep(0.2)  # the slow run holds the only worker for 1.5 s from about now
        first = client.post("/v2/models/digits-logreg/infer", json=row)
        assert first.status_code == 503
        assert "worker is busy" in first.json()["error"], first.json()
        sooner = body(rows[:1], parameters={"slo_ms": 400})
        second = client.post("/v2/models/digits-logreg/infer", json=sooner)
        assert second.status_code == 503
        assert second.json()["reason"] == "backlog", second.json()
        assert "'digits-logreg'" in second.json()["error"]
        assert second.headers["retry-after"] == "1"
        assert running.result().status_code == 200
        metrics = client.get("/metrics").text
    refused = 'headway_refused_unread_total{model="digits-logreg",reason="backlog"}'
    assert sample(metrics, refused) == 1
    assert sample(metrics, 'headway_errors_total{model="digits-logreg",reason="deadline"}') == 2


def test_while_the_frontend_is_behind_requests_that_waited_longest_are_shed(
    tmp_path: Path,
) -> None:
    """The inline engine, its batches on the loop (`--inline-runs loop`), runs a 0.6 s model
    in the server's loop, back to back: nothing is read
    while it runs, so for as long as that lasts every request waits ~0.6 s to be read. Past
    CoDel's interval the frontend sheds the requests that waited more than half of their
    deadline (here 0.8 s), at once, instead of serving them ever later."""
    root = tmp_path / "repo"
    rows, _ = models.digits_logreg(root)
    models.sleeper(root, "slow", 0.6, extra="max_batch_size: 1\n")
    slow = {**SLEEPY, "parameters": {"slo_ms": 20_000}}
    quick = body(rows[:1], parameters={"slo_ms": 800})
    inline = ["--engine", "inline", "--inline-runs", "loop"]
    with ServerProcess(root, state=tmp_path / "s.db", extra=inline) as server:

        def hold(_: int) -> list[int]:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                return [client.post("/v2/models/slow/infer", json=slow).status_code
                        for _ in range(4)]  # fmt: skip

        def probe(_: int) -> list[httpx.Response]:
            answers = []
            with httpx.Client(base_url=server.url, timeout=30) as client:
                for _ in range(8):
                    time.sleep(0.1)
                    answers.append(client.post("/v2/models/digits-logreg/infer", json=quick))
            return answers

        with ThreadPoolExecutor(3) as pool:
            holders = [pool.submit(hold, i) for i in range(2)]
            answers = pool.submit(probe, 0).result()
            assert all(code == 200 for h in holders for code in h.result())
        with httpx.Client(base_url=server.url, timeout=10) as client:
            metrics = client.get("/metrics").text
    assert all(a.status_code in (200, 503) for a in answers)
    # refused unread (with a reason), or at admission (its worker busy with the slow model)
    quick = [a for a in answers if a.status_code == 503 and "reason" in a.json()]
    reasons = [a.json()["reason"] for a in quick]
    assert "shed" in reasons, [a.json() for a in answers if a.status_code == 503]
    assert all(a.headers["retry-after"] == "1" for a in quick)
    shed = 'headway_refused_unread_total{model="digits-logreg",reason="shed"}'
    assert sample(metrics, shed) == reasons.count("shed")
