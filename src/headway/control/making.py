"""Turning the scheduler's choices into actions, each numbered once.

The scheduler chooses what a worker runs next (`infer_choice`, `cold_starts`, `load_probes`);
carrying a choice out is the same whichever chose it: an INFER takes its batch from the model's
queue (dropping first the heads that cannot make it) with the latest start that still meets its
deadlines, and a LOAD evicts its victims and reserves the worker's memory. Kept apart so that
the scheduler reads as its decisions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from headway.clock import Clock
from headway.control.actions import INFER, LOAD, Decisions, Dispatch, Tally
from headway.control.admission.drops import drop_error, take_doomed_heads
from headway.control.admission.reasons import DROPPED
from headway.control.infer_choice import take_batch
from headway.control.jobs import Job
from headway.control.predictions import DEFAULT_LOAD_SECONDS, Predictions
from headway.control.queued import QueuedWork
from headway.control.scheduling_policy import SchedulingPolicy
from headway.control.slots import ModelSlot, WorkerSlot


class ActionMaker:
    """Makes the scheduler's actions, numbering them from 1 (see the module docstring)."""

    def __init__(
        self,
        clock: Clock,
        predictions: Predictions,
        policy: SchedulingPolicy,
        queued: QueuedWork,
        tally: Tally,
        *,
        unplaced: Callable[[str, int], None],
    ) -> None:
        self.clock = clock
        self.predictions = predictions
        self.policy = policy
        self._queued = queued
        self._count = tally.count
        self._unplaced = unplaced
        self._ids = itertools.count(1)

    def control(self, worker: int, kind: str, key: str, payload: Any = None) -> Dispatch:
        """A LOAD or UNLOAD that the controller asked of `worker`."""
        return Dispatch(next(self._ids), worker, kind, key, payload=payload)

    def load(self, worker: WorkerSlot, model: ModelSlot, victims: list[str]) -> Dispatch:
        """A LOAD of `model` on `worker`, after evicting `victims` from it."""
        now = self.clock.now()
        for key in victims:
            self._unplaced(key, worker.id)
            self._count(key, "evictions")
        worker.memory.add(model.key, model.size_mb, now)
        model.loading.add(worker.id)
        self._count(model.key, "loads")
        dispatch = Dispatch(next(self._ids), worker.id, LOAD, model.key, evict=victims)
        dispatch.expected = self.predictions.load_time(model.key) or DEFAULT_LOAD_SECONDS
        return dispatch

    def batch(self, model: ModelSlot, start: float, decisions: Decisions) -> Dispatch:
        """An INFER of the batch `model`'s queue gives a worker free at `start`."""
        doomed = take_doomed_heads(model, start, predictions=self.predictions, policy=self.policy)
        if doomed:  # overloaded: a full batch of fresher requests runs instead
            service = self.predictions.service_time(model.key, 1) or 0.0
            error = drop_error(model, service, demand_loading=False)
            decisions.rejected.extend((request, error) for request in doomed)
            self._count(model.key, DROPPED, error.reason, len(doomed))
        requests, rows = take_batch(model, start, predictions=self.predictions, policy=self.policy)
        if not model.queue:
            self._queued.waiting.discard(model.key)
            model.drop_at = float("inf")
        elif self.policy.early_reject:
            self._queued.drops.refresh(model)
        expected = self.predictions.service_time(model.key, rows)
        return self.infer(model, requests, rows, expected)

    def infer(
        self, model: ModelSlot, requests: list[Job], rows: int, expected: float | None
    ) -> Dispatch:
        """An INFER of `requests`, expected to take `expected` s; with early rejection, the
        latest start that still meets every deadline in it."""
        dispatch = Dispatch(next(self._ids), -1, INFER, model.key, requests, rows)
        dispatch.expected = expected
        if self.policy.early_reject and expected is not None:
            dispatch.latest = min(r.deadline for r in requests) - expected
        return dispatch
