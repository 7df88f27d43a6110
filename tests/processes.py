"""The processes below a server's, read from Linux's /proc: what the tests of workers, faults
and the Ray engine count and wait for."""

from __future__ import annotations

import os


def parents() -> dict[int, int]:
    """Each live process's parent."""
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    found[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    return found


def children(pid: int) -> set[int]:
    """PIDs whose parent is `pid`."""
    return {child for child, parent in parents().items() if parent == pid}


def descendants(pid: int) -> set[int]:
    """Every process below `pid`."""
    tree = parents()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in tree.items() if parent in frontier} - found
        found |= frontier
    return found


def command(pid: int) -> str:
    """The command line of a live process ('' once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return ""
