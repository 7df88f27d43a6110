"""The connections a gRPC server serves at once, and which one gives way at the cap.

At `--max-connections` the connection idle longest (no call open) is closed with GOAWAY
NO_ERROR to make room for the new one, as nginx and Envoy's overload manager do, so sockets
that only sit there cannot lock real clients out; a new connection is refused only when no
connection is idle. The idle ones are ranked at most once every RANK_S, not for each new
connection: a flood of connections at the cap does not cost a scan of all of them each.
Connections closing (their GOAWAY on its way, for a moment: `api.grpc.http2.LINGER_S`) do
not count against the cap.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

#: Seconds a ranking of the idle connections is used before it is made again.
RANK_S = 1.0


class Idle(Protocol):
    """What the set needs of a connection (`api.grpc.http2.Http2Connection`)."""

    @property
    def idle(self) -> bool:
        """Open, with no call open on it."""

    @property
    def last_active(self) -> float:
        """When it last had a call open (or was opened)."""

    def go_away(self) -> None:
        """GOAWAY NO_ERROR, then close once no call is open."""


C = TypeVar("C", bound=Idle)


class Connections(Generic[C]):
    """The open connections, and the idle ones ranked to be closed first at the cap; those
    closing apart. Iterating gives both."""

    def __init__(self) -> None:
        self._open: set[C] = set()
        self._closing: set[C] = set()
        self._ranked: list[C] = []  # idle when ranked, the longest idle last
        self._ranked_at = float("-inf")

    def __len__(self) -> int:
        """The open ones (what the cap counts)."""
        return len(self._open)

    def sockets(self) -> int:
        """How many are open or closing."""
        return len(self._open) + len(self._closing)

    def __iter__(self) -> Iterator[C]:
        return itertools.chain(self._open, self._closing)

    def __contains__(self, connection: object) -> bool:
        return connection in self._open

    def add(self, connection: C) -> None:
        self._open.add(connection)

    def closing(self, connection: C) -> None:
        """It no longer counts against the cap, though its socket is not closed yet."""
        self._open.discard(connection)
        self._closing.add(connection)

    def discard(self, connection: C) -> None:
        self._open.discard(connection)
        self._closing.discard(connection)

    def evict_idle(self, now: float) -> bool:
        """Close the connection idle longest, to make room for a new one; False if none is."""
        if now - self._ranked_at >= RANK_S:
            self._ranked_at = now
            idle = [c for c in self._open if c.idle]
            self._ranked = sorted(idle, key=lambda c: c.last_active, reverse=True)
        ranked = self._ranked
        while ranked:
            oldest = ranked.pop()
            if oldest.idle and oldest in self._open:
                oldest.go_away()
                return True
        return False
