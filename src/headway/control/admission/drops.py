"""Early dropping: when a queued request must be rejected because it can no longer make it.

A request's drop time is the latest moment it can start and still be predicted to finish by
its deadline (less a LOAD first, when no worker holds or loads its model). Each model caches
the earliest drop time among its requests; a lazy min-heap of those times tells the scheduler
when to look next, so a poll touches only models with something due. Under overload, the
stale heads of a queue that only a smaller batch could serve are dropped too, so that a full
batch of fresher requests runs instead (`take_doomed_heads`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from headway.control.estimates.durations import Durations
from headway.control.jobs import Job
from headway.control.placement.slots import ModelSlot
from headway.control.policy import SchedulingPolicy
from headway.control.request import DEFAULT_PRIORITY
from headway.errors import ColdStartTooSlow, DeadlineUnmeetable, HeadwayError


def latest_start(durations: Durations, model: ModelSlot, request: Job) -> float:
    """The last moment `request` can start and still be predicted to meet its deadline."""
    return request.deadline - (durations.service_time(model.key, request.rows) or 0.0)


def drop_error(model: ModelSlot, service: float, *, demand_loading: bool) -> HeadwayError:
    """Why a queued request of `model` was dropped, in words a client can act on."""
    if model.replicas:
        return DeadlineUnmeetable(
            f"model {model.key!r}: rejected before running: its deadline passed while "
            f"queued (needs ~{service * 1e3:.2f} ms to run)"
        )
    if not demand_loading:
        return DeadlineUnmeetable(
            f"model {model.key!r}: rejected before running: no replica became ready in time"
        )
    return ColdStartTooSlow(
        f"model {model.key!r}: rejected before running: the model could not be loaded in time"
    )


class DropTimes:
    """Each queued model's drop time (`ModelSlot.drop_at`), and a lazy min-heap of them, earliest
    first; stale entries (the drop time changed, or nothing is queued) are skipped when met."""

    def __init__(
        self,
        models: Mapping[str, ModelSlot],
        waiting: set[str],
        durations: Durations,
        *,
        demand_loading: bool,
    ) -> None:
        self._models = models
        self._waiting = waiting
        self._durations = durations
        self._demand_loading = demand_loading
        self._heap: list[tuple[float, str]] = []

    def time(self, model: ModelSlot, request: Job, service: float | None = None) -> float:
        """When `request` must be dropped if it has not started (counting a LOAD it still
        needs); `service`, if known, is its predicted seconds now (else they are asked)."""
        if service is None:
            latest = latest_start(self._durations, model, request)
        else:
            latest = request.deadline - service
        if self._demand_loading and model.unplaced:
            latest -= self._durations.load_time(model.key) or 0.0
        return latest

    def pushed(self, model: ModelSlot, request: Job, service: float | None = None) -> None:
        """`request` joined `model`'s queue: it may bring the model's drop time forward
        (`service`: its predicted seconds, when admission has just asked them)."""
        when = self.time(model, request, service)
        if when < model.drop_at:
            self._set(model, when)

    def refresh(self, model: ModelSlot) -> None:
        """Recompute `model`'s drop time from its whole queue (after its head left, or what the
        drop times depend on changed: its placement, the LOAD estimate). A queue of one-row
        requests of one priority in deadline order (`DeadlineQueue.uniform`, the usual one)
        has its earliest drop time at its head: a pass over it per batch cost more, under
        overload with a thousand requests queued, than serving the batch's requests."""
        queue = model.queue
        head = queue.peek()
        if head is not None and queue.uniform:
            self._set(model, self.time(model, head))
        else:
            self._set(model, min((self.time(model, r) for r in queue), default=float("inf")))

    def take_doomed(self, model: ModelSlot, now: float) -> list[tuple[Job, HeadwayError]]:
        """Remove from `model`'s queue the requests to drop by `now`, each with its error."""
        queue = model.queue
        if queue.uniform:  # the doomed are the first in line (see `refresh`)
            found: list[Job] = []
            while (head := queue.peek()) is not None and self.time(model, head) <= now:
                found.append(queue.pop())
        else:
            found = queue.remove_if({id(r) for r in queue if self.time(model, r) <= now})
        rejected: list[tuple[Job, HeadwayError]] = []
        for request in found:
            service = self._durations.service_time(model.key, request.rows) or 0.0
            rejected.append(
                (request, drop_error(model, service, demand_loading=self._demand_loading))
            )
        return rejected

    def due(self, now: float) -> Iterator[ModelSlot]:
        """Models with a request to drop by `now` (each entry is consumed)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, key = heapq.heappop(heap)
            if self._current(when, key):
                yield self._models[key]

    def next(self) -> float | None:
        """The earliest drop time still current, or None."""
        heap = self._heap
        while heap and not self._current(*heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _set(self, model: ModelSlot, when: float) -> None:
        if when != model.drop_at:
            model.drop_at = when
            if when != float("inf"):
                heapq.heappush(self._heap, (when, model.key))

    def _current(self, when: float, key: str) -> bool:
        model = self._models.get(key)
        return model is not None and key in self._waiting and model.drop_at == when


def take_doomed_heads(
    model: ModelSlot, start: float, *, durations: Durations, policy: SchedulingPolicy
) -> list[Job]:
    """Under overload, pop the most urgent queued requests that only a batch smaller than
    `model`'s largest could still serve by their deadlines, starting at `start`: the caller
    drops them, and the batch taken next is full.

    EDF's collapse under overload: the queue's head is its stalest request, a batch is sized
    to what the head has left, so the worker runs small batches of nearly late requests at a
    fraction of its full batches' rows per second, and the fresher requests behind them go
    late in turn. Only when the queue is overloaded (its rows cannot all run, in full
    batches, before the latest deadline in it: some are dropped whatever runs first), only
    requests of the default priority, and only when a full batch behind them can run in time."""
    queue, full = model.queue, model.max_batch
    if not (policy.early_reject and policy.profile_batching) or queue.rows <= full:
        return []
    if not durations.estimator.profiled(model.key) or queue.last is None:
        return []
    service = durations.service_time(model.key, full)
    finish = durations.finish_time(model.key, queue.rows, full, max(1, len(model.replicas)))
    if service is None or finish is None or start + finish <= queue.last[1]:
        return []  # not overloaded: every queued row can still run in time
    head, cutoff = queue.peek(), start + service
    if head is None or head.priority != DEFAULT_PRIORITY or head.deadline >= cutoff:
        return []
    doomed = {
        id(r): r.rows for r in queue if r.priority == DEFAULT_PRIORITY and r.deadline < cutoff
    }
    if queue.rows - sum(doomed.values()) < full:
        return []  # no full batch behind them can run in time: keep them
    return queue.remove_if(set(doomed))
