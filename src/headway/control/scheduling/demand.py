"""Which model to LOAD next: the most urgent queued model that no worker holds or loads.

Clockwork loads on unmet demand only (a model with nothing queued is never loaded). With
thousands of models a scan per decision is too slow, so the candidates are kept in a lazy
min-heap by their head request: stale entries (the model was placed, emptied, or has another
head now) are skipped when met, and the heap is re-indexed whenever a head may have changed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import NamedTuple

from headway.control.estimates.durations import Durations
from headway.control.placement.slots import ModelSlot, WorkerSlot
from headway.control.policy import SchedulingPolicy

HeadKey = tuple[int, float, int]


class ColdStart(NamedTuple):
    """A LOAD to make: the model, its head request's key, and the models to evict first."""

    model: ModelSlot
    head: HeadKey
    victims: list[str]


class ColdModels:
    """Queued models that need a LOAD, ordered by their most urgent request."""

    def __init__(self) -> None:
        self._heap: list[tuple[HeadKey, str]] = []

    def mark(self, model: ModelSlot) -> None:
        """Index `model` under its head request if it is queued and no worker holds or loads it."""
        if model.unplaced:
            head = model.queue.head_key()
            if head is not None:
                heapq.heappush(self._heap, (head, model.key))

    def choose(
        self,
        worker: WorkerSlot,
        start: float,
        *,
        models: Mapping[str, ModelSlot],
        waiting: set[str],
        durations: Durations,
        policy: SchedulingPolicy,
    ) -> ColdStart | None:
        """The most urgent candidate that fits `worker` (after evictions) and, under
        `feasible_loads_only`, can still make its deadline when loaded from `start`."""
        best: ColdStart | None = None
        pinned = {d.model for d in worker.inflight}
        cold, passed, seen = self._heap, [], set()
        while cold and best is None:  # in head order: the first that qualifies is the best
            entry = heapq.heappop(cold)
            head_key, key = entry
            model = models.get(key)
            if (
                model is None
                or key in seen
                or key not in waiting
                or not model.unplaced
                or model.queue.head_key() != head_key
            ):
                continue  # stale: the model was placed, emptied or has another head now
            seen.add(key)
            passed.append(entry)
            head = model.queue.peek()
            assert head is not None
            if policy.feasible_loads_only:
                ready = start + (durations.load_time(key) or 0.0)
                if ready + (durations.service_time(key, head.rows) or 0.0) > head.deadline:
                    continue
            victims = worker.memory.victims(
                model.size_mb,
                pinned=pinned,
                idle=lambda k: k not in waiting,
                idle_first=policy.idle_first_eviction,
            )
            if victims is not None:
                best = ColdStart(model, head_key, victims)
        for entry in passed:
            heapq.heappush(cold, entry)
        return best
