"""Headway's app behind granian (`headway serve --http granian`): a Rust HTTP server, RSGI.

granian parses HTTP in Rust (hyper) and hands each request to `HeadwayApp` over RSGI, in this
process's event loop, so the controller, its workers and the app are the same as under
Headway's own server; docs/architecture.md says when to choose it. A streamed answer
(server-sent events) goes out through granian's response stream as its events come
(`api.event_pump`), and a client that goes away withdraws its request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any

from headway.api.app import HeadwayApp
from headway.api.errors import Response, error_response, problem
from headway.api.event_pump import EventPump
from headway.api.limits import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    MAX_URL_BYTES,
    STREAM_BUFFER_BYTES,
    STREAM_IDLE_TIMEOUT_S,
    connection_cap,
    headers_too_large,
    uri_too_long,
)
from headway.api.paths import from_decoded
from headway.api.sse import EventStream
from headway.api.tls import ServerTls
from headway.errors import ConfigError, HeadwayError
from headway.launcher import free_port

log = logging.getLogger("headway.http")

#: Bytes granian may buffer for one request head: the URL and header limits, and room for
#: the request line's and the headers' punctuation.
HEAD_BUFFER_BYTES = MAX_URL_BYTES + MAX_HEADER_BYTES + 4096
#: How often a starting server tries whether granian listens yet.
LISTEN_POLL_S = 0.02


def _str_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in headers]


class GranianServer:
    """Serves a `HeadwayApp` on granian's embedded RSGI server until SIGINT or SIGTERM.

    The limits of `api.limits` hold here too, each where it can be enforced: granian bounds the
    request head it buffers (`max_buffer_size`) and the time a head may take to arrive
    (`header_read_timeout`, then the connection is closed); this class answers 414 for a long URL,
    431 for large headers, 413 for a body over `--max-body-mb` (declared, or counted as it streams
    in, decoded size for gzip and deflate), 408 for a body that does not arrive within
    `--body-timeout`, and caps requests in flight at `--max-connections` (granian's
    `backpressure`: more wait in the listen queue rather than being answered 503)."""

    def __init__(
        self,
        app: HeadwayApp,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        header_timeout: float = HEADER_TIMEOUT_S,
        body_timeout: float = BODY_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        tls: ServerTls | None = None,
        stream_buffer: int = STREAM_BUFFER_BYTES,
        stream_idle_timeout: float = STREAM_IDLE_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.host = host
        self.tls = tls  # granian's own TLS (rustls) over the same files
        # granian binds the port itself and does not say which one it got: choose it here
        self.port = port or free_port()
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_connections = max_connections
        self.stream_buffer = stream_buffer
        self.stream_idle_timeout = stream_idle_timeout

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    # -- RSGI ------------------------------------------------------------------------------
    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto != "http":  # websockets are not served
            return
        status, body, headers = await self.answer(scope, protocol)
        if type(body) is EventStream:
            await self._stream(body, protocol.response_stream(status, _str_headers(headers)),
                               protocol)  # fmt: skip
        else:
            protocol.response_bytes(status, _str_headers(headers), body)

    async def _stream(self, stream: EventStream, transport: Any, protocol: Any) -> None:
        """A streamed answer's events as they come, until it ends or the client goes."""
        pump = EventPump(stream, self.stream_buffer, self.stream_idle_timeout)

        async def watch() -> None:
            await protocol.client_disconnect()
            pump.gone()

        watching = asyncio.ensure_future(watch())
        try:
            async for data in pump.pieces():
                await transport.send_bytes(data)
        except (OSError, RuntimeError):  # granian's RSGIProtocolClosed: the client is gone
            pump.gone()
        finally:
            watching.cancel()
            if not stream.ended:
                pump.gone()

    async def answer(self, scope: Any, protocol: Any) -> Response:
        url = len(scope.path) + len(scope.query_string)
        if url > MAX_URL_BYTES:
            return problem(414, uri_too_long(url))
        pairs = scope.headers.items()
        size = sum(len(name) + len(value) for name, value in pairs)
        if size > MAX_HEADER_BYTES:
            return problem(431, headers_too_large(size))
        headers = {name.encode("latin-1"): value.encode("latin-1") for name, value in pairs}
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await self.read_body(headers, protocol)
        except HeadwayError as exc:
            return error_response(exc)
        except TimeoutError:
            return problem(408, f"request body did not arrive within {self.body_timeout:g} s")
        # granian hands over the path decoded: escaped again, it is not decoded twice
        return await self.app.handle(scope.method, from_decoded(scope.path), headers, body)

    async def read_body(self, headers: dict[bytes, bytes], protocol: Any) -> bytes:
        """The body, within the limit: at once when its declared length is within it (granian
        reads no more than declared), else counted (and decoded) piece by piece."""
        declared = headers.get(b"content-length")
        self.app.check_length(declared)
        if declared is not None and b"content-encoding" not in headers:
            return bytes(await protocol())
        return await self.app.read_body(headers, protocol)

    # -- running ---------------------------------------------------------------------------
    def granian(self) -> Any:
        try:
            from granian.constants import HTTPModes, Interfaces, SSLProtocols
            from granian.http import HTTP1Settings
            from granian.server.embed import Server
        except ImportError as exc:
            raise ConfigError(
                f"--http granian needs granian: python -m pip install 'headway[granian]' ({exc})"
            ) from None

        return Server(
            self, address=self.host, port=self.port, interface=Interfaces.RSGI,
            http=HTTPModes.http1, websockets=False, log_enabled=False, runtime_threads=1,
            backpressure=connection_cap(self.max_connections),
            http1_settings=HTTP1Settings(
                header_read_timeout=int(self.header_timeout * 1000),
                max_buffer_size=HEAD_BUFFER_BYTES,
            ),
            ssl_cert=self.tls.cert if self.tls else None,
            ssl_key=self.tls.key if self.tls else None,
            ssl_protocol_min=SSLProtocols.tls12,
        )  # fmt: skip

    async def serve(self, announce: Callable[[str, HeadwayApp], None] | None = None) -> None:
        """Start the app, then granian; serve until SIGINT or SIGTERM; stop both."""
        loop = asyncio.get_running_loop()
        server = self.granian()
        await self.app.start()
        serving = loop.create_task(server.serve())
        try:
            await self._listening(serving)
            if announce is not None:
                announce(self.url, self.app)
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, server.stop)
            await serving
        finally:
            if not serving.done():
                server.stop()
                await serving
            await self.app.stop()

    async def _listening(self, serving: asyncio.Task[None]) -> None:
        """Wait until granian accepts connections (it has no start-up callback)."""
        while not serving.done():
            try:
                _, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                await asyncio.sleep(LISTEN_POLL_S)
                continue
            writer.close()
            return
        serving.result()  # granian failed to start: raise its error
        raise OSError(f"granian stopped before listening on {self.url}")
