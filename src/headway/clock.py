"""Time as an injectable dependency, so scheduling logic is testable deterministically.

A `Clock` tells the time; a `TimerClock` also runs a callback at a given time. The server runs
on `LoopClock` (monotonic time, timers on the running event loop); tests and the simulator on
`ManualClock`, whose time and timers move only when told to.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds."""

    def now(self) -> float: ...


class Timer(Protocol):
    """A callback waiting for its time; `cancel` keeps it from running."""

    def cancel(self) -> None: ...


class TimerClock(Clock, Protocol):
    """A clock that can also run a callback at a given time on it."""

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer: ...


class MonotonicClock:
    """The real clock: `time.monotonic` itself (no Python frame: it is read several times
    per request)."""

    now = staticmethod(time.monotonic)


class LoopClock(MonotonicClock):
    """The real clock, with timers on the running asyncio event loop."""

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        loop = asyncio.get_running_loop()
        return loop.call_later(max(0.0, when - time.monotonic()), callback)


class _ManualTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to; for tests and simulation. Moving it runs the
    timers that fall due on the way, in time order, each at its own time."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = _ManualTimer(max(when, self._now), callback)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    def next_timer(self) -> float | None:
        """When the earliest pending timer is due; None if none is."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def run_next(self, until: float = math.inf) -> bool:
        """Move to the earliest pending timer and run it, if it is due by `until`; False if
        none is."""
        timers = self._timers
        while timers:
            when, _, timer = timers[0]
            if timer.cancelled:
                heapq.heappop(timers)
                continue
            if when > until:
                return False
            heapq.heappop(timers)
            if when > self._now:
                self._now = when
            timer.callback()
            return True
        return False

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self.set(self._now + seconds)
        return self._now

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError("a clock cannot go backwards")
        while self.run_next(when):
            pass
        self._now = when
