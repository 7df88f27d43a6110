"""A server that faces a network without a proxy: TLS on both ports and an inference token.

One live server with `--tls-cert/--tls-key` (a certificate from a throwaway CA), an inference
token and an admin token; tritonclient (HTTP and gRPC, with their SSL options) and Headway's
own clients infer over TLS; plain text on a TLS port is closed and the server serves on; a
caller without the token gets 401 / UNAUTHENTICATED and nothing else; and a flood of half-open
handshakes holds at most --max-connections sockets, each closed after --header-timeout, while
real TLS clients beside it are served within their deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from click.testing import CliRunner
from tritonclient.utils import InferenceServerException

import headway
from headway.cli.main import cli
from headway.client import GrpcClient
from headway.errors import Unauthorized
from headway.launcher import ServerProcess, free_port
from tests.integration import models
from tests.integration.certificates import Certificates, issue

pytestmark = pytest.mark.integration

TOKEN = "inference-s3cret"
ADMIN = "admin-s3cret"
#: Small, so that the flood reaches them quickly: connections per port, handshake seconds.
CAP = 24
HANDSHAKE_S = 2.0
#: Each legitimate call's deadline, generous for a busy machine.
DEADLINE_S = 5.0
ROWS = np.arange(8, dtype=np.float32).reshape(2, 4)
#: The first bytes of a TLS ClientHello (a handshake record announcing 512 bytes), and no more.
PARTIAL_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 16


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return issue(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def server(
    certificates: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("tls")
    root = tmp / "repository"
    models.python_model(root, "doubler", "Doubler")
    extra = [
        "--tls-cert", str(certificates.cert), "--tls-key", str(certificates.key),
        "--max-connections", str(CAP), "--header-timeout", str(HANDSHAKE_S),
    ]  # fmt: skip
    env = {"HEADWAY_INFERENCE_TOKEN": TOKEN, "HEADWAY_ADMIN_TOKEN": ADMIN}
    with ServerProcess(
        root, state=tmp / "state.db", log=tmp / "server.log", extra=extra, env=env,
        ca=certificates.ca,
    ) as srv:  # fmt: skip
        yield srv
    log = srv.log.read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def _bearer(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _http_input(rows: np.ndarray = ROWS) -> triton_http.InferInput:
    tensor = triton_http.InferInput("input-0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    return tensor


def _grpc_input(rows: np.ndarray = ROWS) -> triton_grpc.InferInput:
    tensor = triton_grpc.InferInput("input-0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    return tensor


def _triton_http(server: ServerProcess, ca: Path) -> triton_http.InferenceServerClient:
    return triton_http.InferenceServerClient(
        server.url.removeprefix("https://"),
        ssl=True,
        ssl_options={"ca_certs": str(ca)},
        connection_timeout=DEADLINE_S,
        network_timeout=DEADLINE_S,
    )


def _triton_grpc(server: ServerProcess, ca: Path) -> triton_grpc.InferenceServerClient:
    return triton_grpc.InferenceServerClient(
        server.grpc_address, ssl=True, root_certificates=str(ca)
    )


def _alpn(port: int, ca: Path, offered: list[str]) -> str | None:
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(offered)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return tls.selected_alpn_protocol()


def test_the_server_announces_https_and_each_port_its_alpn(
    server: ServerProcess, certificates: Certificates
) -> None:
    assert server.url.startswith("https://")
    assert _alpn(server.port, certificates.ca, ["h2", "http/1.1"]) == "http/1.1"
    assert _alpn(server.grpc_port, certificates.ca, ["h2"]) == "h2"


def test_tritonclient_http_infers_over_tls(
    server: ServerProcess, certificates: Certificates
) -> None:
    client = _triton_http(server, certificates.ca)
    assert client.is_server_live()  # a health probe: no token needed
    answer = client.infer("doubler", [_http_input()], headers=_bearer())
    np.testing.assert_array_equal(answer.as_numpy("output-0"), ROWS * 2)
    assert client.get_model_metadata("doubler", headers=_bearer())["name"] == "doubler"
    client.close()


def test_tritonclient_grpc_infers_over_tls(
    server: ServerProcess, certificates: Certificates
) -> None:
    client = _triton_grpc(server, certificates.ca)
    assert client.is_server_live()
    answer = client.infer("doubler", [_grpc_input()], headers=_bearer(), client_timeout=DEADLINE_S)
    np.testing.assert_array_equal(answer.as_numpy("output-0"), ROWS * 2)
    assert client.get_model_metadata("doubler", headers=_bearer()).name == "doubler"
    client.close()


def test_headway_clients_infer_over_tls(server: ServerProcess, certificates: Certificates) -> None:
    with headway.Client(server.url, inference_token=TOKEN, verify=certificates.ca) as client:
        np.testing.assert_array_equal(client.infer("doubler", ROWS)["output-0"], ROWS * 2)
        assert client.metadata("doubler")["name"] == "doubler"

    async def over_asyncio() -> np.ndarray:
        async with headway.AsyncClient(server.url, token=ADMIN, verify=certificates.ca) as client:
            return (await client.infer("doubler", ROWS))["output-0"]

    np.testing.assert_array_equal(asyncio.run(over_asyncio()), ROWS * 2)
    with GrpcClient(
        server.grpc_address, tls=True, verify=certificates.ca, inference_token=TOKEN
    ) as grpc_client:
        np.testing.assert_array_equal(grpc_client.infer("doubler", ROWS)["output-0"], ROWS * 2)


def test_plain_text_on_a_tls_port_is_closed_and_the_server_serves_on(
    server: ServerProcess, certificates: Certificates
) -> None:
    for port, data in (
        (server.port, b"POST /v2/models/doubler/infer HTTP/1.1\r\nHost: x\r\n\r\n"),
        (server.grpc_port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00" * 2),
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as sock:
            sock.sendall(data)
            assert _closed_within(sock, DEADLINE_S), f"port {port} kept a plain-text peer"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{server.port}/v2/health/live", timeout=DEADLINE_S)
    plain = triton_grpc.InferenceServerClient(server.grpc_address)
    with pytest.raises(InferenceServerException) as refused:
        plain.is_server_live(client_timeout=DEADLINE_S)
    assert refused.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
    plain.close()
    with headway.Client(server.url, inference_token=TOKEN, verify=certificates.ca) as client:
        np.testing.assert_array_equal(client.infer("doubler", ROWS)["output-0"], ROWS * 2)


def test_every_route_but_health_needs_a_token_over_rest(
    server: ServerProcess, certificates: Certificates
) -> None:
    verify = ssl.create_default_context(cafile=str(certificates.ca))
    with httpx.Client(base_url=server.url, verify=verify, timeout=DEADLINE_S) as client:
        body = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                            "data": [1, 2, 3, 4]}]}  # fmt: skip
        for _ in range(3):  # again once the infer path is routed without being split
            for headers, error in (({}, "needs a token"), (_bearer("guess"), "not one of")):
                for method, path in (
                    ("POST", "/v2/models/doubler/infer"),
                    ("POST", "/v2/models/nosuch/infer"),
                    ("GET", "/v2/models/doubler"),
                    ("GET", "/v2/models/doubler/ready"),
                    ("GET", "/v2"),
                    ("GET", "/metrics"),
                    ("POST", "/apps/any/predict"),
                    ("GET", "/no/such/route"),
                ):
                    refused = client.request(method, path, json=body, headers=headers)
                    assert refused.status_code == 401, (method, path, refused.text)
                    assert error in refused.json()["error"]
                    assert refused.headers["www-authenticate"].startswith("Bearer")
            for token in (TOKEN, ADMIN):
                answer = client.post("/v2/models/doubler/infer", json=body, headers=_bearer(token))
                assert answer.status_code == 200, answer.text
        assert client.get("/v2/health/live").status_code == 200
        assert client.get("/v2/health/ready").status_code == 200
        assert client.get("/openapi.json").status_code == 200
        # The admin routes still need the admin token, not the inference token.
        unload = "/v2/repository/models/doubler/unload"
        assert client.post(unload, headers=_bearer(TOKEN)).status_code == 401
    with headway.Client(server.url, verify=certificates.ca) as anonymous:
        with pytest.raises(Unauthorized, match="needs a token"):
            anonymous.infer("doubler", ROWS)
        assert anonymous.live()
    with pytest.raises(InferenceServerException, match="401"):
        _triton_http(server, certificates.ca).infer("doubler", [_http_input()])


def test_every_rpc_but_health_needs_a_token_over_grpc(
    server: ServerProcess, certificates: Certificates
) -> None:
    client = _triton_grpc(server, certificates.ca)
    assert client.is_server_live() and client.is_server_ready()
    for headers in (None, _bearer("guess")):
        for call in (
            partial(client.infer, "doubler", [_grpc_input()], headers=headers),
            partial(client.infer, "nosuch", [_grpc_input()], headers=headers),
            partial(client.get_model_metadata, "doubler", headers=headers),
            partial(client.is_model_ready, "doubler", headers=headers),
            partial(client.get_inference_statistics, headers=headers),
        ):
            with pytest.raises(InferenceServerException) as refused:
                call()
            assert refused.value.status() == "StatusCode.UNAUTHENTICATED"
            assert "token" in str(refused.value.message())
    for token in (TOKEN, ADMIN):
        answer = client.infer("doubler", [_grpc_input()], headers=_bearer(token))
        np.testing.assert_array_equal(answer.as_numpy("output-0"), ROWS * 2)
    client.close()
    with (
        GrpcClient(server.grpc_address, tls=True, verify=certificates.ca) as anonymous,
        pytest.raises(Unauthorized, match="needs a token"),
    ):
        anonymous.infer("doubler", ROWS)


def test_a_flood_of_half_open_handshakes_is_bounded_and_real_clients_are_served(
    server: ServerProcess, certificates: Certificates
) -> None:
    assert server.process is not None
    pid = server.process.pid
    before = _open_files(pid)
    attack: list[socket.socket] = []
    stop = threading.Event()

    def flood() -> None:
        """Half-open handshakes, a few at a time, alternately silent and a partial hello."""
        for k in range(150):
            if stop.is_set():
                return
            port = server.port if k % 2 else server.grpc_port
            sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
            if k % 3 == 0:
                sock.sendall(PARTIAL_HELLO)
            attack.append(sock)
            time.sleep(0.01)

    flooding = threading.Thread(target=flood)
    flooding.start()
    most = 0
    served = 0
    try:
        http_client = _triton_http(server, certificates.ca)
        grpc_client = _triton_grpc(server, certificates.ca)
        with headway.Client(
            server.url, inference_token=TOKEN, verify=certificates.ca, timeout=DEADLINE_S
        ) as client:
            while flooding.is_alive() or served < 3:
                started = time.monotonic()
                answer = http_client.infer("doubler", [_http_input()], headers=_bearer())
                np.testing.assert_array_equal(answer.as_numpy("output-0"), ROWS * 2)
                answer = grpc_client.infer(
                    "doubler", [_grpc_input()], headers=_bearer(), client_timeout=DEADLINE_S
                )
                np.testing.assert_array_equal(answer.as_numpy("output-0"), ROWS * 2)
                np.testing.assert_array_equal(client.infer("doubler", ROWS)["output-0"], ROWS * 2)
                assert time.monotonic() - started < 3 * DEADLINE_S
                served += 1
                most = max(most, _open_files(pid))
        http_client.close()
        grpc_client.close()
        flooding.join()
        most = max(most, _open_files(pid))
        # At most the cap on each port, whatever the flood opened (150 sockets).
        assert most - before <= 2 * CAP + 8, (before, most)
        # Every half-open handshake is closed after the handshake timeout, if not before.
        deadline = time.monotonic() + HANDSHAKE_S + DEADLINE_S
        for sock in attack:
            assert _closed_within(sock, max(0.1, deadline - time.monotonic()))
    finally:
        stop.set()
        flooding.join()
        for sock in attack:
            sock.close()
    # and a new TLS client after the flood is served as ever
    with GrpcClient(
        server.grpc_address, tls=True, verify=certificates.ca, inference_token=TOKEN
    ) as grpc_client:
        np.testing.assert_array_equal(grpc_client.infer("doubler", ROWS)["output-0"], ROWS * 2)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (what it sends first is read away)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            return False
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, ssl.SSLError):
            return True
    return False


def _open_files(pid: int) -> int:
    with contextlib.suppress(FileNotFoundError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return 0


def test_headway_bench_loads_a_tls_server_with_the_token(
    server: ServerProcess, certificates: Certificates, tmp_path: Path
) -> None:
    base = ["bench", "--url", server.url, "--ca-file", str(certificates.ca), "--json"]
    load = ["--model", "doubler", "--concurrency", "2", "--duration", "0.5", "--warmup", "0"]
    result = CliRunner().invoke(cli, [*base, *load, "--token", TOKEN, "--no-progress"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output[result.output.index("{") :])
    assert figures["ok"] > 0 and figures["errors"] == 0 and figures["transport_errors"] == 0
    refused = CliRunner().invoke(cli, [*base, *load])
    assert refused.exit_code == 1 and "needs a token; give --token" in refused.output
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "seconds,model,slo_ms\n" + "".join(f"{k / 20:.2f},doubler,1000\n" for k in range(20))
    )
    replayed = CliRunner().invoke(
        cli, [*base, "--trace", str(trace), "--no-progress"], env={"HEADWAY_INFERENCE_TOKEN": TOKEN}
    )
    assert replayed.exit_code == 0, replayed.output
    figures = json.loads(replayed.output[replayed.output.index("{") :])
    assert figures["requests"] == figures["ok"] == 20


@pytest.mark.parametrize("http", ["uvicorn", "granian"])
def test_uvicorn_and_granian_serve_https_with_the_same_files_and_token(
    http: str, certificates: Certificates, tmp_path: Path
) -> None:
    pytest.importorskip(http)
    root = tmp_path / "repository"
    models.python_model(root, "doubler", "Doubler")
    extra = [
        "--http",
        http,
        "--tls-cert",
        str(certificates.cert),
        "--tls-key",
        str(certificates.key),
    ]
    # neither announces the port it bound: it is given one (port 0 is for Headway's own)
    with ServerProcess(
        root, state=tmp_path / "state.db", port=free_port(), extra=extra, ca=certificates.ca,
        env={"HEADWAY_INFERENCE_TOKEN": TOKEN},
    ) as server:  # fmt: skip
        assert server.url.startswith("https://")
        with headway.Client(server.url, verify=certificates.ca) as anonymous:
            with pytest.raises(Unauthorized):
                anonymous.infer("doubler", ROWS)
            assert anonymous.live()
        with headway.Client(server.url, inference_token=TOKEN, verify=certificates.ca) as client:
            np.testing.assert_array_equal(client.infer("doubler", ROWS)["output-0"], ROWS * 2)
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{server.port}/v2/health/live", timeout=DEADLINE_S)
