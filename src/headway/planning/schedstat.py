"""The kernel's accounting of a server's processes (Linux's `/proc`): how long the event loop
and each worker ran and waited for a core, which `headway.planning.in_place` turns into
profiles under load. Kept apart so that module stays free of processes."""

from __future__ import annotations

from pathlib import Path


def scheduled(pid: int) -> tuple[float, float]:
    """Seconds the main thread of process `pid` has run, and has waited runnable for a core,
    so far (Linux's `/proc/PID/schedstat`). The server's event loop is its main thread: under
    load, the two together are the loop's wall time, what its queue of queries waits on."""
    fields = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9


def children(pid: int) -> list[int]:
    """The child processes of `pid` (the server's workers), from `/proc`."""
    found = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in found.read_text().split()] if found.exists() else []
