"""A worker's share of the memory budget: which models it holds and which to evict.

Accounting is by each model's size (declared in model.yaml, or measured when it loads), not
by the process's RSS, which allocators rarely give back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Resident:
    size_mb: float
    last_used: float


class WorkerMemory:
    """Models resident on one worker within `capacity_mb` (None: unbounded)."""

    def __init__(self, capacity_mb: float | None = None) -> None:
        self.capacity_mb = capacity_mb
        self.resident: dict[str, Resident] = {}
        self.used_mb = 0.0

    @property
    def free_mb(self) -> float:
        return float("inf") if self.capacity_mb is None else self.capacity_mb - self.used_mb

    def __contains__(self, key: str) -> bool:
        return key in self.resident

    def add(self, key: str, size_mb: float, now: float) -> None:
        self.remove(key)
        self.resident[key] = Resident(size_mb, now)
        self.used_mb += size_mb

    def resize(self, key: str, size_mb: float) -> None:
        """Replace an estimate with the measured size."""
        entry = self.resident.get(key)
        if entry is not None:
            self.used_mb += size_mb - entry.size_mb
            entry.size_mb = size_mb

    def remove(self, key: str) -> None:
        entry = self.resident.pop(key, None)
        if entry is not None:
            self.used_mb -= entry.size_mb

    def touch(self, key: str, now: float) -> None:
        entry = self.resident.get(key)
        if entry is not None:
            entry.last_used = now

    def victims(
        self,
        size_mb: float,
        *,
        pinned: set[str],
        idle: Callable[[str], bool],
        idle_first: bool = True,
    ) -> list[str] | None:
        """Models to evict so `size_mb` fits: idle ones first (if `idle_first`), least recently
        used first within each group, never one in `pinned`. None when it cannot fit."""
        if self.capacity_mb is None or size_mb <= self.free_mb:
            return []
        if size_mb > self.capacity_mb:
            return None

        def order(key: str) -> tuple[bool, float]:
            return (idle_first and not idle(key), self.resident[key].last_used)

        needed = size_mb - self.free_mb
        chosen: list[str] = []
        for key in sorted((k for k in self.resident if k not in pinned), key=order):
            if needed <= 1e-9:
                break
            chosen.append(key)
            needed -= self.resident[key].size_mb
        return chosen if needed <= 1e-9 else None
