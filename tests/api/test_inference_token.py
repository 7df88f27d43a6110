"""The inference token before every shortcut: a caller without it gets 401 (REST) or
UNAUTHENTICATED (gRPC) and nothing else, not the quick overload refusal that names the model
and its load (`api.refusals`, `CallRouter._infer_now`). A real controller over `FakeEngine`
workers; the connections read bytes as the servers would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import hpack
import numpy as np
import orjson
from tests.api.http1_wire import YAML, Transport, answers, infer, read
from tests.api.http2_wire import HEADERS, Server, Wire, statuses

from headway.api.app import HeadwayApp
from headway.api.connection import HttpConnection
from headway.api.grpc import frames as f
from headway.api.grpc import messages
from headway.api.grpc.calls import Limits
from headway.api.grpc.http2 import Http2Connection
from headway.api.grpc.server import CallRouter
from headway.api.http import HttpServer
from headway.control.controller import Controller
from headway.repository import Repository
from headway.testing import FakeEngine

TOKEN = "t0ken"


def run(tmp_path: Path, scenario: Callable[[HeadwayApp], Awaitable[None]]) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)

    async def main() -> None:
        engine = FakeEngine(compute=lambda a, t: {"y": t["x"]})
        app = HeadwayApp(
            Controller(Repository.scan(tmp_path), engine), inference_token=TOKEN, admin_token="a"
        )
        await app.start()
        for _ in range(200):  # the warm-up runs answer on their own
            await asyncio.sleep(0)
        try:
            await scenario(app)
        finally:
            await app.stop()

    asyncio.run(main())


def with_token(request: bytes, token: str) -> bytes:
    return request.replace(b"Host: h\r\n", f"Host: h\r\nAuthorization: Bearer {token}\r\n".encode())


def test_a_late_rest_infer_without_the_token_is_a_401_not_the_quick_503(tmp_path: Path) -> None:
    async def scenario(app: HeadwayApp) -> None:
        server = HttpServer(app)
        server.loop = asyncio.get_running_loop()
        transport = Transport()
        connection = HttpConnection(server)
        connection.connection_made(transport)  # type: ignore[arg-type]
        for request in (infer(50), with_token(infer(50), "guess")):
            read(connection, server, request, waited=1.0)  # a second late, 50 ms to live
            status, _, body = answers(transport.data)[-1]
            assert status == "HTTP/1.1 401 Unauthorized", status
            assert b"'m'" not in body and b"overload" not in body
        for token in (TOKEN, "a"):  # the inference token, or the admin token
            read(connection, server, with_token(infer(50), token), waited=1.0)
            status, _, body = answers(transport.data)[-1]
            assert status == "HTTP/1.1 503 Service Unavailable", status
            assert "deadline cannot be met" in orjson.loads(body)["error"]

    run(tmp_path, scenario)


def grpc_infer(stream: int, encoder: hpack.Encoder, token: str | None) -> bytes:
    request = messages.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    request.raw_input_contents.append(np.ones((1, 2), np.float32).tobytes())
    request.parameters["timeout"].int64_param = 50_000
    message = request.SerializeToString()
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    headers = HEADERS + ([(b"authorization", f"Bearer {token}".encode())] if token else [])
    return f.frame(f.HEADERS, f.END_HEADERS, stream, encoder.encode(headers)) + f.frame(
        f.DATA, f.END_STREAM, stream, body
    )


def test_a_late_grpc_infer_without_the_token_is_unauthenticated_not_refused(
    tmp_path: Path,
) -> None:
    async def scenario(app: HeadwayApp) -> None:
        server, wire, encoder = Server(), Wire(), hpack.Encoder()
        connection = Http2Connection(CallRouter(app), Limits(), server)
        connection.connection_made(wire)  # type: ignore[arg-type]
        connection.data_received(f.PREFACE + f.settings({}))
        server.floor = time.monotonic() - 1.0  # read a second after it may have arrived
        for stream, token in ((1, None), (3, "guess"), (5, TOKEN), (7, "a")):
            connection.data_received(grpc_infer(stream, encoder, token))
        answered = statuses(wire)
        for stream in (1, 3):
            status, message = answered[stream]
            assert status == b"16" and b"token" in message and b"'m'" not in message
        for stream in (5, 7):
            status, message = answered[stream]
            assert status == b"4" and b"waited too long to be read" in message
        assert server.unanswered == 0

    run(tmp_path, scenario)


def test_without_an_admin_token_the_inference_token_opens_the_admin_routes(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)

    async def scenario() -> None:
        controller = Controller(Repository.scan(tmp_path), FakeEngine())
        app = HeadwayApp(controller, inference_token=TOKEN)
        await app.start()
        auth = {b"authorization": f"Bearer {TOKEN}".encode()}
        unload = "/v2/repository/models/m/unload"
        assert (await app.handle("POST", unload, {}, b""))[0] == 401
        assert (await app.handle("GET", "/v2/health/live", {}, b""))[0] == 200
        assert (await app.handle("GET", "/v2/models/m", {}, b""))[0] == 401
        assert (await app.handle("GET", "/v2/models/m", auth, b""))[0] == 200
        assert (await app.handle("POST", unload, auth, b""))[0] == 200
        await app.stop()
        both = HeadwayApp(controller, inference_token=TOKEN, admin_token="a")
        assert both.admin_token is not None and not both.admin_token.allows(auth[b"authorization"])
        assert both.inference_token is not None and both.inference_token.allows(b"Bearer a")

    asyncio.run(scenario())
