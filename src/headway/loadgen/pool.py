"""The hot loop: keep-alive HTTP/1.1 connections on one event loop, driven by callbacks.

Everything per request is a callback, not a coroutine: a connection writes a pre-encoded
request, ``httptools`` parses the answer, and ``on_message_complete`` records it. No futures,
tasks or header dicts are made per request.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections import deque
from time import perf_counter

import httptools
import numpy as np

from headway.loadgen.deadlines import SLACK_S, Late, time_left_ms
from headway.loadgen.tally import LoadTally

REJECTED = (429, 503)


class LoadConnection(asyncio.Protocol):
    """One keep-alive connection with at most one request outstanding."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None  # None once closed
        self.scheduled = 0.0  # perf_counter time the outstanding request was due; 0.0 when idle
        self.measured = False  # the outstanding request is inside the measured window

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.driver.failed(self)

    def on_message_complete(self) -> None:  # httptools callback: a whole answer has arrived
        now = perf_counter()
        d = self.driver
        if not self.scheduled:  # an answer to nothing (say, a 408 on an idle connection)
            d.failed(self)
            return
        if self.measured:
            status = self.parser.get_status_code()
            if status == 200:
                d.ok(now - self.scheduled)
            else:
                d.not_ok(status, now - self.scheduled)
        self.scheduled = 0.0
        d.busy -= 1
        d.answered += 1
        if self.parser.should_keep_alive():
            d.dispatch(self, now)
        else:
            d.close(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.driver.failed(self)


class Driver:
    """Sends on schedule (open loop) or as answers come back (closed loop), and ends the run.

    Closed loop: ``concurrency`` connections, each with one request outstanding, for the duration.
    Open loop: request ``i`` is due at ``start + schedule[i]``; it goes to an idle connection, or to a
    new one (up to ``max_connections``), or, at the cap, waits for one (counted in ``capped``).
    Latency is measured from the *scheduled* time, so a slow server or a full pool shows up in the
    latency instead of slowing the schedule (no coordinated omission). Requests scheduled (open) or
    sent (closed) during the warm-up are sent but not counted. With ``deadline_s`` (open loop,
    `headway.loadgen.deadlines`), a request sent late carries the time it has left, and one with
    none left is not sent (counted as ``expired``)."""

    def __init__(
        self,
        host: str,
        port: int,
        requests: list[bytes],
        concurrency: int | None,
        schedule: np.ndarray | None,
        max_connections: int,
        deadline_s: float | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.host, self.port = host, port
        self.tls = tls  # an https target's
        self.next_request = itertools.cycle(requests).__next__
        self.deadline_s = deadline_s
        if deadline_s is not None:
            self.next_late = itertools.cycle([Late(r) for r in requests]).__next__
        self.closed_loop = concurrency is not None
        self.offsets: list[float] = [] if schedule is None else schedule.tolist()  # seconds
        self.max_connections = max_connections
        self.tally = LoadTally()
        self.ok = self.tally.latencies.append
        self.late = self.tally.lateness.append
        self.own_late = self.tally.own_lateness.append
        self.conns: set[LoadConnection] = set()
        self.idle: list[LoadConnection] = []
        self.backlog: deque[float] = deque()  # open loop: due times waiting for a connection
        self.busy = 0  # requests outstanding
        self.opening = 0  # connections being opened
        self.sent = self.answered = 0
        self.next_due = 0  # open loop: index of the next request in the schedule
        self.next_time = float("inf")  # open loop: when it is due
        self.start = self.window_start = self.end = 0.0
        self.stopping = False
        self.done: asyncio.Future[None] = self.loop.create_future()

    def in_window(self, t: float) -> bool:
        return self.window_start <= t < self.end

    # -- sending -----------------------------------------------------------------------------
    def send(self, conn: LoadConnection, due: float, now: float) -> bool:
        """Write the request due at ``due`` on ``conn``; False if it was not sent because its
        deadline passed in the client (deadline propagation), leaving ``conn`` free."""
        late = now - due
        if self.deadline_s is None or late < SLACK_S:
            data = self.next_request()
        else:
            left_ms = time_left_ms(self.deadline_s, late)
            if left_ms is None:
                if self.window_start <= due < self.end:
                    self.tally.expired += 1
                return False
            data = self.next_late().with_left(left_ms)
        conn.scheduled = due
        conn.measured = measured = self.window_start <= due < self.end
        conn.transport.write(data)  # type: ignore[union-attr]
        self.busy += 1
        self.sent += 1
        if measured:
            if self.closed_loop:
                self.tally.scheduled += 1
            else:
                self.late(late)
        return True

    def dispatch(self, conn: LoadConnection, now: float) -> None:
        """``conn`` is free: give it the next request, or park it."""
        if not self.stopping:
            if self.closed_loop:
                if now < self.end:
                    self.send(conn, now, now)
                    return
            else:
                backlog = self.backlog
                while backlog:
                    if self.send(conn, backlog.popleft(), now):
                        return
                if self.next_time <= now:  # due before the timer fires: send it now
                    self.idle.append(conn)
                    self.send_due(now)
                    return
        self.idle.append(conn)
        self.check_done()

    def send_due(self, now: float) -> None:
        """Open loop: send every request now due, on an idle connection or a new one."""
        offsets, start, i, n = self.offsets, self.start, self.next_due, len(self.offsets)
        window_start, end = self.window_start, self.end
        while i < n and start + offsets[i] <= now:
            due = start + offsets[i]
            i += 1
            if window_start <= due < end:
                self.own_late(now - due)  # when the generator got to it, a connection or not
            if self.idle:
                conn = self.idle.pop()
                if not self.send(conn, due, now):
                    self.idle.append(conn)
                continue
            self.backlog.append(due)
            if len(self.conns) + self.opening < self.max_connections:
                self.open()
            elif window_start <= due < end:
                self.tally.capped += 1
        self.next_due = i
        self.next_time = start + offsets[i] if i < n else float("inf")

    def tick(self) -> None:
        """Open loop timer: send what is due, then sleep until the next request is due.

        The event loop's timers have 1 ms resolution, so a wait under 1 ms is rounded up to
        1 ms rather than spun on; at high rates the answers that arrive meanwhile send the
        requests that fall due (``dispatch``), so sends stay close to their schedule.
        """
        if self.stopping:
            return
        now = perf_counter()
        if self.next_time <= now:
            self.send_due(now)
        if self.next_due < len(self.offsets):
            self.loop.call_later(max(self.next_time - perf_counter(), 0.001), self.tick)
        else:
            self.check_done()

    # -- connections -------------------------------------------------------------------------
    def open(self) -> None:
        self.opening += 1
        self.loop.create_task(self._open())

    async def _open(self) -> None:
        try:
            _, conn = await self.loop.create_connection(
                lambda: LoadConnection(self), self.host, self.port, ssl=self.tls
            )
        except OSError:
            self.opening -= 1
            if self.backlog and not self.stopping:  # the request that wanted it fails
                if self.in_window(self.backlog.popleft()):
                    self.tally.transport_errors += 1
                if self.backlog and len(self.conns) + self.opening < self.max_connections:
                    self.open()
            self.check_done()
            return
        self.opening -= 1
        if self.stopping:
            conn.transport.close()  # type: ignore[union-attr]
            return
        self.conns.add(conn)
        self.tally.peak_connections = max(self.tally.peak_connections, len(self.conns))
        self.dispatch(conn, perf_counter())

    def close(self, conn: LoadConnection) -> None:
        """Close ``conn`` (idle) because the server will not keep it alive."""
        transport, conn.transport = conn.transport, None
        self.conns.discard(conn)
        if transport is not None:
            transport.close()
        self.replace()
        self.check_done()

    def failed(self, conn: LoadConnection) -> None:
        """``conn`` broke; a request outstanding on it failed."""
        transport, conn.transport = conn.transport, None
        if transport is None:
            return  # closed on purpose
        transport.close()
        self.conns.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)
        if conn.scheduled:
            conn.scheduled = 0.0
            self.busy -= 1
            if conn.measured:
                self.tally.transport_errors += 1
        self.replace()
        self.check_done()

    def replace(self) -> None:
        """After losing a connection: closed loop keeps its concurrency; open loop its backlog."""
        if self.stopping:
            return
        if self.closed_loop:
            if perf_counter() < self.end:
                self.open()
        elif self.backlog and len(self.conns) + self.opening < self.max_connections:
            self.open()

    # -- counting and ending -----------------------------------------------------------------
    def not_ok(self, status: int, latency: float) -> None:
        tally = self.tally
        tally.statuses[status] = tally.statuses.get(status, 0) + 1
        if status in REJECTED:
            tally.rejected += 1
            tally.rejections.append(latency)
        else:
            tally.errors += 1

    def check_done(self) -> None:
        if self.done.done() or self.busy or self.opening:
            return
        if self.closed_loop:
            finished = perf_counter() >= self.end
        else:
            finished = self.next_due >= len(self.offsets) and not self.backlog
        if finished:
            self.done.set_result(None)

    def stop(self) -> None:
        """The drain timeout ran out: what is still outstanding or unsent counts as timed out."""
        if self.done.done():
            return
        self.stopping = True
        late = sum(1 for c in self.conns if c.scheduled and c.measured)
        late += sum(1 for d in self.backlog if self.in_window(d))
        late += sum(1 for o in self.offsets[self.next_due :] if self.in_window(self.start + o))
        self.tally.timeouts += late
        self.done.set_result(None)

    def snapshot(self) -> LoadTally:
        self.tally.sent = self.sent
        self.tally.answered = self.answered
        self.tally.connections = len(self.conns)
        self.tally.elapsed = perf_counter() - self.start
        return self.tally
