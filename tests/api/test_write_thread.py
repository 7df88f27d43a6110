"""Answers sent by the write thread (`HttpServer(write_thread=True)`), on real loopback sockets.

The app answers each request after a sleep the request names, so that many answers fall due in
one loop turn and go to the thread; large answers make the kernel take part of a send, which
is handed back to the loop's transport. Each test runs on asyncio's loop and on uvloop's (the
one `headway serve` runs).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from headway.api.http import HttpServer
from headway.api.write_thread import OffloadedTransport, WriteThread

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


class SleepyApp:
    """Answers /N/SECONDS/SIZE after SECONDS with SIZE bytes of the digit N % 10 (and its
    path in a header), from a task; /now/N at once."""

    max_body_bytes = 1 << 20

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.seen = 0

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()

    loop_held_until = float("-inf")

    def catch_up(self) -> None:
        pass

    def check_length(self, declared: bytes | None) -> None:
        pass

    def check_size(self, size: int) -> None:
        pass

    def respond(
        self,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        body: bytes,
        reply: Callable[[Any], None],
        received: float | None = None,
    ) -> None:
        self.seen += 1
        name, seconds, _ = parts(path)
        answer = (200, body_of(path), [(b"x-path", path.encode())])
        if name == "now":
            reply(answer)
            return
        task = asyncio.ensure_future(asyncio.sleep(float(seconds)))
        self.tasks.add(task)
        task.add_done_callback(lambda t: reply(answer) if not t.cancelled() else None)


def parts(path: str) -> tuple[str, str, int]:
    _, name, seconds, size = [*path.split("/"), "0", "0", "0"][:4]
    return name, seconds, int(size)


def body_of(path: str) -> bytes:
    name, _, size = parts(path)
    return name[-1].encode() * size


def run(test: Callable[[HttpServer], Awaitable[None]], loop: str, **options: Any) -> None:
    async def main() -> None:
        server = HttpServer(SleepyApp(), port=0, **{"write_thread": True, **options})  # type: ignore[arg-type]
        await server.start()
        try:
            await test(server)
        finally:
            if not server.stopping:
                await server.stop()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


def request(path: str, *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: t", *extra]) + "\r\n\r\n").encode()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:] if line)}
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10)
    return int(lines[0].split()[1]), headers, body


def read_answers(sock: socket.socket, count: int) -> list[tuple[int, str, bytes]]:
    """`count` answers off a blocking socket: status, x-path, body."""
    sock.settimeout(10)
    stream = sock.makefile("rb")
    answers = []
    for _ in range(count):
        status = int(stream.readline().split()[1])
        headers = {}
        while (line := stream.readline()) != b"\r\n":
            name, value = line.decode().rstrip().split(": ", 1)
            headers[name.lower()] = value
        answers.append((status, headers["x-path"], stream.read(int(headers["content-length"]))))
    return answers


def offloaded(server: HttpServer) -> list[OffloadedTransport]:
    return [c.transport for c in server.connections if isinstance(c.transport, OffloadedTransport)]


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("loop", LOOPS)
def test_pipelined_answers_on_many_connections_leave_in_order_through_the_thread(
    loop: str,
) -> None:
    async def test(server: HttpServer) -> None:
        clients = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(8)]
        # per connection, answers fall due in the reverse order of the requests, many at once
        paths = [[f"/{c}{i}/{0.05 * (5 - i):.2f}/{100 * i}" for i in range(6)] for c in range(8)]
        for (_, writer), mine in zip(clients, paths, strict=True):
            writer.write(b"".join(request(p) for p in mine) + request("/now/1"))
        for (reader, _), mine in zip(clients, paths, strict=True):
            for path in [*mine, "/now/1"]:
                status, headers, body = await answer(reader)
                assert (status, headers["x-path"]) == (200, path)
                assert body == body_of(path)
        transports = offloaded(server)
        assert len(transports) == 8
        assert sum(t.sent for t in transports) > 0  # the thread sent some of them
        for _, writer in clients:
            writer.close()

    run(test, loop)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_that_does_not_read_is_not_read_and_gets_every_byte_once_it_does(
    loop: str,
) -> None:
    async def test(server: HttpServer) -> None:
        sock = socket.create_connection(("127.0.0.1", server.port))
        big = 1 << 21  # answers larger than the socket buffers: sends are partial
        paths = [f"/b{i}/0.001/{big}" for i in range(40)]

        def send() -> None:  # two requests at a time (answered in one turn), pipelining on
            for first, second in zip(paths[::2], paths[1::2], strict=True):
                sock.sendall(request(first) + request(second))
                time.sleep(0.005)

        sending = threading.Thread(target=send)
        sending.start()
        await asyncio.sleep(1.0)  # answers fall due while nothing reads them
        (connection,) = server.connections
        transport = connection.transport
        assert isinstance(transport, OffloadedTransport)
        assert connection._paused_reading  # back-pressure: its requests are no longer read
        assert transport.returned > 0  # the kernel did not take all: handed back to the loop
        app = server.app
        # not all were read (the kernel's socket buffers took a few answers too)
        assert isinstance(app, SleepyApp) and app.seen < 30
        answers = await asyncio.to_thread(read_answers, sock, len(paths))
        assert [(status, path) for status, path, _ in answers] == [(200, p) for p in paths]
        assert [body for _, _, body in answers] == [str(i % 10).encode() * big for i in range(40)]
        sending.join()
        sock.close()

    run(test, loop)


@pytest.mark.parametrize("loop", LOOPS)
def test_connection_close_comes_after_every_answer_in_flight_and_nothing_after_it(
    loop: str,
) -> None:
    async def test(server: HttpServer) -> None:
        clients = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(6)]
        for c, (_, writer) in enumerate(clients):
            writer.write(
                b"".join(request(f"/{c}{i}/0.05/{5000 * i}") for i in range(5))
                + request(f"/{c}9/0.05/10", "Connection: close")
                + request("/now/never")  # after the close: never answered
            )
        for c, (reader, _) in enumerate(clients):
            for i in [*range(5), 9]:
                status, headers, _ = await answer(reader)
                assert status == 200 and headers["x-path"].startswith(f"/{c}{i}/")
            assert headers["connection"] == "close"
            assert await asyncio.wait_for(reader.read(), 10) == b""  # end of file, nothing more

    run(test, loop)


@pytest.mark.parametrize("loop", LOOPS)
def test_stop_with_answers_in_flight_sends_them_then_closes_and_leaks_no_socket(
    loop: str,
) -> None:
    async def test(server: HttpServer) -> None:
        before = open_descriptors()
        clients = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(6)]
        for c, (_, writer) in enumerate(clients):
            writer.write(b"".join(request(f"/{c}{i}/0.02/{20000}") for i in range(4))
                         + request(f"/{c}9/30/1"))  # fmt: skip
        await asyncio.sleep(0.3)  # the quick ones are answered; the last is not
        stopping = asyncio.create_task(server.stop())
        for c, (reader, _) in enumerate(clients):
            for i in range(4):
                status, headers, body = await answer(reader)
                assert (status, headers["x-path"], len(body)) == (200, f"/{c}{i}/0.02/20000", 20000)
            status, headers, _ = await answer(reader)
            assert status == 503 and headers["connection"] == "close"
            assert await asyncio.wait_for(reader.read(), 10) == b""
        await stopping
        assert server.writer is not None and not server.writer._thread.is_alive()
        for _, writer in clients:
            writer.close()
        await asyncio.sleep(0.1)
        assert open_descriptors() <= before  # the thread's duplicates are closed

    run(test, loop, grace=0.3)


@pytest.mark.parametrize("loop", LOOPS)
def test_clients_that_leave_with_answers_in_flight_leave_no_socket_open(loop: str) -> None:
    async def test(server: HttpServer) -> None:
        before = open_descriptors()
        for _ in range(3):
            clients = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(8)]
            for c, (_, writer) in enumerate(clients):
                writer.write(b"".join(request(f"/{c}{i}/0.02/50000") for i in range(6)))
            await asyncio.sleep(0.03)
            for _, writer in clients:  # gone while their answers are being sent
                writer.transport.abort()
        for _ in range(100):
            if not server.connections and open_descriptors() <= before:
                break
            await asyncio.sleep(0.05)
        assert not server.connections
        assert open_descriptors() <= before
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request("/now/1") + request("/a1/0.01/3"))  # the server still serves
        assert (await answer(reader))[1]["x-path"] == "/now/1"
        assert (await answer(reader))[2] == b"111"
        writer.close()

    run(test, loop)


def test_a_lone_answer_is_written_by_the_loop_without_the_thread() -> None:
    async def test(server: HttpServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for i in range(5):
            writer.write(request(f"/a{i}/0.01/{i}"))
            status, _, body = await answer(reader)
            assert (status, body) == (200, str(i).encode() * i)
        (transport,) = offloaded(server)
        assert transport.queued == 0  # nothing else was unanswered: written at once
        writer.close()

    run(test, "uvloop")


@pytest.mark.parametrize("loop", LOOPS)
def test_end_of_file_close_and_the_threads_socket_wait_for_the_sends_before_them(
    loop: str,
) -> None:
    async def main() -> None:
        running = asyncio.get_running_loop()
        writer = WriteThread(running, quiet=lambda: False)  # as under load: all to the thread
        outs, peers = [], []
        for _ in range(2):
            ours, theirs = socket.socketpair()
            transport, _ = await running.create_connection(asyncio.Protocol, sock=ours)
            outs.append(writer.wrap(transport))  # type: ignore[arg-type]
            peers.append(theirs)
        eof, lost = outs
        before = open_descriptors()
        for out in outs:  # in one turn: the writes are in flight when the rest comes
            out.write(b"a" * 100_000)
            out.write(b"b" * 100_000)
        eof.write_eof()
        eof.close()
        lost.transport.close()
        lost.lost()  # the loop lost it: its duplicate closes after the two sends
        assert eof._in_flight() and lost._in_flight() and lost._socket is not None
        received = await asyncio.gather(*(asyncio.to_thread(read_all, p) for p in peers))
        assert received == [b"a" * 100_000 + b"b" * 100_000] * 2  # then end of file
        for _ in range(100):
            if lost._socket is None and not eof._in_flight():
                break
            await asyncio.sleep(0.01)
        assert lost._socket is None and eof.transport.is_closing()
        await writer.stop()
        assert open_descriptors() < before
        for peer in peers:
            peer.close()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


def read_all(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)
