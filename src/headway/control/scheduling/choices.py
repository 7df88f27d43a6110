"""The next action on a worker, and the action it becomes.

Which INFER: the loaded model whose head request is the most urgent among those the worker
holds; whether to wait for more rows (`hold_until`); which batch: the queue's head (its most
urgent request) and requests in queue order up to the target size, from the profiles
(`largest_batch`) under Headway's policy, AIMD's limit under the baseline's. A request further
back with an earlier deadline (a lower priority level, or FIFO order) joins only if the bigger
batch still meets that deadline. A request that finds its model idle may start alone
(`start_alone`), and a busy worker may be sent a full batch ahead (`full_batch_ahead`).

Carrying a choice out is the same whichever chose it (`ActionMaker`, numbering each action
once): an INFER takes its batch from the model's queue (dropping first the heads that cannot
make it) with the latest start that still meets its deadlines, and a LOAD (`demand`,
`probes`) evicts its victims and reserves the worker's memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from headway.clock import Clock
from headway.control.actions import INFER, LOAD, Decisions, Dispatch, Tally
from headway.control.admission.drops import drop_error, latest_start, take_doomed_heads
from headway.control.admission.reasons import DROPPED
from headway.control.estimates.batch_size import largest_batch
from headway.control.estimates.durations import DEFAULT_LOAD_SECONDS, Durations
from headway.control.jobs import Job
from headway.control.placement.slots import ModelSlot, WorkerSlot
from headway.control.policy import SchedulingPolicy
from headway.control.scheduling.queued_work import QueuedWork


def most_urgent(
    worker: WorkerSlot, models: Mapping[str, ModelSlot], waiting: set[str]
) -> ModelSlot | None:
    """The model on `worker` with queued requests whose head request is the most urgent."""
    best: ModelSlot | None = None
    best_key: tuple[int, float, int] | None = None
    candidates = (
        waiting & worker.models
        if len(worker.models) > len(waiting)
        else {k for k in worker.models if k in waiting}
    )
    for key in candidates:
        model = models[key]
        head_key = model.queue.head_key()
        if head_key is not None and (best_key is None or head_key < best_key):
            best, best_key = model, head_key
    return best


def full_batch_ahead(
    worker: WorkerSlot,
    models: Mapping[str, ModelSlot],
    waiting: set[str],
    durations: Durations,
) -> ModelSlot | None:
    """The model whose next batch `worker`, busy with one action, should be sent before it is
    free: its most urgent model, when a full batch of it is queued, it is profiled, and that
    batch is predicted to meet its head's deadline starting when the worker is free. Waiting
    would add nothing to a full batch, and the worker need not wait for the frontend's turn."""
    if len(worker.inflight) != 1 or worker.control or not worker.alive:
        return None
    model = most_urgent(worker, models, waiting)
    if model is None or model.queue.rows < model.max_batch:
        return None
    if not durations.estimator.profiled(model.key):
        return None
    service = durations.service_time(model.key, model.max_batch)
    head = model.queue.peek()
    if head is None or service is None or worker.free_at + service > head.deadline:
        return None
    return model


def hold_until(model: ModelSlot, now: float, durations: Durations) -> float | None:
    """When to look again if `model`'s small batch should wait for more rows (its
    `batch_delay`), else None: never past the moment a queued request would have to be dropped
    (the queue is short here: fewer than max_batch rows)."""
    head = model.queue.peek()
    if head is None or not model.batch_delay or model.queue.rows >= model.max_batch:
        return None
    ready_at = head.arrival + model.batch_delay
    if now < ready_at and ready_at < min(latest_start(durations, model, r) for r in model.queue):
        return ready_at
    return None


