"""Stopping an action while it runs (a competing copy that lost its race).

A worker runs one action at a time and reads nothing while it does, so a stop cannot come as a
message. The frontend marks the action's id in the worker's stop file (`StopFile.mark`: a ring
of `SLOTS` ids, the id in slot `id % SLOTS`) and sends the worker SIGUSR1; the worker's handler
(`StopMarks`) raises `ActionStopped` inside the action when the one it runs is marked, and an
action marked before it starts is not started. Python code stops at its next bytecode, a sleep
at once; a native call (a BLAS kernel) ends first. A stale mark or signal does nothing: ids
are never reused, and only the action running is ever stopped.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import struct
import time
from types import FrameType

#: Ids the stop file holds at once (the actions in flight on one worker are far fewer).
SLOTS = 64
_SLOT = struct.Struct("<q")
SIGNAL = signal.SIGUSR1


class ActionStopped(Exception):
    """The frontend stopped the action running (its answer was no longer wanted), after it
    had spent `cpu_s` seconds of CPU time (none if it never started). The worker replies
    with the seconds as a field of its reply (`WorkerState.handle`), not in the message."""

    def __init__(self, message: str, cpu_s: float = 0.0) -> None:
        super().__init__(message)
        self.cpu_s = cpu_s


class StopFile:
    """The frontend's side: a worker's stop file, created empty at `path`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.pwrite(self._fd, bytes(SLOTS * _SLOT.size), 0)

    def mark(self, action: int) -> None:
        os.pwrite(self._fd, _SLOT.pack(action), (action % SLOTS) * _SLOT.size)

    def close(self) -> None:
        os.close(self._fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class StopMarks:
    """The worker's side: its stop file, read through a shared mapping (no system call per
    action), and the action it runs now (`running`, set only around the model's own code:
    a stop never lands in the worker's socket handling)."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as file:
            self._map = mmap.mmap(file.fileno(), SLOTS * _SLOT.size, access=mmap.ACCESS_READ)
        self.running: int | None = None
        #: CPU time (`time.process_time`) when the running action started.
        self.started = 0.0

    def marked(self, action: int) -> bool:
        return bool(_SLOT.unpack_from(self._map, (action % SLOTS) * _SLOT.size)[0] == action)

    def install(self) -> None:
        """Handle the frontend's signal (in the main thread, where actions run)."""
        signal.signal(SIGNAL, self._signalled)

    def begin(self, action: int) -> None:
        """`action` starts: ActionStopped if it was marked already."""
        if self.marked(action):
            raise ActionStopped("stopped before it started")
        self.started = time.process_time()
        self.running = action

    def end(self) -> None:
        self.running = None

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        running = self.running
        if running is not None and self.marked(running):
            self.running = None
            spent = time.process_time() - self.started
            raise ActionStopped("stopped while it ran", cpu_s=spent)
