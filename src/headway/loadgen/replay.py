"""The trace replay's hot loop: keep-alive connections on one uvloop event loop, callbacks only.

Like ``headway.loadgen.pool`` (no futures, tasks or header dicts per request), but each request
has its own pre-encoded path and body, is due at its own time, and a non-200 answer keeps its
body so that the caller can say why it was rejected. Request ``i`` is due at ``start +
offsets[i]``; it goes to an idle connection, or a new one (up to ``cap``), or waits for one
(counted in ``capped``). Its latency counts from the time it was due.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter, time

import httptools
import numpy as np
import orjson

from headway.loadgen.client import Target


@dataclass
class TraceProgress:
    sent: int
    answered: int
    ok: int
    total: int
    elapsed: float


class ReplayConnection(asyncio.Protocol):
    """One keep-alive connection with at most one request outstanding (`index`, or -1)."""

    def __init__(self, driver: ReplayDriver) -> None:
        self.driver = driver
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.index = -1
        self.chunks: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.driver.broken(self)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        body, self.chunks = self.chunks, []
        self.driver.answered(self, self.parser.get_status_code(), body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.driver.broken(self)


class ReplayDriver:
    """Sends each request when due and records its answer. See the module docstring."""

    def __init__(self, target: Target, offsets: list[float], wires: list[bytes], cap: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.target, self.offsets, self.wires, self.cap = target, offsets, wires, cap
        n = len(offsets)
        self.status = np.zeros(n, dtype=np.int16)
        self.latency = np.full(n, np.nan)
        self.lateness = np.full(n, np.nan)
        self.messages: dict[int, str] = {}
        self.conns: set[ReplayConnection] = set()
        self.idle: list[ReplayConnection] = []
        self.backlog: deque[int] = deque()
        self.next = self.busy = self.opening = self.sent = self.answers = self.ok = 0
        self.peak = self.capped = 0
        self.start = 0.0
        self.stopping = False
        self.done: asyncio.Future[None] = self.loop.create_future()

    def send(self, conn: ReplayConnection, i: int, now: float) -> None:
        conn.index = i
        conn.transport.write(self.wires[i])  # type: ignore[union-attr]
        self.lateness[i] = now - (self.start + self.offsets[i])
        self.busy += 1
        self.sent += 1

    def send_due(self, now: float) -> None:
        offsets, start, i, n = self.offsets, self.start, self.next, len(self.offsets)
        while i < n and start + offsets[i] <= now:
            if self.idle:
                self.send(self.idle.pop(), i, now)
            else:
                self.backlog.append(i)
                if len(self.conns) + self.opening < self.cap:
                    self.open()
                else:
                    self.capped += 1
            i += 1
        self.next = i

    def tick(self) -> None:
        if self.stopping:
            return
        self.send_due(perf_counter())
        if self.next < len(self.offsets):
            wait = self.start + self.offsets[self.next] - perf_counter()
            self.loop.call_later(max(wait, 0.001), self.tick)  # timers have 1 ms resolution
        self.check_done()

    def answered(self, conn: ReplayConnection, status: int, body: list[bytes]) -> None:
        now, i = perf_counter(), conn.index
        if i < 0:  # an answer to nothing (say, a 408 on an idle connection)
            return self.broken(conn)
        conn.index = -1
        self.status[i] = status
        self.latency[i] = now - (self.start + self.offsets[i])
        self.busy -= 1
        self.answers += 1
        if status == 200:
            self.ok += 1
        else:
            self.messages[i] = _error_text(b"".join(body))
        if conn.parser.should_keep_alive():
            self.dispatch(conn, now)
        else:
            self.close(conn)

    def dispatch(self, conn: ReplayConnection, now: float) -> None:
        if self.stopping:
            return
        if self.backlog:
            return self.send(conn, self.backlog.popleft(), now)
        self.idle.append(conn)
        if self.next < len(self.offsets) and self.start + self.offsets[self.next] <= now:
            self.send_due(now)
        self.check_done()

    def open(self) -> None:
        self.opening += 1
        self.loop.create_task(self._open())

    async def _open(self) -> None:
        try:
            _, conn = await self.loop.create_connection(
                lambda: ReplayConnection(self),
                self.target.host,
                self.target.port,
                ssl=self.target.tls,
            )
        except OSError:
            self.opening -= 1
            if self.backlog and not self.stopping:  # the request that wanted it fails
                self.status[self.backlog.popleft()] = -1
            self.check_done()
            return
        self.opening -= 1
        if self.stopping:
            conn.transport.close()  # type: ignore[union-attr]
            return
        self.conns.add(conn)
        self.peak = max(self.peak, len(self.conns))
        self.dispatch(conn, perf_counter())

    def close(self, conn: ReplayConnection) -> None:
        transport, conn.transport = conn.transport, None
        self.conns.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)
        if transport is not None:
            transport.close()
        if self.backlog and not self.stopping and len(self.conns) + self.opening < self.cap:
            self.open()
        self.check_done()

    def broken(self, conn: ReplayConnection) -> None:
        if conn.transport is None:
            return  # closed on purpose
        if conn.index >= 0:
            self.status[conn.index] = -1
            conn.index = -1
            self.busy -= 1
        self.close(conn)

    def check_done(self) -> None:
        if self.done.done() or self.busy or self.opening or self.backlog:
            return
        if self.next >= len(self.offsets):
            self.done.set_result(None)

    def stop(self) -> None:
        """The drain timeout ran out: what is unanswered keeps status 0."""
        self.stopping = True
        if not self.done.done():
            self.done.set_result(None)


def _error_text(body: bytes) -> str:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace")[:500]
    return str(parsed.get("error", parsed)) if isinstance(parsed, dict) else str(parsed)


async def replay(
    target: Target,
    offsets: list[float],
    wires: list[bytes],
    cap: int,
    warm: int,
    drain_timeout: float,
    progress: Callable[[TraceProgress], None] | None,
) -> tuple[ReplayDriver, float]:
    loop = asyncio.get_running_loop()
    d = ReplayDriver(target, offsets, wires, cap)
    opened = await asyncio.gather(
        *(loop.create_connection(lambda: ReplayConnection(d), target.host, target.port,
                                 ssl=target.tls)
          for _ in range(max(1, min(cap, warm)))),
        return_exceptions=True,
    )  # fmt: skip
    for result in opened:
        if isinstance(result, BaseException):
            if not isinstance(result, OSError):
                raise result
        else:
            d.conns.add(result[1])
            d.idle.append(result[1])
    if not d.conns:
        error = next(r for r in opened if isinstance(r, BaseException))
        raise ConnectionError(f"cannot connect to {target.host}:{target.port}: {error}")
    d.peak = len(d.conns)
    d.start, started_at = perf_counter() + 0.01, time() + 0.01
    loop.call_later(0.01, d.tick)
    last = offsets[-1] if offsets else 0.0
    stopper = loop.call_later(0.01 + last + drain_timeout, d.stop)

    def report() -> None:
        if progress is not None and not d.done.done():
            progress(TraceProgress(d.sent, d.answers, d.ok, len(offsets), perf_counter() - d.start))
            loop.call_later(0.25, report)

    loop.call_later(0.25, report)
    await d.done
    stopper.cancel()
    d.stopping = True
    for conn in list(d.conns):
        transport, conn.transport = conn.transport, None
        if transport is not None:
            transport.close()
    return d, started_at
