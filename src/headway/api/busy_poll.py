"""Busy polling: the frontend's event loop keeps turning for a while after I/O, not sleeping.

At low load every request finds the frontend asleep in `epoll_wait` (and a worker asleep in
`recv`), and waking a sleeping process is slow on a virtual machine; a loop that polls sees
the next read at once, at the price of a core. Polling after every read and answer is off by
default (`headway serve --busy-poll-us`); polling only for a worker's reply due within a
fraction of a millisecond, while nothing else waits (`HttpServer.expect_reply`), is on.
docs/decisions.md has the measurements.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable


class BusyPoller:
    """Keeps `loop` turning (`call_soon`, each turn an `epoll_wait` with no timeout) until
    `seconds` after the last `arm()`.

    It costs up to `seconds` of one core after each read or answer, so a server answering one
    request at a time keeps a core busy; under load the loop has work on every turn anyway and
    the poller is one cheap callback per turn. It yields the core between polls
    (`os.sched_yield`), so a runnable process on the same core (a worker, the client) is not held
    up."""

    __slots__ = ("_loop", "_now", "_running", "_until", "seconds")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        seconds: float,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._loop = loop
        self._now = now
        self.seconds = seconds
        self._until = 0.0
        self._running = False

    def arm(self) -> None:
        """Something happened: poll for the next thing until `seconds` from now."""
        self._until = self._now() + self.seconds
        if not self._running:
            self._running = True
            self._loop.call_soon(self._turn)

    def arm_for(self, seconds: float) -> None:
        """Poll until `seconds` from now, or longer if already armed for longer."""
        until = self._now() + seconds
        if until > self._until:
            self._until = until
        if not self._running:
            self._running = True
            self._loop.call_soon(self._turn)

    def disarm(self) -> None:
        """What the poll waited for came: let the loop sleep from its next turn."""
        self._until = 0.0

    @property
    def running(self) -> bool:
        return self._running

    def _turn(self) -> None:
        if self._now() < self._until:
            os.sched_yield()
            self._loop.call_soon(self._turn)
        else:
            self._running = False
