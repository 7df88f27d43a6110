"""The real server refuses what it must with a clear 4xx (never a 500), says which methods a
route takes, and its OpenAPI document refuses what the server refuses; the same limits hold
under `--http uvicorn` where uvicorn leaves them to the app."""

from __future__ import annotations

import contextlib
import gzip
import select
import socket
import threading
import time
from collections.abc import Iterator

import grpc
import httpx
import jsonschema
import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from headway.api.openapi import OPENAPI
from headway.launcher import ServerProcess, free_port
from tests.integration import models

pytestmark = pytest.mark.integration

ONE_ROW = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}


def test_a_version_of_thousands_of_digits_is_a_404_not_a_500(server: ServerProcess) -> None:
    version = "9" * 5000
    for answer in (
        httpx.get(f"{server.url}/v2/models/doubler/versions/{version}"),
        httpx.post(f"{server.url}/v2/models/doubler/versions/{version}/infer", json=ONE_ROW),
    ):
        assert answer.status_code == 404, answer.text
        assert "has no version of 5000 digits; it has [1]" in answer.json()["error"]


def test_an_app_naming_a_version_of_thousands_of_digits_is_a_400(server: ServerProcess) -> None:
    answer = httpx.put(f"{server.url}/apps/huge", json={"models": ["doubler@" + "9" * 5000]})
    assert answer.status_code == 400 and "is not a model name like" in answer.json()["error"]


def test_a_405_names_the_allowed_methods_in_allow(server: ServerProcess) -> None:
    for method, path, allowed in (
        ("GET", "/v2/models/doubler/infer", "POST"),
        ("POST", "/v2/models/doubler", "GET"),
        ("GET", "/v2/repository/index", "POST"),
        ("GET", "/v2/repository/models/doubler/load", "POST"),
        ("POST", "/metrics", "GET"),
        ("DELETE", "/openapi.json", "GET"),
        ("DELETE", "/apps", "GET"),
        ("PATCH", "/apps/any", "GET, PUT, DELETE"),
        ("POST", "/lookups/any", "GET, PUT, DELETE"),
    ):
        answer = httpx.request(method, f"{server.url}{path}")
        assert answer.status_code == 405, (method, path, answer.status_code)
        assert answer.headers["allow"] == allowed, (method, path)
        assert f"method {method} not allowed here" in answer.json()["error"]


def test_a_model_that_is_not_ready_answers_with_the_error_key(server: ServerProcess) -> None:
    answer = httpx.get(f"{server.url}/v2/models/broken/ready")
    assert answer.status_code == 400
    body = answer.json()
    assert body["ready"] is False and "weights file is corrupt" in body["reason"]
    assert body["error"].startswith("model 'broken' is not ready: ")
    schema = {"$ref": "#/components/schemas/Error", "components": OPENAPI["components"]}
    jsonschema.validate(body, schema)


