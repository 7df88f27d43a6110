"""Time as an injectable dependency, so scheduling logic is testable deterministically."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds."""

    def now(self) -> float: ...


class MonotonicClock:
    """The real clock: `time.monotonic` itself (no Python frame: it is read several times
    per request)."""

    now = staticmethod(time.monotonic)


class ManualClock:
    """A clock that moves only when told to; for tests and simulation."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds
        return self._now

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError("a clock cannot go backwards")
        self._now = when
