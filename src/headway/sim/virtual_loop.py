"""The event loop of the simulated server: asyncio's, without I/O, turned by the simulation.

The real `Controller` runs on an asyncio loop (its futures, tasks and callbacks). In a
simulation nothing waits on sockets and time is the `ManualClock`'s, so the loop has nothing to
select on: `ServerSimulation` turns it itself, between one clock event and the next, until no
callback is ready.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import selectors
from collections.abc import Iterator, Mapping
from typing import Any

#: A bound on the turns one event may cause (a loop of callbacks would otherwise hang the run).
MAX_TURNS = 10_000


class _NoIO(selectors.BaseSelector):
    """A selector with nothing to watch: the simulated server has no sockets."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        raise NotImplementedError("the simulated server does no I/O")

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return {}


class VirtualLoop(asyncio.BaseEventLoop):
    """An event loop without I/O, turned by the simulation itself (`turns`) between the
    `ManualClock`'s events: a turn runs the callbacks ready at its start, as asyncio's does,
    with no system call and no task of the simulation's own in between."""

    def __init__(self) -> None:
        super().__init__()
        self._selector = _NoIO()

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Let the caller's code turn the loop (`turns`) as if it were running."""
        asyncio._set_running_loop(self)
        try:
            yield
        finally:
            asyncio._set_running_loop(None)

    def turns(self) -> None:
        """Run turns until no callback is ready (at most MAX_TURNS). A turn without the
        loop's own timers (the simulation's are the clock's) runs its callbacks directly,
        in the order asyncio's `_run_once` would."""
        ready: collections.deque[asyncio.Handle] = self._ready  # type: ignore[attr-defined]
        for _ in range(MAX_TURNS):
            if not ready:
                return
            if self._scheduled:  # type: ignore[attr-defined]
                self._run_once()  # type: ignore[attr-defined]
                continue
            for _ in range(len(ready)):
                handle = ready.popleft()
                if not handle._cancelled:
                    handle._run()
