"""The scheduler's view of each worker (its timeline) and of each model (its queue and places).

A worker's timeline is what it will run next: the actions in flight, in order, and when it is
predicted to be free. Clockwork keeps it only a short time ahead, so predictions stay close to
what the worker does; `available` is that rule.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from headway.control.actions import Dispatch
from headway.control.batching import AIMD
from headway.control.memory import WorkerMemory
from headway.control.queues import DeadlineQueue

#: At most this many actions are in flight on one worker, whatever `schedule_ahead` allows.
MAX_IN_FLIGHT = 4


@dataclass(eq=False)
class WorkerSlot:
    """One worker: the models it holds, its memory share and its timeline."""

    id: int
    memory: WorkerMemory
    alive: bool = True
    models: set[str] = field(default_factory=set)
    inflight: deque[Dispatch] = field(default_factory=deque)
    control: deque[Dispatch] = field(default_factory=deque)
    free_at: float = 0.0
    #: When the action before the first one in flight was heard to end: the earliest the
    #: worker could start the first (it runs its actions one after another).
    ended_at: float = float("-inf")

    def hold(self, key: str, size_mb: float, now: float) -> None:
        """Count `key`'s memory here (replacing the reserved estimate with `size_mb`)."""
        if key in self.memory:
            self.memory.resize(key, size_mb)
        else:
            self.memory.add(key, size_mb, now)

    def release(self, key: str) -> None:
        """`key` is no longer held here."""
        self.models.discard(key)
        self.memory.remove(key)

    def available(self, now: float, schedule_ahead: float) -> bool:
        """Whether another action may be sent now: idle, or (with `schedule_ahead` > 0) free
        within that many seconds and fewer than MAX_IN_FLIGHT actions queued."""
        if not self.alive:
            return False
        if not self.inflight:
            return True
        return (
            len(self.inflight) < MAX_IN_FLIGHT
            and self.free_at - now <= schedule_ahead
            and schedule_ahead > 0
        )

    def start(self, dispatch: Dispatch, now: float) -> None:
        """Put `dispatch` at the end of the timeline (its expected start and the new free time)."""
        dispatch.worker = self.id
        dispatch.sent_at = now
        dispatch.earliest = max(now, self.free_at)
        self.free_at = dispatch.earliest + (dispatch.expected or 0.0)
        self.inflight.append(dispatch)
        self.memory.touch(dispatch.model, now)

    def finish(self, dispatch: Dispatch, now: float) -> None:
        """`dispatch` ended (done, failed or refused); an empty timeline is free now."""
        if dispatch in self.inflight:
            self.inflight.remove(dispatch)
        dispatch.startable_at = max(dispatch.sent_at, self.ended_at)
        self.ended_at = now
        if not self.inflight:
            self.free_at = now


@dataclass(eq=False)
class ModelSlot:
    """One model: its request queue (shared by its replicas), where it is held or loading, and
    the time its most urgent queued request must be dropped if it has not started."""

    key: str
    queue: DeadlineQueue
    max_batch: int
    batch_delay: float
    aimd: AIMD
    size_mb: float = 0.0
    replicas: set[int] = field(default_factory=set)
    loading: set[int] = field(default_factory=set)
    drop_at: float = float("inf")
    batches: int = 0
    late_batches: int = 0
    finished_at: float = float("-inf")  # when its last INFER ended
    alone_since: float = float("-inf")  # when the last request started alone may have arrived

    def statistics(self, estimates: dict[int, float]) -> dict[str, Any]:
        return {
            "queue": len(self.queue),
            "replicas": sorted(self.replicas),
            "aimd_limit": self.aimd.limit,
            "batches": self.batches,
            "late_batches": self.late_batches,
            "estimates_s": estimates,
        }

    @property
    def unplaced(self) -> bool:
        """No worker holds or loads it: its requests need a LOAD first."""
        return not self.replicas and not self.loading
