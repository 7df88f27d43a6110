"""Ending client connections without losing an answer: the lingering close, and the idle
connections closed to make room at the connection cap.

Closing a socket with the client's input unread resets the connection, and the reset can reach
the client before it has read the answer. So a connection closed after an answer (a refusal,
`connection: close`, one turned away at the connection cap) sends EOF after the answer,
discards what the client still sends for `LINGER_S`, then closes (as nginx does).

At the connection cap, connections that wait idle for their next request are closed for new
ones (nginx's reusable connections, Envoy's overload manager): those that never sent a request
first, then the longest idle. Sockets that only hold a place cannot lock out clients with a
request to make, nor push out a client between two of its requests. Any side may close an
idle connection at any time (RFC 9112 9.8); clients send their next request on a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Iterable
from operator import attrgetter
from typing import Protocol

from headway.api.errors import problem
from headway.api.rendering import render

#: How long a connection that is closed after an answer is read and its input discarded before
#: it is closed.
LINGER_S = 1.0
#: Most idle connections closed at once to make room, and the share of those idle that may
#: be (nginx's ngx_drain_connections closes up to 32, an eighth of those it may reuse): a
#: flood of new connections does not pay a look over all of them each.
RECLAIM_AT_ONCE = 32
RECLAIM_SHARE = 8


class Reclaimable(Protocol):
    """A connection as `reclaim` sees it."""

    @property
    def last_active(self) -> float: ...
    @property
    def reclaimable(self) -> bool: ...
    @property
    def proven(self) -> bool:
        """It has sent a request: a client, not only a socket holding a place."""
        ...

    def close(self) -> None: ...


def reclaim(connections: Iterable[Reclaimable]) -> list[Reclaimable]:
    """Close idle connections (`reclaimable`: nothing due, nothing unsent), at least one if
    any, up to RECLAIM_AT_ONCE: those that never sent a request first, then the longest idle;
    the ones closed."""
    idle = [connection for connection in connections if connection.reclaimable]
    count = max(1, min(RECLAIM_AT_ONCE, len(idle) // RECLAIM_SHARE))
    closed = heapq.nsmallest(count, idle, key=attrgetter("proven", "last_active"))
    for connection in closed:
        connection.close()
    return closed


def linger(transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, paused: bool) -> bool:
    """Close `transport` after the answers written to it (see the module docstring); its
    reading resumes if it was `paused`, to discard. Whether it did (False: closed at once,
    for a transport that cannot send EOF)."""
    if not transport.can_write_eof():
        transport.close()
        return False
    transport.write_eof()  # after the answer, once it has left
    if paused:
        with contextlib.suppress(RuntimeError):
            transport.resume_reading()
    loop.call_later(LINGER_S, _close, transport)
    return paused


def turn_away(transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, limit: int) -> None:
    """A connection over the cap of `limit`: answer 503 with the reason, then linger."""
    transport.write(
        render(
            problem(503, f"too many connections: this server serves at most {limit} at "
                    "once (--max-connections); retry shortly"),
            keep_alive=False,
        )
    )  # fmt: skip
    linger(transport, loop, paused=False)


def _close(transport: asyncio.Transport) -> None:
    if not transport.is_closing():
        transport.close()
