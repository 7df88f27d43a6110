"""`headway.Client` and `headway.AsyncClient` against a live server: numpy in and out, the apps
API, deadlines, and retries of a refusal (a worker busy with another model's long action)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

import headway
from headway.client import GrpcClient, Retry
from headway.client.codec import encode_infer
from headway.errors import DeadlineUnmeetable, InvalidInput, ModelNotFound, Unavailable
from headway.launcher import ServerProcess
from tests.integration import models

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One worker shared by a digits classifier, a model that sleeps 0.5 s, one that sleeps 0.5 s
    once the test releases it (`Held`), and one that answers at once with a 150 ms SLO; an
    application over the classifier."""
    root = tmp_path_factory.mktemp("client-repository")
    rows, expected = models.digits_logreg(root)
    models.sleeper(root, "slow", 0.5, "slo_ms: 5000\n")
    # its sweep stops at batch 1 (0.5 s is over half its SLO): the server is ready sooner
    held = models.sleeper(root, "held", 0.5, "slo_ms: 900\n", entry="Held")
    models.sleeper(root, "quick", 0.0, "slo_ms: 150\n")
    tmp = tmp_path_factory.mktemp("client")
    apps = {"digits": {"models": ["digits-logreg"], "slo_ms": 1000, "default_output": -1}}
    (tmp / "headway.yaml").write_text(yaml.safe_dump({"apps": apps}))
    config = ["--config", str(tmp / "headway.yaml")]
    with ServerProcess(root, state=tmp / "s.db", workers=1, extra=config) as server:
        yield {"server": server, "rows": rows, "expected": expected, "held": held}


