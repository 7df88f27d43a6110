"""How far behind the event loop runs, so a request's clock starts when it arrived.

When the frontend is saturated, a request waits in the loop before its handler runs; the
deadline must count that wait, or the server would think it answered in time when the client
saw it late. A timer that should fire every `interval` measures the delay; the recent maximum
is the estimate.
"""

from __future__ import annotations

import asyncio
from collections import deque


class LoopLag:
    """The event loop's recent lag, in seconds (0.0 when idle or not started)."""

    def __init__(self, interval: float = 0.005, window: int = 20) -> None:
        self.interval = interval
        self._samples: deque[float] = deque([0.0], maxlen=window)
        self.current = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self.interval
        self._handle = loop.call_at(self._due, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        self._samples.append(max(0.0, now - self._due))
        self.current = max(self._samples)
        self._due = now + self.interval
        self._handle = loop.call_at(self._due, self._tick, loop)
