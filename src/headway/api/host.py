"""What a client connection needs of the server that accepted it.

`api.http.HttpServer` creates its connections (`api.connection.HttpConnection`), and each one
reads its server's limits and turn of reads and counts what it has in flight there. Naming that
as a protocol lets the connection type its server without importing `api.http`, which imports
the connection: the two modules stay one-way.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from headway.api.app import HeadwayApp
    from headway.api.busy_poll import BusyPoller
    from headway.api.refusals import QuickRefusals

Connection = TypeVar("Connection")


class ConnectionHost(Protocol[Connection]):
    """The server as its connections see it (`api.http.HttpServer` is one)."""

    app: HeadwayApp
    loop: asyncio.AbstractEventLoop
    refusals: QuickRefusals | None
    poller: BusyPoller | None
    connections: set[Connection]
    max_connections: int
    keep_alive: float
    header_timeout: float
    body_timeout: float
    write_timeout: float
    max_unread: int  # answer bytes its clients may leave unread, all together
    stream_buffer: int  # bytes of a streamed answer one client may leave unsent
    stream_idle_timeout: float  # seconds a streamed answer may send nothing
    unread: int  # answer bytes its connections count as unread
    unanswered: int  # requests handed to the app and not yet answered
    stopping: bool
    # the turn of reads (`api.turns.ReadTurns`)
    turn_open: bool
    turn_floor: float
    caught_up: float

    def arrived_since(self, now: float) -> float: ...

    def accept_pending(self) -> None:
        """Accept the connections waiting in the listen queue (`HttpServer.accept_pending`)."""

    def keep_up(self, now: float) -> None: ...

    def make_room(self) -> bool:
        """At the connection cap: close idle connections for a new one (`HttpServer`)."""

    def shed_unread(self) -> None:
        """Past `max_unread`: drop the connections holding the most (`HttpServer`)."""
