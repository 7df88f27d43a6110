"""Streamed answers (server-sent events, `api.sse`) on Headway's HTTP/1.1 server over real
loopback sockets: events written as chunks as they come, the answers pipelined behind a
stream, and every bound on a stream with the attack it stops: a reader that stops reading
mid-stream, one that takes nothing for the write timeout, a client that disconnects, a stream
that sends nothing. Each time the stream's request is withdrawn, and other clients are served."""

from __future__ import annotations

import asyncio
import socket
import time

from tests.api.echo_server import EchoApp, connect, request, response, serve

from headway.api.http import HttpServer


async def head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = data.decode().split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:] if line)}
    return int(lines[0].split()[1]), headers


async def chunks(reader: asyncio.StreamReader) -> list[bytes]:
    """A chunked body's chunks, until its last (empty) one."""
    out = []
    while True:
        size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 5)).strip(), 16)
        data = await asyncio.wait_for(reader.readexactly(size + 2), 5)
        if not size:
            return out
        out.append(data[:-2])


async def served(server: HttpServer) -> None:
    reader, writer = await connect(server)
    writer.write(request("/now/other"))
    assert (await response(reader))[0] == 200
    writer.close()


async def until(condition: object, seconds: float = 10.0) -> None:
    ends = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < ends, "timed out"
        await asyncio.sleep(0.01)


def test_events_are_chunks_as_they_come_and_pipelined_answers_follow_the_stream() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/stream/3/2/0.01") + request("/now/after"))
        status, headers = await head(reader)
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        assert headers["content-type"] == "text/event-stream" and "content-length" not in headers
        assert await chunks(reader) == [
            b"data: 0:xx\n\n",
            b"data: 1:xx\n\n",
            b"data: 2:xx\n\n",
            b"data: [DONE]\n\n",
        ]
        assert (await response(reader))[0] == 200  # the next answer, on the same connection
        assert app.cancelled == []
        writer.close()

    serve(test)


def test_a_stream_to_an_http10_client_runs_until_the_connection_closes() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(b"POST /stream/2/1/0 HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        status, headers = await head(reader)
        assert status == 200
        assert headers["connection"] == "close" and "transfer-encoding" not in headers
        body = await asyncio.wait_for(reader.read(), 5)
        assert body == b"data: 0:x\n\ndata: 1:x\n\ndata: [DONE]\n\n"

    serve(test)


def test_a_client_that_disconnects_mid_stream_has_its_request_withdrawn() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/stream/0/10/0.01"))
        await head(reader)
        await reader.readuntil(b"\n\n")
        writer.close()
        await until(lambda: app.cancelled == ["/stream/0/10/0.01"])
        await served(server)

    serve(test)


def test_a_reader_that_stops_reading_mid_stream_is_cut_off_at_the_stream_buffer() -> None:
    """The attack: open a stream of a fast model and never read it. Before the bound the
    server buffered every event for the write timeout; now it holds `stream_buffer` bytes."""

    async def test(server: HttpServer, app: EchoApp) -> None:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(request("/stream/0/16384/0.001"))  # events of 16 KiB, as fast as can be
        await until(lambda: app.cancelled != [])
        await served(server)  # others are served meanwhile, and after
        assert app.streams[0].cancelled
        sock.close()

    serve(test, stream_buffer=256 * 1024)


def test_a_reader_that_takes_nothing_for_the_write_timeout_is_cut_off() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(request("/stream/0/16384/0.005"))
        await until(lambda: app.cancelled != [])
        await served(server)
        sock.close()

    serve(test, write_timeout=0.5, stream_buffer=2**30)  # the write timeout alone cuts it


def test_a_stream_that_sends_nothing_ends_with_an_error_event_and_is_withdrawn() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/stream/0/-1/0") + request("/now/after"))
        await head(reader)
        [error] = await chunks(reader)
        assert error.startswith(b"event: error\ndata: ") and b"--stream-idle-timeout" in error
        assert app.cancelled == ["/stream/0/-1/0"]
        assert (await response(reader))[0] == 200  # the connection goes on
        writer.close()

    serve(test, stream_idle_timeout=0.3)
