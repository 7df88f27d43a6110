"""What a connection answers when overload refuses an infer request before routing it
(`api.refusals`): the 503 the API promises, counted in /metrics, the connection kept or closed as
the client asked, and nothing admitted before it lost. A real controller over `FakeEngine`
workers; the connection reads bytes as the server would, and its requests' wait to be read is set
by the turn of reads they are read in (`ReadTurns.turn_floor`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
from tests.api.http1_wire import YAML, Transport, answers, infer, read

from headway.api.app import HeadwayApp
from headway.api.connection import HttpConnection
from headway.api.http import HttpServer
from headway.control.controller import Controller
from headway.repository import Repository
from headway.testing import FakeEngine

LATE = 'headway_refused_unread_total{model="m",reason="late"}'


def run(tmp_path: Path, scenario: Callable[[HttpServer, HeadwayApp], Awaitable[None]]) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)

    async def main() -> None:
        engine = FakeEngine(compute=lambda a, t: {"y": t["x"]})
        app = HeadwayApp(Controller(Repository.scan(tmp_path), engine))
        await app.start()
        for _ in range(200):  # the warm-up runs answer on their own
            await asyncio.sleep(0)
        server = HttpServer(app)
        server.loop = asyncio.get_running_loop()
        try:
            await scenario(server, app)
        finally:
            await app.stop()

    asyncio.run(main())


async def metric(app: HeadwayApp, name: str) -> float:
    _, text, _ = await app.handle("GET", "/metrics", {}, b"")
    lines = [line for line in text.decode().splitlines() if line.startswith(name)]
    return sum(float(line.split()[-1]) for line in lines)


def test_a_request_read_too_late_gets_the_promised_503_counted_and_the_connection_serves_on(
    tmp_path: Path,
) -> None:
    async def scenario(server: HttpServer, app: HeadwayApp) -> None:
        transport = Transport()
        connection = HttpConnection(server)
        connection.connection_made(transport)  # type: ignore[arg-type]
        read(connection, server, infer(50), waited=1.0)  # a second late for a 50 ms deadline
        [(status, headers, body)] = answers(transport.data)
        assert status == "HTTP/1.1 503 Service Unavailable"
        assert headers["retry-after"] == "1" and headers["content-type"] == "application/json"
        assert "connection" not in headers and not transport.eof
        answer = orjson.loads(body)
        assert answer["reason"] == "late"
        assert answer["error"].startswith("model 'm': deadline cannot be met")
        assert "waited too long to be read" in answer["error"]
        assert await metric(app, LATE) == 1
        # the same connection, a request read at once: served
        transport.data = b""
        read(connection, server, infer(5000), waited=0.0)
        for _ in range(20):
            await asyncio.sleep(0)
        [(status, _, body)] = answers(transport.data)
        assert status == "HTTP/1.1 200 OK", body
        assert orjson.loads(body)["outputs"][0]["data"] == [1, 2]
        assert await metric(app, LATE) == 1

    run(tmp_path, scenario)


def test_a_refused_request_that_closes_its_connection_gets_its_503_and_a_close(
    tmp_path: Path,
) -> None:
    async def scenario(server: HttpServer, app: HeadwayApp) -> None:
        for request, marks in (
            (infer(50, version="1.0"), "HTTP/1.0"),
            (infer(50, close=True), "Connection: close"),
        ):
            transport = Transport()
            connection = HttpConnection(server)
            connection.connection_made(transport)  # type: ignore[arg-type]
            read(connection, server, request + infer(50), waited=1.0)  # the second: unread
            [(status, headers, body)] = answers(transport.data)
            assert status == "HTTP/1.1 503 Service Unavailable", marks
            assert headers["connection"] == "close" and transport.eof, marks
            assert orjson.loads(body)["reason"] == "late", marks
        assert await metric(app, LATE) == 2

    run(tmp_path, scenario)


def test_a_request_admitted_before_a_late_one_on_its_connection_is_answered_first(
    tmp_path: Path,
) -> None:
    """Pipelined: the first request is admitted (its deadline has room for its wait); the one
    after it, which cannot make its deadline, is refused after it, in order, and the admitted
    one is not lost."""

    async def scenario(server: HttpServer, app: HeadwayApp) -> None:
        transport = Transport()
        connection = HttpConnection(server)
        connection.connection_made(transport)  # type: ignore[arg-type]
        read(connection, server, infer(5000) + infer(50), waited=1.0)
        for _ in range(20):
            await asyncio.sleep(0)
        (first, _, served), (second, _, refused) = answers(transport.data)
        assert first == "HTTP/1.1 200 OK", served
        assert orjson.loads(served)["outputs"][0]["data"] == [1, 2]
        assert second == "HTTP/1.1 503 Service Unavailable"
        assert "to be read" in orjson.loads(refused)["error"]  # admission says why
        assert app.controller.model_statistics("m").counts.successes >= 1

    run(tmp_path, scenario)