def test_numpy_in_and_out_and_the_protocols_other_calls(served: dict[str, Any]) -> None:
    server: ServerProcess = served["server"]
    rows, expected = served["rows"], served["expected"]
    with headway.Client(server.url) as client:
        answer = client.infer("digits-logreg", rows, request_id="c-1")
        assert (answer.model, answer.version, answer.id) == ("digits-logreg", "1", "c-1")
        np.testing.assert_array_equal(answer["label"], expected["label"])
        np.testing.assert_allclose(answer["probabilities"], expected["probabilities"], rtol=1e-6)
        only = client.infer("digits-logreg", {"input-0": rows[:3]}, outputs=["label"], version=1)
        assert list(only.outputs) == ["label"]
        assert client.live() and client.ready("digits-logreg")
        assert not client.ready("no-such-model")
        assert client.metadata("digits-logreg")["inputs"][0]["shape"] == [-1, 64]
        assert client.config("digits-logreg")["max_batch_size"] > 0
        stats = client.statistics("digits-logreg")["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] >= 2
        assert "statistics" in client.metadata()["extensions"]


def test_errors_are_headways_with_the_servers_message(served: dict[str, Any]) -> None:
    with headway.Client(served["server"].url) as client:
        with pytest.raises(InvalidInput, match=r"expected shape \[-1, 64\], got \[1, 3\]"):
            client.infer("digits-logreg", np.zeros((1, 3)))
        with pytest.raises(ModelNotFound, match="nope"):
            client.infer("nope", np.zeros((1, 3)))


def test_the_apps_api(served: dict[str, Any]) -> None:
    rows, expected = served["rows"], served["expected"]
    with headway.Client(served["server"].url) as client:
        answer = client.predict("digits", rows[0].tolist(), user="ann")
        assert answer["output"] == expected["label"][0] and not answer["default"]
        judged = client.feedback("digits", answer["query_id"], int(expected["label"][0]))
        assert judged["query_id"] == answer["query_id"]


def test_a_refusal_is_retried_and_each_retry_says_why(served: dict[str, Any]) -> None:
    url, held = served["server"].url, served["held"]
    lines: list[str] = []
    one_row = np.full((1, 4), 0.5, np.float32)

    def retried(line: str) -> None:
        lines.append(line)
        (held / "release").touch()  # quick was turned away: the long action may end

    with headway.Client(url, on_retry=retried) as client:
        client.infer("quick", one_row)  # measured: its estimate is known
        with ThreadPoolExecutor(1) as pool:
            long_run = pool.submit(client.infer, "held", one_row, timeout=30.0)
            # the only worker runs `held` (0.5 s measured at warm-up) and holds it until quick
            # is turned away, however slowly this machine gets there
            give_up = time.monotonic() + 30.0
            while not (held / "started").exists():
                assert time.monotonic() < give_up and not long_run.done(), long_run
                time.sleep(0.01)
            answer = client.infer("quick", one_row)
            assert long_run.result()["output-0"].shape == (1, 1)
    np.testing.assert_array_equal(answer["output-0"], [[2.0]])
    assert lines and all(line.startswith("503 model 'quick@1': ") for line in lines), lines
    assert all(line.endswith(" s") and "retrying in" in line for line in lines)


def test_a_deadline_bounds_every_try_and_the_retries(served: dict[str, Any]) -> None:
    one_row = np.full((1, 4), 0.5, np.float32)
    lines: list[str] = []
    with headway.Client(served["server"].url, on_retry=lines.append) as client:
        client.infer("slow", one_row)  # its 0.5 s duration is known
        with pytest.raises(Unavailable, match="deadline cannot be met") as caught:
            client.infer("slow", one_row, timeout=0.05)
    # the first backoff (0.25 s) is past the deadline: no retry was worth trying
    assert lines == [] and "tries" not in str(caught.value)
    with (
        headway.Client(served["server"].url, retry=Retry(attempts=3, backoff=0.01)) as client,
        pytest.raises(Unavailable, match=r"after 3 tries: .*deadline cannot be met"),
    ):
        client.infer("slow", one_row, parameters={"slo_ms": 10})


def test_a_refusal_names_its_reason_and_the_client_raises_its_class(
    served: dict[str, Any],
) -> None:
    """Not a stream: the 503's body names `deadline` beside Triton's `error`, and the client
    raises `DeadlineUnmeetable`, not a bare `Unavailable`, without reading the text."""
    one_row = np.full((1, 4), 0.5, np.float32)
    url = served["server"].url
    with headway.Client(url, retry=Retry(attempts=1)) as client:
        client.infer("slow", one_row)  # its 0.5 s duration is known
        body, headers = encode_infer({"input-0": one_row}, parameters={"timeout": 50_000})
        refused = httpx.post(f"{url}/v2/models/slow/infer", content=body, headers=headers)
        assert refused.status_code == 503, refused.text
        assert refused.json()["reason"] == "deadline", refused.json()
        assert "deadline cannot be met" in refused.json()["error"]
        with pytest.raises(DeadlineUnmeetable, match="deadline cannot be met"):
            client.infer("slow", one_row, timeout=0.05)
        unknown = httpx.post(f"{url}/v2/models/nope/infer", content=body, headers=headers)
        assert unknown.status_code == 404 and unknown.json()["reason"] == "not_found"


def test_the_async_client_shares_one_pool_among_concurrent_calls(
    served: dict[str, Any],
) -> None:
    rows, expected = served["rows"], served["expected"]

    async def ask() -> list[Any]:
        async with headway.AsyncClient(served["server"].url) as client:
            assert await client.ready("digits-logreg")
            return await asyncio.gather(
                *(client.infer("digits-logreg", rows[i : i + 1]) for i in range(8))
            )

    answers = asyncio.run(ask())
    assert [int(a["label"][0]) for a in answers] == expected["label"][:8].tolist()


def test_an_unreachable_server_is_retried_then_unavailable(tmp_path: Path) -> None:
    from headway.launcher import free_port

    lines: list[str] = []
    retry = Retry(attempts=3, backoff=0.01)
    with (
        headway.Client(
            f"http://127.0.0.1:{free_port()}", retry=retry, on_retry=lines.append
        ) as client,
        pytest.raises(Unavailable, match="after 3 tries: cannot reach the server"),
    ):
        client.live()
    assert len(lines) == 2


def test_retry_after_is_honoured_and_the_backoff_doubles() -> None:
    from headway.client.calls import Tries, get_call

    retry = Retry(attempts=5, backoff=0.25, max_wait=5.0)
    assert [retry.wait(n) for n in (1, 2, 3, 6)] == [0.25, 0.5, 1.0, 5.0]
    assert retry.wait(1, "0.3") == 0.3 and retry.wait(1, "60") == 5.0
    assert retry.wait(2, "Wed, 21 Oct 2015 07:28:00 GMT") == 0.5  # a date: the backoff
    tries = Tries(get_call("/v2"), retry, lambda line: None)
    tries.next_request(1.0)
    busy = httpx.Response(429, headers={"retry-after": "2"}, content=b'{"error": "queue full"}')
    assert tries.wait_after(busy, None) == 2.0
    with pytest.raises(InvalidInput, match="bad row"):
        tries.wait_after(httpx.Response(400, content=b'{"error": "bad row"}'), None)


def test_the_grpc_client_answers_as_rest_and_retries_a_refusal(served: dict[str, Any]) -> None:
    server: ServerProcess = served["server"]
    rows, expected = served["rows"], served["expected"]
    lines: list[str] = []
    with GrpcClient(server.grpc_address, on_retry=lines.append) as client:
        answer = client.infer("digits-logreg", rows, request_id="g-1", outputs=["label"])
        assert (answer.model, answer.version, answer.id) == ("digits-logreg", "1", "g-1")
        np.testing.assert_array_equal(answer["label"], expected["label"])
        assert list(answer.outputs) == ["label"]
        assert client.live() and client.ready("digits-logreg") and not client.ready("nope")
        assert client.metadata("digits-logreg")["inputs"][0]["shape"] == ["-1", "64"]
        assert "statistics" in client.metadata()["extensions"]
        with pytest.raises(InvalidInput, match=r"expected shape \[-1, 64\], got \[1, 3\]"):
            client.infer("digits-logreg", np.zeros((1, 3)))
    one_row = np.full((1, 4), 0.5, np.float32)
    patient = Retry(attempts=4, backoff=0.01)
    with GrpcClient(server.grpc_address, retry=patient, on_retry=lines.append) as client:
        client.infer("slow", one_row)  # its 0.5 s duration is known
        # refused at once each time (0.5 s cannot fit in 0.3 s), retried until the deadline
        with pytest.raises(Unavailable, match=r"tries: .*deadline cannot be met"):
            client.infer("slow", one_row, timeout=0.3)
    assert lines and all(line.startswith("DEADLINE_EXCEEDED model 'slow@1': ") for line in lines)
    # the class the status's `headway-reason` names, not a bare Unavailable
    with (
        GrpcClient(server.grpc_address, retry=Retry(attempts=1)) as client,
        pytest.raises(DeadlineUnmeetable, match="deadline cannot be met"),
    ):
        client.infer("slow", one_row, timeout=0.3)