def take_batch(
    model: ModelSlot, start: float, *, durations: Durations, policy: SchedulingPolicy
) -> tuple[list[Job], int]:
    """Pop the batch to run at `start` from `model`'s (non-empty) queue: (requests, rows)."""
    head = model.queue.peek()
    assert head is not None
    if policy.profile_batching:
        target = largest_batch(
            durations.estimator,
            model.key,
            budget=head.deadline - start,
            cap=min(model.max_batch, model.queue.rows),  # no batch is larger than the queue
            aimd=model.aimd,
            overhead=durations.overhead,
        )
    else:
        target = min(model.max_batch, model.aimd.size)
    requests = [model.queue.pop()]
    rows = requests[0].rows
    deadline = head.deadline
    while model.queue:
        nxt = model.queue.peek()
        assert nxt is not None
        if rows + nxt.rows > target:
            break
        if policy.early_reject and nxt.deadline < deadline:
            service = durations.service_time(model.key, rows + nxt.rows)
            if service is not None and service > nxt.deadline - start:
                break
            deadline = nxt.deadline
        requests.append(model.queue.pop())
        rows += nxt.rows
    return requests, rows


def start_alone(
    models: Mapping[str, ModelSlot],
    request: Job,
    now: float,
    durations: Durations,
    workers: Mapping[int, WorkerSlot],
) -> tuple[ModelSlot, WorkerSlot, float] | None:
    """Where to run `request` alone at once, and its predicted service time: when its model
    has nothing queued and is profiled, has been idle for at least half as long as the
    request takes to run, a worker holding it is idle, and it is predicted to meet its
    deadline; else None (it goes through the queue). A model that finished a batch more
    recently than that is likely in a wave of requests (clients answered together send again
    together): those are queued, to be batched. (Half: one client's own turnaround, answer to
    next request, is about one run of a small model.) So is a request that may have arrived
    no later than the last one started alone (`Job.arrival`: read in the same turn of
    the loop): both were waiting at once. Reading one request can take longer than half a
    run, so the idle time alone would let each of a turn's requests run alone, one run each,
    and never batch them, once the size-1 estimate is low (measured at low load)."""
    model = models.get(request.model)
    if model is None or model.queue or not model.replicas:
        return None
    if request.arrival <= model.alone_since:
        return None
    if not durations.estimator.profiled(model.key):
        return None
    service = durations.service_time(model.key, request.rows)
    if service is None or now + service > request.deadline:
        return None  # the queue's path says why
    if now - model.finished_at < service / 2:
        return None
    for worker_id in sorted(model.replicas):
        worker = workers.get(worker_id)
        if worker is not None and worker.alive and not worker.inflight and not worker.control:
            return model, worker, service
    return None


class ActionMaker:
    """Makes the scheduler's actions, numbering them from 1 (see the module docstring)."""

    def __init__(
        self,
        clock: Clock,
        durations: Durations,
        policy: SchedulingPolicy,
        queued: QueuedWork,
        tally: Tally,
        *,
        unplaced: Callable[[str, int], None],
    ) -> None:
        self.clock = clock
        self.durations = durations
        self.policy = policy
        self._queued = queued
        self._count = tally.count
        self._unplaced = unplaced
        #: Numbers every action, the generative models' steps too (`steps.Steps`).
        self.ids = self._ids = itertools.count(1)

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
        dispatch.expected = self.durations.load_time(model.key) or DEFAULT_LOAD_SECONDS
        return dispatch

    def batch(self, model: ModelSlot, start: float, decisions: Decisions) -> Dispatch:
        """An INFER of the batch `model`'s queue gives a worker free at `start`."""
        doomed = take_doomed_heads(model, start, durations=self.durations, policy=self.policy)
        if doomed:  # overloaded: a full batch of fresher requests runs instead
            service = self.durations.service_time(model.key, 1) or 0.0
            error = drop_error(model, service, demand_loading=False)
            decisions.rejected.extend((request, error) for request in doomed)
            self._count(model.key, DROPPED, error.reason, len(doomed))
        requests, rows = take_batch(model, start, durations=self.durations, policy=self.policy)
        if not model.queue:
            self._queued.waiting.discard(model.key)
            model.drop_at = float("inf")
        elif self.policy.early_reject:
            self._queued.drops.refresh(model)
        expected = self.durations.service_time(model.key, rows)
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
