"""`headway serve --http granian`: Headway's app behind granian answers as Headway's own server
does, on the same repository, and keeps the same limits."""

from __future__ import annotations

import gzip
import socket
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from headway.launcher import ServerProcess
from tests.integration import models

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def granian_pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, ServerProcess, np.ndarray]]:
    """The default server and the granian one, each over its own copy of one repository."""
    root = tmp_path_factory.mktemp("granian-repository")
    rows, _ = models.digits_logreg(root)
    models.python_model(root, "doubler", "Doubler")
    logs = tmp_path_factory.mktemp("granian-logs")
    state = tmp_path_factory.mktemp("granian-state")
    extra = ["--max-body-mb", "1", "--workers", "1"]
    with (
        ServerProcess(root, state=state / "native.db", extra=extra, log=logs / "native.log") as a,
        ServerProcess(
            root,
            state=state / "granian.db",
            extra=[*extra, "--http", "granian", "--header-timeout", "1", "--body-timeout", "1"],
            log=logs / "granian.log",
        ) as b,
    ):
        yield a, b, rows


def infer(url: str, model: str, rows: np.ndarray) -> httpx.Response:
    body = {"inputs": [{"name": "input-0", "shape": list(rows.shape), "datatype": "FP64",
                        "data": rows.ravel().tolist()}]}  # fmt: skip
    return httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)


def test_an_inference_answer_equals_the_default_servers(
    granian_pair: tuple[ServerProcess, ServerProcess, np.ndarray],
) -> None:
    native, granian, rows = granian_pair
    want, got = (
        infer(native.url, "digits-logreg", rows[:5]),
        infer(granian.url, "digits-logreg", rows[:5]),
    )
    assert want.status_code == got.status_code == 200, got.text
    assert got.json()["outputs"] == want.json()["outputs"]
    assert got.json()["outputs"][0]["name"] == "label"
    assert got.headers["content-type"] == want.headers["content-type"]


def test_over_the_body_limit_is_a_413_declared_or_decoded(
    granian_pair: tuple[ServerProcess, ServerProcess, np.ndarray],
) -> None:
    url = granian_pair[1].url + "/v2/models/doubler/infer"
    big = httpx.post(url, content=b"[" + b"0," * 2**20 + b"0]")
    assert big.status_code == 413 and "exceeds the limit of 1048576" in big.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams in
        yield from (b" " * 2**16 for _ in range(40))

    streamed = httpx.post(url, content=chunks())
    assert streamed.status_code == 413, streamed.text
    bomb = httpx.post(url, content=gzip.compress(b"\0" * 50 * 2**20),
                      headers={"Content-Encoding": "gzip"})  # fmt: skip
    assert bomb.status_code == 413 and "gzip-decoded" in bomb.json()["error"]


def test_an_unknown_model_or_route_is_a_404_and_long_heads_are_refused(
    granian_pair: tuple[ServerProcess, ServerProcess, np.ndarray],
) -> None:
    url = granian_pair[1].url
    missing = infer(url, "no-such-model", np.zeros((1, 64)))
    assert missing.status_code == 404 and "no-such-model" in missing.json()["error"]
    assert httpx.get(f"{url}/no/such/route").status_code == 404
    long_url = httpx.get(f"{url}/v2/models/{'m' * 10_000}")
    assert long_url.status_code == 414 and "exceeds the limit of 8192" in long_url.json()["error"]
    large = httpx.get(f"{url}/v2/health/live", headers={f"x-h{k}": "v" * 1000 for k in range(20)})
    assert large.status_code == 431 and "exceed the limit of 16384" in large.json()["error"]
    # granian's parser takes at most 100 headers; it refuses more itself (431, no body)
    many = httpx.get(f"{url}/v2/health/live", headers={f"x-h{k}": "v" for k in range(200)})
    assert many.status_code == 431
    assert httpx.get(f"{url}/v2/health/live").status_code == 200


def test_a_slow_body_is_a_408_and_a_slow_head_is_closed(
    granian_pair: tuple[ServerProcess, ServerProcess, np.ndarray],
) -> None:
    port = granian_pair[1].port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /v2/models/doubler/infer HTTP/1.1\r\nHost: h\r\n"
                     b"Content-Length: 100\r\n\r\n{\"inputs\"")  # fmt: skip
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in answer
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: h\r\n")  # the head never ends
        assert sock.recv(4096) == b""  # closed by the server, not by the 30 s client timeout
