"""Loop turns of reads, for a server whose connections are read on the event loop.

A read tells when its bytes may have arrived (`arrived_since`), so a deadline counts from
there even when the loop was too busy to read them at once; and a long turn of reads lets the
app hear its workers' replies on the way (`keep_up`). The HTTP server (`api.http`) and the
gRPC server (`api.grpc.server`) are both `ReadTurns`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from headway.api.app import HeadwayApp

#: How long a turn of reads goes before the app hears its workers' replies (see `keep_up`).
CATCH_UP_S = 0.002
#: Loop turns closer together than this count as back to back (see `arrived_since`).
BACK_TO_BACK_S = 0.0005


class ReadTurns:
    """The turn tracking a server mixes in; it sets `loop` before its first read."""

    loop: asyncio.AbstractEventLoop
    app: HeadwayApp
    turn_open = False  # a loop turn with reads in it is under way
    _turn_started = _turn_ended = 0.0  # its first read; when the last one ended
    turn_floor = 0.0  # what `arrived_since` answers during this turn
    caught_up = 0.0  # when this turn began or last let the app catch up

    def arrived_since(self, now: float) -> float:
        """The earliest time bytes read `now` may have arrived: when they count from.

        Bytes that arrive while the loop is busy wait in the kernel until its next turn, so
        a frontend that falls behind would see stale requests as fresh and admit them, to be
        answered late at the client (under open-loop overload, every one of them). When turns
        follow each other without a pause, bytes read in this turn may have arrived as early
        as the previous turn's first read; after a pause the loop woke for them, so now. A model
        run on the loop (`--engine inline`) is no pause: turns around it are back to back, or
        everything that arrived during runs would look fresh when read; nor is the time the
        loop takes after a run to read again (answering, or not given a core on a busy
        machine): the engine holds the loop until it is free to sleep (`Engine.held_until`).
        The bound is at most one turn too early: a fraction of a millisecond unless overloaded.
        The server's first turn of reads counts from now, even just after a run.
        """
        if not self.turn_open:
            self.turn_open = True
            self.loop.call_soon(self._turn_over)
            ended = max(self._turn_ended, self.app.loop_held_until)
            # the first turn has no turn before it to bound its wait: it counts from now
            busy = now - ended < BACK_TO_BACK_S and self._turn_started > 0.0
            self.turn_floor = self._turn_started if busy else now
            self._turn_started = self.caught_up = now
        return self.turn_floor

    def keep_up(self, now: float) -> None:
        """Every CATCH_UP_S of one turn of reads, let the app hear its workers' replies.

        Under overload a turn reads hundreds of requests; a worker's reply is otherwise heard
        only when the turn ends, and its answers, due within the deadline, wait that long."""
        if now - self.caught_up >= CATCH_UP_S:
            self.caught_up = now
            self.app.catch_up()

    def _turn_over(self) -> None:
        self.turn_open = False
        self._turn_ended = time.monotonic()