def test_the_openapi_document_refuses_what_the_server_refuses(server: ServerProcess) -> None:
    served = httpx.get(f"{server.url}/openapi.json").json()
    assert served == orjson.loads(orjson.dumps(OPENAPI))
    request = {"$ref": "#/components/schemas/InferRequest", "components": served["components"]}
    jsonschema.validate(ONE_ROW, request)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"inputs": []}, request)
    assert httpx.post(f"{server.url}/v2/models/doubler/infer", json={"inputs": []}).is_client_error
    name = served["paths"]["/v2/models/{name}/infer"]["post"]["parameters"][0]["schema"]
    for refused in ("", "a/b", "-x"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(refused, name)
    jsonschema.validate("digits-logreg", name)


def test_a_gzip_bomb_is_413_at_the_decoded_limit_and_the_server_serves_on(
    server: ServerProcess,
) -> None:
    bomb = gzip.compress(b"\0" * 200 * 2**20)  # 200 MB decoded from ~200 kB: --max-body-mb 1
    answer = httpx.post(
        f"{server.url}/v2/models/doubler/infer",
        content=bomb,
        headers={"Content-Encoding": "gzip"},
        timeout=30,
    )
    assert answer.status_code == 413
    assert "gzip-decoded request body exceeds the limit of 1048576 bytes" in answer.json()["error"]
    assert httpx.post(f"{server.url}/v2/models/doubler/infer", json=ONE_ROW).status_code == 200


def test_a_long_url_is_414_and_large_headers_431(server: ServerProcess) -> None:
    assert_url_and_header_limits(server.url)


def assert_url_and_header_limits(url: str) -> None:
    long_url = httpx.get(f"{url}/v2/models/{'m' * 10_000}")
    assert long_url.status_code == 414 and "exceeds the limit of 8192" in long_url.json()["error"]
    large = httpx.get(f"{url}/v2/health/live", headers={f"x-h{k}": "v" * 100 for k in range(200)})
    assert large.status_code == 431 and "exceed the limit of 16384" in large.json()["error"]
    assert httpx.get(f"{url}/v2/health/live").status_code == 200


@pytest.fixture(scope="module")
def uvicorn_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("uvicorn-repository")
    models.python_model(root, "doubler", "Doubler")
    state = tmp_path_factory.mktemp("uvicorn-state") / "state.db"
    log = tmp_path_factory.mktemp("uvicorn-logs") / "server.log"
    extra = ["--http", "uvicorn", "--max-body-mb", "1", "--max-connections", "3"]
    # uvicorn does not announce the port it bound, so it is given one (port 0 is for ours)
    with ServerProcess(root, state=state, port=free_port(), extra=extra, log=log) as srv:
        yield srv


def test_under_uvicorn_bombs_long_urls_and_large_headers_are_refused(
    uvicorn_server: ServerProcess,
) -> None:
    url = uvicorn_server.url
    bomb = gzip.compress(b"\0" * 50 * 2**20)
    headers = {"Content-Encoding": "gzip"}
    answer = httpx.post(f"{url}/v2/models/doubler/infer", content=bomb, headers=headers)
    assert answer.status_code == 413 and "gzip-decoded" in answer.json()["error"]
    assert_url_and_header_limits(url)


def test_under_uvicorn_connections_over_the_cap_are_refused_with_503(
    uvicorn_server: ServerProcess,
) -> None:
    held = [socket.create_connection(("127.0.0.1", uvicorn_server.port)) for _ in range(3)]
    try:
        with httpx.Client(base_url=uvicorn_server.url) as client:
            assert client.get("/v2/health/live").status_code == 503
    finally:
        for sock in held:
            sock.close()
    for _ in range(100):  # until the server has seen them go
        if httpx.get(f"{uvicorn_server.url}/v2/health/live").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError("uvicorn kept refusing after the held connections closed")


# -- attacks on the HTTP/1.1 stack, each with a legitimate client beside it (issue 37) ---------

#: Flags that make each attack quick: a small connection cap, a short write timeout; answers
#: larger than what sockets hold (a client that does not read leaves them to the server).
ARMORED = [
    "--max-connections", "8", "--max-body-mb", "1", "--max-answer-mb", "8",
    "--write-timeout", "1",
]  # fmt: skip
#: How long a legitimate call may take, attack or not.
DEADLINE_S = 5.0
#: A model whose answer is larger than its request (as a segmentation model's): each input
#: row's 4 values, 64 times over.
WIDENER = """
import numpy as np


class Widener:
    def load(self, path):
        pass

    def predict(self, batch):
        return np.repeat(batch, 64, axis=1)
"""


@pytest.fixture(scope="module")
def armored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("armored-repository")
    models.python_model(root, "doubler", "Doubler")
    (root / "widener" / "1").mkdir(parents=True)
    (root / "widener" / "1" / "widener.py").write_text(WIDENER)
    (root / "widener" / "model.yaml").write_text(
        "framework: python\nentrypoint: widener.py:Widener\n"
        "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n"
    )
    state = tmp_path_factory.mktemp("armored-state") / "state.db"
    log = tmp_path_factory.mktemp("armored-logs") / "server.log"
    with ServerProcess(root, state=state, extra=ARMORED, log=log) as srv:
        yield srv


class Beside:
    """A legitimate client calling the server while an attack runs: tritonclient over HTTP,
    a new connection for each call (an idle kept one may be closed for a new client at the
    connection cap, as any server may), each call within DEADLINE_S."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.failures: list[str] = []
        self.calls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Beside:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        while self.calls < 3 and self._thread.is_alive():  # at least a few during the attack
            time.sleep(0.05)
        self._stop.set()
        self._thread.join(DEADLINE_S * 2)
        assert not self.failures, self.failures
        assert self.calls >= 3

    def _run(self) -> None:
        rows = np.arange(8, dtype=np.float32).reshape(2, 4)
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                client = triton_http.InferenceServerClient(
                    self.server.url.removeprefix("http://"),
                    connection_timeout=DEADLINE_S,
                    network_timeout=DEADLINE_S,
                )
                tensor = triton_http.InferInput("input-0", [2, 4], "FP32")
                tensor.set_data_from_numpy(rows)
                answer = client.infer("doubler", [tensor]).as_numpy("output-0")
                client.close()
                np.testing.assert_array_equal(answer, rows * 2)
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            took = time.monotonic() - began
            if took > DEADLINE_S:
                self.failures.append(f"a call took {took:.1f} s")
            self.calls += 1
            self._stop.wait(0.05)


def raw_request(server: ServerProcess, data: bytes) -> tuple[int, bytes]:
    """One request's bytes as written, on a connection of its own: the status and body."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S) as sock:
        sock.sendall(data)
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        status = int(received.split(b" ", 2)[1])
        length = int(received.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
        answer = received.split(b"\r\n\r\n", 1)[1]
        while len(answer) < length:
            answer += sock.recv(65536)
        return status, answer


def infer_head(path: str, length: int, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_stray_crlfs_on_every_connection_lock_no_client_out(armored: ServerProcess) -> None:
    """Sockets that send an empty line now and then held every place of --max-connections (a
    CRLF reset the keep-alive timer): now a few empty lines are allowed, more are refused,
    none is activity, and an idle socket gives its place to a new client."""
    stop = threading.Event()
    refused: list[bytes] = []

    def attacker() -> None:
        while not stop.is_set():
            with socket.create_connection(("127.0.0.1", armored.port), timeout=5) as sock:
                while not stop.is_set():
                    try:
                        sock.sendall(b"\r\n")
                    except OSError:
                        break
                    if select.select([sock], [], [], 0.05)[0]:  # the server answered or closed
                        with contextlib.suppress(OSError):  # (closed as idle, reset)
                            refused.append(sock.recv(4096))
                        break

    attackers = [threading.Thread(target=attacker, daemon=True) for _ in range(8)]
    for thread in attackers:
        thread.start()
    try:
        time.sleep(0.3)  # every place taken
        with Beside(armored):
            time.sleep(2.5)
    finally:  # the attackers stop before the server does, whatever failed
        stop.set()
        for thread in attackers:
            thread.join(5)
    assert any(b"400 Bad Request" in answer and b"empty lines" in answer for answer in refused), (
        refused[:5]
    )


def test_clients_that_do_not_read_their_answers_are_dropped(armored: ServerProcess) -> None:
    """Non-reading clients held their rendered answers past the keep-alive close (a transport
    closes only once its bytes are sent): now they are dropped after --write-timeout, or
    sooner when their unread answers pass their share, and what they left unread with them."""
    # each answer 6 MB (binary), from 96 kB sent; a deadline overload cannot refuse it for
    rows = np.ones((6_000, 4), dtype=np.float32)
    parameters = {"slo_ms": 60_000, "binary_data_output": True}
    one = binary_infer(rows, "widener", parameters=parameters)
    ended: list[tuple[bool, int]] = []

    def attacker(pipelined: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", armored.port))
        sock.sendall(one * pipelined)  # and reads nothing for longer than --write-timeout
        time.sleep(3)
        sock.settimeout(DEADLINE_S)
        received, closed = 0, False
        try:  # then reads: what the server still held, until it closes, or it kept the rest
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
            closed = True
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            pass
        ended.append((closed, received))
        sock.close()

    # 2 answers unread: the write timeout; 4: past a connection's share (2 x --max-answer-mb);
    # all together: past the server's (4 x --max-answer-mb)
    pipelined = (2, 2, 4, 2)
    with Beside(armored):
        attackers = [threading.Thread(target=attacker, args=(n,)) for n in pipelined]
        for thread in attackers:
            thread.start()
            time.sleep(0.1)
        for thread in attackers:
            thread.join(DEADLINE_S * 3)
    assert len(ended) == len(pipelined) and all(closed for closed, _ in ended), ended
    whole = 2 * 6_000 * 256 * 4  # bytes of the answers each left unread, at least
    assert all(received < whole for _, received in ended), ended  # answers dropped


def binary_infer(rows: np.ndarray, model: str = "doubler", **document: object) -> bytes:
    """An infer request with `rows` as a binary tensor, its bytes as sent."""
    raw = rows.tobytes()
    tensor = {"name": "input-0", "shape": list(rows.shape), "datatype": "FP32",
              "parameters": {"binary_data_size": len(raw)}}  # fmt: skip
    header = orjson.dumps({"inputs": [tensor], **document})
    head = infer_head(
        f"/v2/models/{model}/infer",
        len(header) + len(raw),
        f"Inference-Header-Content-Length: {len(header)}",
    )
    return head + header + raw


def test_an_answer_is_asked_for_once_and_within_its_limit(armored: ServerProcess) -> None:
    """Each `outputs` entry was rendered in full, duplicates too (a 51x answer); now a name
    asked for twice is refused, and so is an answer over --max-answer-mb."""
    rows = np.ones((10_000, 4), dtype=np.float32)  # 160 kB sent, 10 MB answered
    grpc_client = triton_grpc.InferenceServerClient(armored.grpc_address)
    binary = {"binary_data_output": True}
    with Beside(armored):
        twice = binary_infer(rows, "widener", outputs=[{"name": "output-0"}] * 50)
        status, answer = raw_request(armored, twice)
        assert status == 400, answer
        assert "output 'output-0' is asked for twice" in orjson.loads(answer)["error"]
        status, answer = raw_request(armored, binary_infer(rows, "widener", parameters=binary))
        assert status == 400, answer
        error = orjson.loads(answer)["error"]
        assert "exceeds the limit of 8388608 bytes (--max-answer-mb)" in error
        fits = binary_infer(rows[:6_000], "widener", parameters=binary)
        assert raw_request(armored, fits)[0] == 200

        tensor = triton_grpc.InferInput("input-0", [2, 4], "FP32")
        tensor.set_data_from_numpy(rows[:2])
        output = triton_grpc.InferRequestedOutput("output-0")
        with pytest.raises(InferenceServerException) as caught:
            grpc_client.infer("widener", [tensor], outputs=[output, output])
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "asked for twice" in str(caught.value.message())
        tensor = triton_grpc.InferInput("input-0", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        with pytest.raises(InferenceServerException) as caught:
            grpc_client.infer("widener", [tensor])
        assert caught.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert "(--max-answer-mb)" in str(caught.value.message())


def test_encoded_slashes_and_empty_segments_route_nowhere(armored: ServerProcess) -> None:
    """`%2F` and `//` routed as separators: a proxy's rule on /v2/repository/ was bypassed."""
    with Beside(armored):
        for path in (
            "/v2%2Frepository%2Fmodels%2Fdoubler%2Funload",
            "/v2/repository%2Fmodels/doubler/unload",
            "/v2//repository/models/doubler/unload",
            "//v2/repository/models/doubler/unload",
        ):
            status, answer = raw_request(armored, infer_head(path, 0))
            assert status == 404, (path, answer)
        assert httpx.get(f"{armored.url}/v2/models/doubler/ready").json()["ready"] is True


def test_under_uvicorn_an_encoded_slash_routes_nowhere(uvicorn_server: ServerProcess) -> None:
    answer = httpx.post(f"{uvicorn_server.url}/v2%2Frepository%2Fmodels%2Fdoubler%2Funload")
    assert answer.status_code == 404, answer.text
    assert httpx.get(f"{uvicorn_server.url}/v2/models/doubler/ready").json()["ready"] is True


def test_an_absolute_form_target_is_served(armored: ServerProcess) -> None:
    """RFC 9112 3.2.2: a server accepts `POST http://host:port/path HTTP/1.1` (it was 404)."""
    body = orjson.dumps(ONE_ROW)
    with Beside(armored):
        status, answer = raw_request(
            armored, infer_head(f"{armored.url}/v2/models/doubler/infer?x=1", len(body)) + body
        )
    assert status == 200, answer
    assert orjson.loads(answer)["outputs"][0]["data"] == [2.0] * 4


def test_bytes_after_a_gzip_body_are_refused(armored: ServerProcess) -> None:
    """A second gzip member, or junk after the stream, was silently ignored."""
    body = orjson.dumps(ONE_ROW)
    with Beside(armored):
        for sent in (gzip.compress(body) + gzip.compress(b"{}"), gzip.compress(body) + b"junk"):
            head = infer_head("/v2/models/doubler/infer", len(sent), "Content-Encoding: gzip")
            status, answer = raw_request(armored, head + sent)
            assert status == 400, answer
            assert "follow the end of its compressed stream" in orjson.loads(answer)["error"]


def test_a_shape_no_array_can_take_is_a_400_and_invalid_argument(armored: ServerProcess) -> None:
    """Shape [2**32, 2**32, 0] was a 500 over REST and INTERNAL over gRPC."""
    shape = [2**32, 2**32, 0]
    body = orjson.dumps(
        {"inputs": [{"name": "input-0", "shape": shape, "datatype": "FP32", "data": []}]}
    )
    request = service_pb2.ModelInferRequest(model_name="doubler")
    request.inputs.add(name="input-0", datatype="FP32", shape=shape)
    request.raw_input_contents.append(b"")
    with Beside(armored):
        status, answer = raw_request(
            armored, infer_head("/v2/models/doubler/infer", len(body)) + body
        )
        assert status == 400, answer
        assert f"shape {shape} is too large" in orjson.loads(answer)["error"]
        with grpc.insecure_channel(armored.grpc_address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelInfer(request, timeout=DEADLINE_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"shape {shape} is too large" in str(caught.value.details())
