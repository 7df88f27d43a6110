"""Headway's HTTP/1.1 server over real loopback sockets, with a small app in place of HeadwayApp
(`echo_server.EchoApp`), so that ordering, keep-alive, limits and shutdown are observable byte
for byte on the wire.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import orjson
import pytest
import uvloop
from tests.api.echo_server import EchoApp, connect, request, response, serve

from headway.api.http import HttpServer


def test_a_new_connections_wait_to_be_accepted_counts_against_its_deadline() -> None:
    # While the loop is held by work that is not a read (an inline engine's model run), a new
    # connection and its request wait in the kernel's listen queue: their clock starts then,
    # not when the loop gets round to reading them.
    def client(port: int) -> None:
        time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(request("/r/late"))
            sock.recv(1000)

    async def test(server: HttpServer, app: EchoApp) -> None:
        thread = threading.Thread(target=client, args=(server.port,))
        thread.start()
        time.sleep(0.8)  # holds the loop: the client connects and sends meanwhile
        while "/r/late" not in app.began:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(thread.join)
        assert app.began["/r/late"] - app.received["/r/late"] >= 0.3

    serve(test)


def test_connections_waiting_to_be_accepted_are_all_accepted_in_one_turn() -> None:
    """While each loop turn is long (an inline engine's run on the loop), connections that wait
    in the listen queue are accepted together, not one a turn: uvloop (libuv) accepts one per
    turn, so the eighth new client waited for seven runs before it was read. Counted in turns
    of the loop, on uvloop, the server's loop."""
    clients = 8
    turns = 12
    turn = [0]  # the loop turns held so far
    read_in_turn: dict[str, int] = {}

    class TurnApp(EchoApp):
        def respond(self, method: str, path: str, *rest: Any) -> None:
            read_in_turn[path] = turn[0]
            super().respond(method, path, *rest)

    def hold() -> None:  # a model's run on the loop, back to back, one a turn
        time.sleep(0.01)
        turn[0] += 1
        if turn[0] < turns:
            loop.call_soon(hold)

    async def main() -> None:
        nonlocal loop
        loop = asyncio.get_running_loop()
        server = HttpServer(TurnApp(), port=0)  # type: ignore[arg-type]
        await server.start()
        sockets = []
        try:
            for i in range(clients):  # connected in the kernel, unaccepted, their requests sent
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
                sock.sendall(request(f"/now/{i}"))
                sockets.append(sock)
            loop.call_soon(hold)
            while turn[0] < turns:
                await asyncio.sleep(0.01)
        finally:
            for sock in sockets:
                sock.close()
            await server.stop()

    loop: asyncio.AbstractEventLoop
    uvloop.run(main())
    assert len(read_in_turn) == clients, read_in_turn
    # the first read in the first turn, the others in the next, as if accepted with it (one
    # a turn, the eighth was read in the eighth turn)
    assert max(read_in_turn.values()) <= min(read_in_turn.values()) + 1, read_in_turn


def test_keep_alive_serves_requests_one_after_another_on_one_connection() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        for k in range(3):
            writer.write(request(f"/r/{k}", b"hello %d" % k, "X-A: b"))
            status, headers, body = await response(reader)
            assert status == 200 and "connection" not in headers
            assert headers["content-type"] == "text/json"
            assert orjson.loads(body) == {"method": "POST", "path": f"/r/{k}",
                                          "body": f"hello {k}", "x": "b", "host": "test"}  # fmt: skip
        writer.close()

    app = serve(test)
    assert app.started and app.stopped


def test_pipelined_requests_run_concurrently_and_are_answered_in_order() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(
            request("/sleep/0.3") + request("/sleep/0.2") + request("/third", b"3")
            + request("/now/4")
        )  # fmt: skip
        paths = [orjson.loads((await response(reader))[2])["path"] for _ in range(4)]
        assert paths == ["/sleep/0.3", "/sleep/0.2", "/third", "/now/4"]
        # handled concurrently: the later ones began before the first ended, and ended first;
        # the one answered at once waited for its turn on the wire
        assert app.began["/sleep/0.2"] < app.ended["/sleep/0.3"]
        assert app.ended["/third"] < app.ended["/sleep/0.2"] < app.ended["/sleep/0.3"]
        assert app.ended["/now/4"] < app.ended["/sleep/0.2"]
        writer.close()

    serve(test)


def test_expect_100_continue_gets_the_interim_answer_before_the_body_is_sent() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        head = request("/up", b"", "Expect: 100-continue").replace(b"Length: 0", b"Length: 4")
        writer.write(head)
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        writer.write(b"data")
        status, _, body = await response(reader)
        assert status == 200 and orjson.loads(body)["body"] == "data"
        writer.close()

    serve(test)


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent_and_closes() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(b"POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n")
        status, headers, body = await response(reader)
        assert status == 413 and headers["connection"] == "close"
        assert "5000 bytes exceeds" in orjson.loads(body)["error"]
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        assert app.seen == []  # the app never saw it

    serve(test)


def test_chunked_bodies_are_joined_and_limited_as_they_arrive() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        chunked = b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(chunked + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        status, _, body = await response(reader)
        assert status == 200 and orjson.loads(body)["body"] == "abcde"
        writer.write(chunked + (b"258\r\n" + b"x" * 600 + b"\r\n") * 2)
        status, headers, body = await response(reader)
        assert status == 413 and headers["connection"] == "close"
        writer.close()

    serve(test)


def test_malformed_http_gets_400_and_the_connection_closes() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(b"NOT-HTTP\r\n\r\n")
        status, headers, body = await response(reader)
        assert status == 400 and headers["connection"] == "close"
        assert orjson.loads(body)["error"].startswith("malformed HTTP request")
        assert await asyncio.wait_for(reader.read(), 5) == b""

    serve(test)


def test_http_1_0_closes_unless_asked_to_keep_alive_and_connection_close_is_honoured() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(b"GET /one HTTP/1.0\r\n\r\n")
        status, headers, _ = await response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), 5) == b""

        reader, writer = await connect(server)
        writer.write(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        status, headers, _ = await response(reader)
        assert headers["connection"] == "keep-alive"
        writer.write(request("/b", b"", "Connection: close") + request("/ignored"))
        status, headers, body = await response(reader)
        assert orjson.loads(body)["path"] == "/b" and headers["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert "/ignored" not in [p for _, p, _ in app.seen]

    serve(test)


def test_paths_reach_the_app_as_sent_without_the_query() -> None:
    # Decoding is the routes' (`api.paths`: split first, then decode each segment): decoded
    # here, an encoded '/' would become a separator a proxy in front did not see.
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        for path in ("/v2/models/my%20model/infer", "/v2%2Frepository%2Fmodels//x"):
            writer.write(request(path + "?x=1"))
            status, _, body = await response(reader)
            assert status == 200 and orjson.loads(body)["path"] == path
        writer.close()

    serve(test)


def test_an_absolute_form_target_is_served_with_its_authority_as_the_host() -> None:
    """RFC 9112 3.2.2: a server accepts `http://host:port/path` as a request target, and its
    authority replaces the Host header."""

    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        for target, path, host in (
            ("http://example.test:8000/v2/models/m/infer?x=1", "/v2/models/m/infer", "example.test:8000"),
            ("HTTPS://h/a%2Fb", "/a%2Fb", "h"),
            ("http://h?only=query", "/", "h"),
            ("http://h", "/", "h"),
        ):  # fmt: skip
            writer.write(
                f"POST {target} HTTP/1.1\r\nHost: other\r\nContent-Length: 0\r\n\r\n".encode()
            )
            status, _, body = await response(reader)
            answer = orjson.loads(body)
            assert status == 200 and (answer["path"], answer["host"]) == (path, host), target
        writer.close()
        for target in ("http://user@h/x", "http:///x"):  # userinfo, no host: refused
            reader, writer = await connect(server)
            writer.write(f"GET {target} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
            status, headers, body = await response(reader)
            assert status == 400 and headers["connection"] == "close"
            assert "absolute-form request target needs a host" in orjson.loads(body)["error"]
        assert len(app.seen) == 4

    serve(test)


def test_an_app_that_raises_is_a_500_and_the_connection_keeps_serving() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/boom"))
        status, _, body = await response(reader)
        assert status == 500 and "RuntimeError: a bug in a handler" in orjson.loads(body)["error"]
        writer.write(request("/after"))
        assert (await response(reader))[0] == 200
        writer.close()

    serve(test)


def test_idle_keep_alive_connections_are_closed_after_the_timeout() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/x"))
        assert (await response(reader))[0] == 200
        assert len(server.connections) == 1
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed while idle
        assert not server.connections

    serve(test, keep_alive=0.2)


def test_stop_lets_requests_in_flight_finish_then_stops_the_app() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        busy_reader, busy = await connect(server)
        idle_reader, _ = await connect(server)
        busy.write(request("/sleep/0.3"))
        for _ in range(500):  # until the app has it: stop() then finds it in flight
            if app.seen:
                break
            await asyncio.sleep(0.01)
        stopping = asyncio.create_task(server.stop())
        status, headers, _ = await response(busy_reader)
        assert status == 200 and headers["connection"] == "close"
        assert await asyncio.wait_for(idle_reader.read(), 5) == b""  # idle: closed at once
        await stopping
        assert app.stopped
        try:
            await connect(server)
        except OSError:
            pass
        else:
            raise AssertionError("a stopped server still accepts connections")

    serve(test)


def test_stop_answers_what_outlives_the_grace_with_503_and_counts_nothing_in_flight() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/now/a") + request("/sleep/30") + request("/now/b"))
        assert (await response(reader))[0] == 200
        for _ in range(500):  # until the app has the slow one
            if any(path == "/sleep/30" for _, path, _ in app.seen):
                break
            await asyncio.sleep(0.01)
        assert server.unanswered == 1  # /now/b is answered, but waits for its turn on the wire
        began = time.monotonic()
        stopping = asyncio.create_task(server.stop())
        status, headers, body = await response(reader)
        assert status == 503 and headers["connection"] == "close"
        assert orjson.loads(body) == {"error": "the server is stopping"}
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed: /now/b is dropped
        await stopping
        assert 0.2 <= time.monotonic() - began < 5.0  # after the grace, not the 30 s
        assert app.stopped and server.unanswered == 0

    serve(test, grace=0.2)


def test_a_long_turn_of_reads_lets_the_app_catch_up_every_few_milliseconds() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        clients = [await connect(server) for _ in range(6)]
        clients[0][1].write(request("/now/alone"))
        assert (await response(clients[0][0]))[0] == 200
        assert app.catch_ups == 0  # one read in its turn: nothing to catch up on
        for _, writer in clients:  # six reads in one turn, each holding the loop 3 ms
            writer.write(request("/spin/0.003"))
        for reader, _ in clients:
            assert (await response(reader))[0] == 200
        # Every read after its turn's first finds >= 2 ms gone since the last catch-up: 5
        # when the six are read in one turn (as here), at least 3 however the loop splits them.
        assert app.catch_ups >= 3

    serve(test)


def test_a_server_that_busy_polls_answers_as_usual_and_polls_after_each_answer(
    yields: list[int],
) -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        assert server.poller is not None and server.poller.seconds == pytest.approx(0.5)
        reader, writer = await connect(server)
        for k in range(3):
            before = yields[0]
            writer.write(request(f"/now/{k}", b"x"))
            status, _, body = await response(reader)
            assert status == 200 and b"/now/%d" % k in body
            await asyncio.sleep(0)
            assert server.poller.running  # armed by the read and by the answer
            assert yields[0] > before
        writer.close()
        await asyncio.sleep(0.7)
        assert not server.poller.running

    serve(test, busy_poll=0.5)


def test_a_server_without_busy_polling_has_no_poller() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        assert server.poller is None
        reader, writer = await connect(server)
        writer.write(request("/now/a", b"x"))
        assert (await response(reader))[0] == 200
        writer.close()

    serve(test)
