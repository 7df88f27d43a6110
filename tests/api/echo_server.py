"""An HTTP/1.1 client and a small app in place of HeadwayApp, for the tests of Headway's HTTP
server over real loopback sockets (`test_http_server`, `test_http_limits`, `test_busy_poll`,
`tests/integration/test_stop`).

The app echoes what the server handed it (method, path, body) and can be told to wait, so that
ordering, keep-alive, limits and shutdown are observable byte for byte on the wire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from headway.api.http import HttpServer
from headway.api.sse import SSE_HEADERS, EventStream, event
from headway.errors import PayloadTooLarge

LIMIT = 1000
#: The largest answer `/big/{bytes}` may ask for (HeadwayApp's `max_answer_bytes`).
ANSWER_LIMIT = 4 * 2**20


class EchoApp:
    """The interface `HttpServer` uses: start/stop, the two size checks and `respond`, which
    answers paths under /now/ at once and the others from a task (as HeadwayApp answers some
    routes at once and others later); `/big/{bytes}` is an answer that large, at once."""

    max_body_bytes = LIMIT
    max_answer_bytes = ANSWER_LIMIT

    def __init__(self) -> None:
        self.started = self.stopped = False
        self.seen: list[tuple[str, str, bytes]] = []
        self.began: dict[str, float] = {}
        self.received: dict[str, float] = {}
        self.created = time.monotonic()  # before the server (so any of its requests) existed
        self.ended: dict[str, float] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.catch_ups = 0
        self.streams: list[EventStream] = []
        self.cancelled: list[str] = []  # the streams whose request was withdrawn

    async def start(self) -> None:
        self.started = True

    loop_held_until = float("-inf")  # it runs nothing on the loop

    def catch_up(self) -> None:
        self.catch_ups += 1

    async def stop(self) -> None:
        self.stopped = True
        for task in self.tasks:
            task.cancel()

    def check_length(self, declared: bytes | None) -> None:
        if declared is not None and int(declared) > LIMIT:
            raise PayloadTooLarge(f"request body of {int(declared)} bytes exceeds {LIMIT}")

    def check_size(self, size: int) -> None:
        if size > LIMIT:
            raise PayloadTooLarge(f"request body exceeds {LIMIT} bytes")

    def respond(
        self,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        body: bytes,
        reply: Callable[[Any], None],
        received: float | None = None,
    ) -> None:
        if path == "/boom":
            raise RuntimeError("a bug in a handler")
        if path.startswith("/spin/"):  # a request that holds the loop (a long turn of reads)
            time.sleep(float(path.rsplit("/", 1)[1]))
            path = "/now" + path
        if path.startswith("/big/"):  # an answer of that many bytes, at once
            reply((200, b"x" * int(path.rsplit("/", 1)[1]), []))
            return
        if path.startswith("/stream/"):  # `/stream/{events}/{bytes}/{every seconds}`
            self._stream(path, reply)
            return
        if path.startswith("/now/"):
            self.seen.append((method, path, body))
            self.began[path] = self.ended[path] = time.monotonic()
            reply((200, orjson.dumps({"method": method, "path": path}), []))
            return
        task = asyncio.ensure_future(self.handle(method, path, headers, body, received))
        self.tasks.add(task)
        task.add_done_callback(lambda t: reply(t.result()) if not t.cancelled() else None)

    def _stream(self, path: str, reply: Callable[[Any], None]) -> None:
        """A streamed answer of that many events of that size, one every so often (0 events:
        until cancelled; a negative size: send nothing, ever)."""
        count, size, every = path.split("/")[2:5]
        stream = EventStream(
            on_cancel=lambda: self.cancelled.append(path),
            error_event=lambda message: event(orjson.dumps({"error": message}), b"error"),
        )
        self.streams.append(stream)
        reply((200, stream, SSE_HEADERS))
        loop = asyncio.get_running_loop()

        def send(number: int) -> None:
            if stream.ended:
                return
            if int(count) and number >= int(count):
                stream.end(event(b"[DONE]"))
                return
            stream.send(event(b"%d:" % number + b"x" * int(size)))
            loop.call_later(float(every), send, number + 1)

        if int(size) >= 0:
            send(0)

    async def handle(
        self,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None = None,
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        # when the request's bytes were read: on the monotonic clock, after the server began and
        # before the app saw it (how long before depends on the machine's load: not asserted)
        assert received is not None and self.created <= received <= time.monotonic()
        self.received[path] = received
        self.seen.append((method, path, body))
        self.began[path] = time.monotonic()
        if path.startswith("/sleep/"):
            await asyncio.sleep(float(path.rsplit("/", 1)[1]))
        self.ended[path] = time.monotonic()
        answer = {
            "method": method,
            "path": path,
            "body": body.decode(),
            "x": headers.get(b"x-a"),
            "host": headers.get(b"host"),
        }
        return 200, orjson.dumps(answer, default=bytes.decode), [(b"content-type", b"text/json")]


def serve(test: Callable[[HttpServer, EchoApp], Awaitable[None]], **options: Any) -> EchoApp:
    app = EchoApp()

    async def main() -> None:
        server = HttpServer(app, port=0, **options)  # type: ignore[arg-type]
        await server.start()
        try:
            await test(server, app)
        finally:
            if not server.stopping:
                await server.stop()

    asyncio.run(main())
    return app


async def connect(server: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response off the wire: status, headers (lower-case names), body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:] if line)
    headers = {k.lower(): v for k, v in headers.items()}
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return status, headers, body


def request(path: str, body: bytes = b"", *extra: str, method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
