"""A web page cannot change a server on the developer's laptop: the requests a browser sends
for a page of another origin (cross-site request forgery) or for a page whose name was re-pointed
at 127.0.0.1 (DNS rebinding), byte for byte, change nothing, under each HTTP front end, while
tritonclient and httpx beside them load, unload and create applications as before.

The server runs without an admin token (a laptop's default) and allows one origin, whose
preflight and answers get CORS headers.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.http as triton_http

from headway.client import Client
from headway.launcher import ServerProcess, free_port
from tests.integration import models

pytestmark = pytest.mark.integration

TOOLS = "http://tools.example"
UNLOAD = "/v2/repository/models/doubler/unload"


@pytest.fixture(scope="module", params=["native", "uvicorn", "granian"])
def laptop(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("laptop")
    models.python_model(root, "doubler", "Doubler")
    extra = ["--http", request.param, "--allow-origin", TOOLS]
    state = root.parent / f"{root.name}.db"
    # uvicorn does not announce the port it bound, so each is given one
    with ServerProcess(root, state=state, port=free_port(), extra=extra, grpc_port=0) as server:
        yield server


def _raw(server: ServerProcess, request: bytes) -> tuple[int, bytes]:
    """Send `request` as it is (with `Connection: close`); the status and the whole answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1]), answer


def _browser(method: str, path: str, host: bytes, headers: bytes, body: bytes) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\n".encode() + b"Host: " + host + b"\r\n"
        b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0\r\n"
        b"Accept: */*\r\n" + headers
        + b"Content-Length: " + str(len(body)).encode() + b"\r\n"
        b"Connection: close\r\n\r\n" + body
    )  # fmt: skip


def _attacks(port: int) -> list[tuple[bytes, int]]:
    """(the request, the status it must get) for each way a page may try."""
    local = f"127.0.0.1:{port}".encode()
    rebound = f"evil.example:{port}".encode()
    text = b"Content-Type: text/plain;charset=UTF-8\r\n"
    evil = b"Origin: http://evil.example\r\n"
    flow = b'{"flow": "/tmp/evil.py:flow"}'
    return [
        # fetch(..., {method: "POST", mode: "no-cors", body: "{}"}) from another site
        (_browser("POST", UNLOAD, local, evil + text, b"{}"), 403),
        (_browser("PUT", "/apps/pwn", local, evil + text, flow), 403),
        # a sandboxed frame or a file: page
        (_browser("POST", UNLOAD, local, b"Origin: null\r\n" + text, b"{}"), 403),
        # an old browser's form POST, with no Origin header
        (_browser("POST", UNLOAD, local, b"Content-Type: application/x-www-form-urlencoded\r\n", b""), 415),
        (_browser("POST", UNLOAD, local, b"Content-Type: multipart/form-data; boundary=b\r\n", b"--b--\r\n"), 415),
        # DNS rebinding: the page's own name now points at 127.0.0.1; same origin to the browser
        (_browser("POST", UNLOAD, rebound, f"Origin: http://evil.example:{port}\r\n".encode() + b"Content-Type: application/json\r\n", b"{}"), 403),
        (_browser("GET", "/lookups/user-1", rebound, b"", b""), 403),
        # a preflight from a page that is not allowed
        (_browser("OPTIONS", UNLOAD, local, evil + b"Access-Control-Request-Method: POST\r\n", b""), 403),
    ]  # fmt: skip


def test_a_web_page_cannot_unload_a_model_or_name_a_flow(laptop: ServerProcess) -> None:
    url, port = laptop.url, laptop.port
    rows = np.ones((1, 4), np.float32)
    triton = triton_http.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=5.0)

    def legit() -> None:  # a real client's call between two attacks, within its deadline
        request = triton_http.InferInput("input-0", [1, 4], "FP32")
        request.set_data_from_numpy(rows)
        answer = triton.infer("doubler", [request], timeout=5_000_000)
        np.testing.assert_array_equal(answer.as_numpy("output-0"), rows * 2)

    for request, status in _attacks(port):
        legit()
        got, answer = _raw(laptop, request)
        assert got == status, (request, answer)
        # each refusal says what to do: the flag to allow it, or what to send
        assert (b"--allow-" if status == 403 else b"application/json") in answer
    legit()
    # nothing changed
    assert httpx.get(f"{url}/v2/models/doubler/ready", timeout=5).status_code == 200
    assert httpx.get(f"{url}/apps/pwn", timeout=5).status_code == 404


def test_clients_that_are_not_browsers_work_as_before(laptop: ServerProcess) -> None:
    url, port = laptop.url, laptop.port
    triton = triton_http.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=10.0)
    triton.unload_model("doubler")  # a JSON body with no Content-Type
    assert not triton.is_model_ready("doubler")
    triton.load_model("doubler")
    assert triton.is_model_ready("doubler")
    with Client(url, timeout=10) as ours:  # an empty application/json body
        ours.unload("doubler")
        assert not ours.ready("doubler")
        ours.load("doubler")
        assert ours.ready("doubler")
    with httpx.Client(base_url=url, timeout=10) as client:
        created = client.put("/apps/calc", json={"models": ["doubler"], "task": "regression"})
        assert created.status_code == 201, created.text
        assert client.delete("/apps/calc").status_code == 200
        # the server's own pages (its origin) may call it too
        own = client.post(UNLOAD, headers={"origin": url})
        assert own.status_code == 200, own.text
        assert client.post("/v2/repository/models/doubler/load").status_code == 200


def test_an_allowed_origin_gets_cors(laptop: ServerProcess) -> None:
    with httpx.Client(base_url=laptop.url, timeout=10) as client:
        asked = client.options(
            UNLOAD,
            headers={
                "origin": TOOLS,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type",
            },
        )
        assert asked.status_code == 204, asked.text
        assert asked.headers["access-control-allow-origin"] == TOOLS
        assert "POST" in asked.headers["access-control-allow-methods"]
        assert asked.headers["access-control-allow-headers"] == "content-type"
        stats = client.get("/v2/models/stats", headers={"origin": TOOLS})
        assert stats.headers["access-control-allow-origin"] == TOOLS
        other = client.get("/v2/models/stats", headers={"origin": "http://evil.example"})
        assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
