"""`headway serve --engine inline`: the models run in the server's own process, same protocol.

Answers match the framework's in-process ones, there is no worker process, deadlines are
still enforced by the scheduler, and loads and unloads through the repository API still work.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.oip_client import body
from tests.processes import children

pytestmark = pytest.mark.integration


def test_inline_engine_serves_in_process_with_deadlines(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    rows, expected = models.digits_logreg(root)
    models.sleeper(root, "slow", 0.2)
    with ServerProcess(root, state=tmp_path / "s.db", extra=["--engine", "inline"]) as server:
        assert server.process is not None
        assert not children(server.process.pid), "the inline engine starts no worker process"
        with httpx.Client(base_url=server.url, timeout=10) as client:
            answer = client.post("/v2/models/digits-logreg/infer", json=body(rows)).json()
            outputs = {
                o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in answer["outputs"]
            }
            np.testing.assert_array_equal(outputs["label"], expected["label"])
            np.testing.assert_allclose(outputs["probabilities"], expected["probabilities"])

            # the scheduler knows `slow` takes 200 ms (warm-up at load): 50 ms is refused at once
            sleepy = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                                  "data": [1] * 4}]}  # fmt: skip
            assert client.post("/v2/models/slow/infer", json=sleepy).status_code == 200
            tight = client.post(
                "/v2/models/slow/infer", json={**sleepy, "parameters": {"timeout": 50_000}}
            )
            # refused at admission (not queued until its deadline passed, nor run late)
            assert tight.status_code == 503
            assert "deadline cannot be met" in tight.json()["error"]

            assert client.post("/v2/repository/models/digits-logreg/unload").status_code == 200
            gone = client.post("/v2/models/digits-logreg/infer", json=body(rows[:1]))
            assert gone.status_code == 503
            assert client.post("/v2/repository/models/digits-logreg/load").status_code == 200
            again = client.post("/v2/models/digits-logreg/infer", json=body(rows[:1])).json()
            assert again["outputs"][0]["data"] == expected["label"][:1].tolist()
            workers = [line for line in client.get("/metrics").text.splitlines()
                       if line.startswith("headway_workers ")]  # fmt: skip
            assert workers == ["headway_workers 1.0"]


def test_inline_engine_still_batches_requests_that_arrive_together(tmp_path: Path) -> None:
    """A request that finds the server idle runs at once, inside the read that brought it;
    requests that arrive while the model runs are queued and run together, as batches."""
    root = tmp_path / "repo"
    models.sleeper(root, "nap", 0.02)
    sleepy = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                          "data": [1] * 4}]}  # fmt: skip
    with ServerProcess(root, state=tmp_path / "s.db", extra=["--engine", "inline"]) as server:

        def post(_: int) -> list[int]:  # one keep-alive connection per thread
            with httpx.Client(base_url=server.url, timeout=30) as client:
                return [client.post("/v2/models/nap/infer", json=sleepy).status_code
                        for _ in range(4)]  # fmt: skip

        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.post("/v2/models/nap/infer", json=sleepy).status_code == 200
        with ThreadPoolExecutor(16) as pool:
            statuses = [status for some in pool.map(post, range(16)) for status in some]
        assert statuses == [200] * 64
        with httpx.Client(base_url=server.url, timeout=30) as client:
            metrics = client.get("/metrics").text
        count = _sample(metrics, 'headway_batch_size_count{model="nap"}')
        rows = _sample(metrics, 'headway_batch_size_sum{model="nap"}')
        # 64 requests in fewer batches: those that come while the model naps run together
        assert rows >= 64 and count <= 0.75 * rows


def _sample(metrics: str, name: str) -> float:
    [line] = [line for line in metrics.splitlines() if line.startswith(name + " ")]
    return float(line.split()[-1])


def test_a_request_that_waited_too_long_to_be_read_is_refused_saying_so(tmp_path: Path) -> None:
    """While a model run holds the inline engine's loop (`--inline-runs loop`), a request for
    another model waits to be read; past its deadline it is refused 503 as stale (before its
    tensors are decoded), with the wait in the reason, not admitted or served late."""
    root = tmp_path / "repo"
    rows, _ = models.digits_logreg(root)
    models.sleeper(root, "slow", 0.3)
    sleepy = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                          "data": [1] * 4}]}  # fmt: skip
    with ServerProcess(
        root, state=tmp_path / "s.db", extra=["--engine", "inline", "--inline-runs", "loop"]
    ) as server:
        with httpx.Client(base_url=server.url, timeout=10) as first:
            assert first.post("/v2/models/slow/infer", json=sleepy).status_code == 200

        def stale(_: int) -> httpx.Response:
            time.sleep(0.1)  # sent while `slow` runs, in the loop, for 300 ms
            with httpx.Client(base_url=server.url, timeout=10) as client:
                stale_body = body(rows[:1], parameters={"slo_ms": 50})
                return client.post("/v2/models/digits-logreg/infer", json=stale_body)

        with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server.url, timeout=10) as c:
            late = pool.submit(stale, 0)
            assert c.post("/v2/models/slow/infer", json=sleepy).status_code == 200
            answer = late.result()
        assert answer.status_code == 503
        assert "to be read" in answer.json()["error"], answer.json()


def test_inline_batches_run_beside_the_loop_and_every_answer_comes_back(tmp_path: Path) -> None:
    """`--inline-runs thread`: the batches run in a thread beside the server's
    loop. Answers are the framework's own, none is lost among many at once, a model's error
    is a 500 and the next request is served, the loop answers while a long batch runs, and
    unloading, loading and stopping with work in flight end cleanly."""
    root = tmp_path / "repo"
    rows, expected = models.cancer_torch(root)
    models.python_model(root, "picky", "Picky")
    models.sleeper(root, "slow", 1.0, extra="slo_ms: 20000\n")
    sleepy = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                          "data": [1] * 4}]}  # fmt: skip
    inline = ["--engine", "inline", "--inline-runs", "thread"]
    with ServerProcess(root, state=tmp_path / "s.db", extra=inline) as server:
        assert server.process is not None

        def post(start: int) -> list[tuple[int, list[float]]]:  # one connection per thread
            with httpx.Client(base_url=server.url, timeout=30) as client:
                out = []
                for i in range(start, start + 8):
                    row = body(rows[i % len(rows) : i % len(rows) + 1])
                    answer = client.post("/v2/models/cancer-torch/infer", json=row)
                    out.append((answer.status_code, answer.json()["outputs"][0]["data"]))
                return out

        with ThreadPoolExecutor(16) as pool:
            answers = [a for some in pool.map(post, range(0, 128, 8)) for a in some]
        assert [code for code, _ in answers] == [200] * 128
        for i, (_, data) in enumerate(answers):
            # float32: a row batched with others may round in its last digit
            np.testing.assert_allclose(data, expected["output-0"][i % len(rows)], atol=1e-6)

        with httpx.Client(base_url=server.url, timeout=30) as client, ThreadPoolExecutor(1) as p:
            picky = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                                 "data": [1, -1, 1, 1]}]}  # fmt: skip
            failed = client.post("/v2/models/picky/infer", json=picky)
            assert failed.status_code == 500
            assert "negative input" in failed.json()["error"]
            served = client.post("/v2/models/picky/infer", json=sleepy)
            assert served.json()["outputs"][0]["data"] == [2.0] * 4

            running = p.submit(
                httpx.post, f"{server.url}/v2/models/slow/infer", json=sleepy, timeout=30
            )
            time.sleep(0.3)  # the 1 s batch runs in the thread from about now
            assert client.get("/v2/health/live").status_code == 200
            assert not running.done(), "the loop answered only once the long batch was over"
            assert running.result().status_code == 200

            inflight = p.submit(
                httpx.post, f"{server.url}/v2/models/slow/infer", json=sleepy, timeout=30
            )
            time.sleep(0.3)  # in flight when its model is unloaded: it is answered first
            assert client.post("/v2/repository/models/slow/unload").status_code == 200
            assert inflight.result().status_code == 200
            gone = client.post("/v2/models/slow/infer", json=sleepy)
            assert gone.status_code == 503, gone.json()
            assert client.post("/v2/repository/models/slow/load").status_code == 200
            inflight = p.submit(
                httpx.post, f"{server.url}/v2/models/slow/infer", json=sleepy, timeout=30
            )
            time.sleep(0.3)  # in flight when the server stops
        server.stop(timeout=10)
        assert server.process.returncode == 0
