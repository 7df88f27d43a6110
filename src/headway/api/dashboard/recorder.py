"""Reads the server's records once a second, on a timer of the event loop, and keeps what the
dashboard shows: the history of per-second figures (`history.Ring`) and the last readings,
from which the page's tables are made. Nothing is read per request: a page's poll only
encodes what the last tick read.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from headway.api.dashboard.history import HISTORY_SECONDS, MAX_SERIES, Ring
from headway.api.dashboard.sampling import Reading, Usage, sample
from headway.apps import AppRegistry
from headway.control.controller import Controller
from headway.flows.serving import FlowApplication

#: Seconds between two readings: the history's resolution.
PERIOD_S = 1.0
#: The window of the tables' rates and quantiles, in readings (seconds): long enough that a
#: few requests a second give a steady figure, short enough to show a change at once.
TABLE_WINDOW = 10

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_MB = (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096) / 2**20


def process_usage(pid: int) -> Usage | None:
    """A process's CPU seconds and resident memory, from /proc (None where there is none: not
    Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/statm", "rb") as statm:
            resident = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    # after the command's ")": state is field 3, utime and stime fields 14 and 15 (proc(5))
    return Usage((int(fields[11]) + int(fields[12])) / _TICKS, resident * _PAGE_MB)


def operators(apps: AppRegistry) -> list[dict[str, Any]]:
    """Each flow application's operators with their statistics (`flows.stats`), in plan
    order, named `app/operator`."""
    out = []
    for name, app in sorted(apps.apps.items()):
        if isinstance(app, FlowApplication):
            for stats in app.statistics()["operators"]:
                out.append({"name": f"{name}/{stats['operator']}", "app": name, **stats})
    return out


def read(controller: Controller, apps: AppRegistry) -> Reading:
    """Everything the dashboard reads, now: the controller's statistics, the applications'
    records, and the CPU and memory of each worker process on this machine."""
    snapshot = controller.statistics()
    usage = {}
    for worker in snapshot.workers:  # a worker on another node (Ray) cannot be read here
        if worker.pid is not None and worker.node is None:
            found = process_usage(worker.pid)
            if found is not None:
                usage[worker.worker] = found
    return Reading(time.time(), snapshot, apps.summary(), operators(apps), usage)


class Recorder:
    """Takes a `Reading` every `period` seconds on the running loop; adds the figures of each
    interval to `ring` and keeps the last `TABLE_WINDOW` + 1 readings."""

    def __init__(
        self,
        reader: Callable[[], Reading],
        *,
        seconds: int = HISTORY_SECONDS,
        max_series: int = MAX_SERIES,
        period: float = PERIOD_S,
    ) -> None:
        self.reader = reader
        self.period = period
        #: None: no history kept (`--dashboard-history-s 0`); the tables are still read.
        self.ring = Ring(seconds, max_series) if seconds > 0 else None
        self.readings: deque[Reading] = deque(maxlen=TABLE_WINDOW + 1)
        #: Readings taken, and the seconds they took in all (the timer's cost).
        self.ticks = 0
        self.spent_s = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        """Take the first reading now and the next ones every `period` on the running loop."""
        loop = asyncio.get_running_loop()
        self._due = loop.time()
        self._tick()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        started = time.perf_counter()
        try:
            self.take()
        finally:
            self.spent_s += time.perf_counter() - started
            loop = asyncio.get_running_loop()
            # on the period's grid; ticks a busy loop made late are skipped, not bunched
            self._due += self.period * max(1, int((loop.time() - self._due) / self.period) + 1)
            self._handle = loop.call_at(self._due, self._tick)

    def take(self) -> Reading:
        """Read now; record the interval since the last reading in the history."""
        reading = self.reader()
        self.ticks += 1
        if self.readings and self.ring is not None:
            self.ring.add(reading.wall, sample(reading, self.readings[-1]))
        self.readings.append(reading)
        return reading

    def latest(self) -> tuple[Reading, Reading | None]:
        """The last reading (taken now if there is none yet) and the one `TABLE_WINDOW`
        readings before it (the oldest kept; None with only one)."""
        if not self.readings:
            self.take()
        first = self.readings[0]
        return self.readings[-1], first if len(self.readings) > 1 else None
