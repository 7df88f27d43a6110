"""`HeadwayApp` as an ASGI application, for uvicorn (`headway serve --http uvicorn`) and any
other ASGI server.

An ASGI server hands the app a scope and a body that arrives in messages; this adapter applies
the URL and header limits the server leaves to the app (414, 431), reads the body within the
body limit, and answers through `HeadwayApp.handle`; a streamed answer (server-sent events)
goes out piece by piece through an `EventPump`, within the same stream bounds as Headway's own
server, and a client's `http.disconnect` withdraws its request. Its lifespan messages start and
stop the app. Headway's own server (`api.http`) calls the app directly, without this glue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from headway.api.app import HeadwayApp
from headway.api.errors import Response, error_response, problem
from headway.api.event_pump import EventPump
from headway.api.limits import (
    MAX_HEADER_BYTES,
    MAX_URL_BYTES,
    STREAM_BUFFER_BYTES,
    STREAM_IDLE_TIMEOUT_S,
    headers_too_large,
    uri_too_long,
)
from headway.api.paths import from_decoded
from headway.api.sse import EventStream
from headway.errors import HeadwayError

log = logging.getLogger("headway.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class AsgiApp:
    """The ASGI application over a `HeadwayApp`."""

    def __init__(
        self,
        app: HeadwayApp,
        stream_buffer: int = STREAM_BUFFER_BYTES,
        stream_idle_timeout: float = STREAM_IDLE_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.stream_buffer = stream_buffer
        self.stream_idle_timeout = stream_idle_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            status, payload, extra = await self.answer(scope, receive)
            await send({"type": "http.response.start", "status": status, "headers": extra})
            if type(payload) is EventStream:
                await self._stream(payload, receive, send)
            else:
                await send({"type": "http.response.body", "body": payload})
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _stream(self, stream: EventStream, receive: Receive, send: Send) -> None:
        """A streamed answer's events as body pieces until it ends or the client goes."""
        pump = EventPump(stream, self.stream_buffer, self.stream_idle_timeout)

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            pump.gone()

        watching = asyncio.ensure_future(watch())
        try:
            async for data in pump.pieces():
                await send({"type": "http.response.body", "body": data, "more_body": True})
            if not stream.cancelled:
                await send({"type": "http.response.body", "body": b""})
        except OSError:  # a server that raises on a send to a client that is gone
            pump.gone()
        finally:
            watching.cancel()
            if not stream.ended:  # this task was cancelled: the server dropped the request
                pump.gone()

    async def answer(self, scope: Scope, receive: Receive) -> Response:
        """The answer to one HTTP request."""
        refused = head_refused(scope)
        if refused is not None:
            return refused
        headers = dict(scope["headers"])
        try:
            body = await self._read_body(headers, receive)
        except HeadwayError as exc:
            return error_response(exc)
        return await self.app.handle(scope["method"], raw_path(scope), headers, body)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.app.start()
                except Exception as exc:
                    log.exception("start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.app.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _read_body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        """The body, decoded (gzip, deflate) as it arrives, within the body limit."""
        self.app.check_length(headers.get(b"content-length"))

        async def pieces() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                yield message.get("body", b"")
                if not message.get("more_body"):
                    return

        return await self.app.read_body(headers, pieces())


def raw_path(scope: Scope) -> str:
    """The path as sent (`api.paths`): ASGI's `raw_path`, or where a server gives none, its
    decoded `path` escaped again."""
    raw = scope.get("raw_path")
    if raw is None:
        return from_decoded(scope["path"])
    return bytes(raw).decode("latin-1")


def head_refused(scope: Scope) -> Response | None:
    """An ASGI server's request whose URL or headers are over `api.limits` (414, 431)."""
    url = len(scope.get("raw_path") or scope["path"]) + len(scope.get("query_string", b""))
    if url > MAX_URL_BYTES:
        return problem(414, uri_too_long(url))
    size = sum(len(name) + len(value) for name, value in scope["headers"])
    if size > MAX_HEADER_BYTES:
        return problem(431, headers_too_large(size))
    return None
