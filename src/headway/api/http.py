"""Headway's HTTP/1.1 server: listens, tracks connections and requests in flight, stops.

Its own server rather than ASGI (docs/decisions.md says why): a parsed request becomes one
call, `HeadwayApp.respond(method, path, headers, body, reply)`, and its answer one
`transport.write` from `reply`, with no glue or callback queue in between. Each client is an
`api.connection.HttpConnection`; docs/protocol.md lists what the server supports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
import time
from collections.abc import Callable
from operator import attrgetter

from headway.api.accepting import PendingAccepts
from headway.api.app import HeadwayApp
from headway.api.busy_poll import BusyPoller
from headway.api.closing import reclaim
from headway.api.connection import HttpConnection
from headway.api.limits import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MAX_CONNECTIONS,
    STREAM_BUFFER_BYTES,
    STREAM_IDLE_TIMEOUT_S,
    UNREAD_ANSWERS,
    WRITE_TIMEOUT_S,
    connection_cap,
)
from headway.api.refusals import QuickRefusals
from headway.api.tls import Handshakes
from headway.api.turns import ReadTurns

log = logging.getLogger("headway.http")

#: How often a stopping server looks whether every request in flight has been answered.
STOP_POLL_S = 0.01
#: How long the loop polls for a worker's reply instead of sleeping, when that reply is all it
#: waits for and the model's run is predicted to take no longer (see `expect_reply`).
REPLY_POLL_S = 0.0002
#: Most seconds between two sweeps for idle and slow connections.
SWEEP_S = 1.0
#: Least seconds between two warnings that the connection cap made room (nginx warns "worker
#: connections are not enough, reusing connections" at most once a second).
ROOM_WARNING_S = 1.0


class HttpServer(ReadTurns):
    """Listens, tracks connections and requests in flight, stops gracefully.

    Keep-alive (HTTP/1.1 by default, HTTP/1.0 on request), pipelined requests (answered in
    order), chunked request bodies, `Expect: 100-continue`, gzip and deflate bodies decoded as
    they arrive, 400 on malformed HTTP, back-pressure, the limits of `api.limits`, idle keep-alive
    connections closed after `keep_alive` seconds (and at the connection cap, the longest idle
    for a new one), clients that leave their answers unread closed after `write_timeout`
    seconds or when the server holds `max_unread` bytes of such answers, and a graceful stop:
    stop accepting, let requests in flight finish (up to `grace` seconds), then close."""

    def __init__(
        self,
        app: HeadwayApp,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        keep_alive: float = 30.0,
        grace: float = 10.0,
        backlog: int = 2048,
        busy_poll: float = 0.0,
        reply_poll: float = 0.0,
        header_timeout: float = HEADER_TIMEOUT_S,
        body_timeout: float = BODY_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        tls: ssl.SSLContext | None = None,
        write_timeout: float = WRITE_TIMEOUT_S,
        max_unread: int | None = None,
        stream_buffer: int = STREAM_BUFFER_BYTES,
        stream_idle_timeout: float = STREAM_IDLE_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.tls = tls  # HTTPS: each connection's handshake first (`api.tls`)
        self._handshakes: Handshakes | None = None
        #: Infer requests refused under overload before they are routed (`api.refusals`);
        #: None for an app that is not Headway's (the tests' stand-ins).
        self.refusals: QuickRefusals | None = (
            QuickRefusals(app) if isinstance(app, HeadwayApp) else None
        )
        self.host = host
        self.port = port
        self.keep_alive = keep_alive
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_connections = max_connections
        self.write_timeout = write_timeout
        #: The answer bytes its clients may leave unread, all together (`shed_unread`).
        self.max_unread = max_unread or UNREAD_ANSWERS * app.max_answer_bytes
        self.unread = 0  # the answer bytes its connections count as unread (`HttpConnection`)
        #: Bytes of a streamed answer one client may leave unsent (`api.sse`); seconds a
        #: streamed answer may send nothing.
        self.stream_buffer = stream_buffer
        self.stream_idle_timeout = stream_idle_timeout
        self._room_warned = float("-inf")
        self.grace = grace
        self.backlog = backlog
        self.busy_poll = busy_poll  # seconds the loop polls after a read or an answer
        self.poller: BusyPoller | None = None
        self.reply_poll = reply_poll  # the longest reply wait polled through (`expect_reply`)
        self._reply_poller: BusyPoller | None = None
        self.connections: set[HttpConnection] = set()
        self.unanswered = 0  # requests handed to the app and not yet answered
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._pending: PendingAccepts | None = None  # see `accept_pending`

    async def start(self) -> None:
        """Start the app (workers, models), then listen."""
        self.loop = asyncio.get_running_loop()
        if self.busy_poll > 0:
            self.poller = BusyPoller(self.loop, self.busy_poll)
        elif self.reply_poll > 0:
            self._reply_poller = BusyPoller(self.loop, 0.0)
        self.max_connections = connection_cap(self.max_connections)
        await self.app.start()
        protocol: Callable[[], asyncio.Protocol] = self._connection
        if self.tls is not None:
            self._handshakes = Handshakes(
                self.tls, self._connection, established=self.connections,
                cap=self.max_connections, timeout=self.header_timeout,
                accept_pending=self.accept_pending,
            )  # fmt: skip
            protocol = self._handshakes.protocol
        self._server = await self.loop.create_server(
            protocol, self.host, self.port, backlog=self.backlog, reuse_address=True
        )
        self._sweeper = self.loop.create_task(self._sweep())
        self._pending = PendingAccepts(self.loop, self._server, protocol)
        sockets = self._server.sockets
        if sockets and self.port == 0:
            self.port = sockets[0].getsockname()[1]

    def _connection(self) -> HttpConnection:
        return HttpConnection(self)

    def make_room(self) -> bool:
        """At the connection cap: close the connections idle the longest for a new one
        (`closing.reclaim`); whether any was."""
        closed = reclaim(self.connections)
        if not closed:
            return False
        for connection in closed:  # gone now (their close is immediate: nothing unsent)
            self.connections.discard(connection)
        now = time.monotonic()
        if now - self._room_warned >= ROOM_WARNING_S:
            self._room_warned = now
            log.warning(
                "%d connections open (--max-connections): closed %d idle for new ones",
                self.max_connections, len(closed),
            )  # fmt: skip
        return True

    def shed_unread(self) -> None:
        """The connections hold more unread answer bytes than `max_unread`: drop the ones
        that hold the most until they do not (clients that read their answers hold none)."""
        while self.unread > self.max_unread:
            most = max(self.connections, key=attrgetter("unread"), default=None)
            if most is None or not most.unread:
                return
            most.drop(
                f"it held {most.unread} of the {self.unread} bytes of answers unread by "
                f"clients, more than the server holds ({self.max_unread}: --max-unread-mb)"
            )

    def accept_pending(self) -> None:
        """Accept the connections waiting in the listen queues (`api.accepting`)."""
        if self._pending is not None and not self.stopping:
            self._pending.accept()

    def expect_reply(self, seconds: float, requests: int) -> None:
        """A worker runs `requests` requests, predicted to take `seconds`: when its reply is
        all the loop waits for (no other request unanswered) and the run is short, keep the
        loop turning for up to `reply_poll` until the reply comes instead of sleeping, so that
        no wake-up delays it. Costs at most that much of one core per such wait, and only while
        the server has nothing else to do."""
        poller = self._reply_poller
        if poller is not None and seconds <= self.reply_poll and self.unanswered <= requests:
            poller.arm_for(self.reply_poll)

    def replies_in(self) -> None:
        """No worker is busy any more: stop polling for a reply."""
        if self._reply_poller is not None:
            self._reply_poller.disarm()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    async def stop(self) -> None:
        """Stop accepting, finish what is in flight (up to `grace` s), close, stop the app."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        if self._pending is not None:
            self._pending.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._handshakes is not None:
            self._handshakes.close()
        for connection in list(self.connections):
            if connection.idle:
                connection.close()
        give_up_at = time.monotonic() + self.grace
        while self.unanswered > 0 and time.monotonic() < give_up_at:
            await asyncio.sleep(STOP_POLL_S)
        for connection in list(self.connections):
            connection.give_up()
        await self.app.stop()

    async def serve(self, announce: Callable[[str, HeadwayApp], None] | None = None) -> None:
        """Serve until SIGINT or SIGTERM; `announce(url, app)` once listening."""
        await self.start()
        if announce is not None:
            announce(self.url, self.app)
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                self.loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await self.stop()

    async def _sweep(self) -> None:
        """Close keep-alive connections idle for longer than `keep_alive` seconds, those
        whose request does not arrive within `header_timeout` / `body_timeout` (408), and
        those whose client takes none of its answers for `write_timeout`, and end streamed
        answers idle for `stream_idle_timeout` (`HttpConnection.sweep`)."""
        timeouts = (self.keep_alive, self.header_timeout, self.body_timeout, self.write_timeout)
        every = min(SWEEP_S, *timeouts, self.stream_idle_timeout) / 2
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for connection in list(self.connections):
                connection.sweep(now)
