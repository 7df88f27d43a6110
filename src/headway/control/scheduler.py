"""The scheduler: which batch runs on which worker next, and what is rejected at once.

Pure logic with an injected clock. It keeps one deadline-ordered queue per model (replicas
share it), knows which worker is busy with which action (one at a time per worker), and on
each `poll` hands out actions for idle workers: control actions (LOAD/UNLOAD) first, then the
largest batch of the most urgent model that profiles predict will meet its earliest deadline.
Requests that can no longer meet their deadline are rejected before they run, never late.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from headway.clock import Clock
from headway.control.batching import AIMD, largest_batch
from headway.control.profiles import LatencyEstimator, percentile
from headway.control.queues import DeadlineQueue
from headway.control.request import Request
from headway.errors import DeadlineUnmeetable, HeadwayError, Overloaded

INFER, LOAD, UNLOAD = "infer", "load", "unload"


@dataclass(eq=False)
class Dispatch:
    """One action handed to one worker."""

    id: int
    worker: int
    kind: str
    model: str
    requests: list[Request] = field(default_factory=list)
    rows: int = 0
    sent_at: float = 0.0
    expected: float | None = None
    payload: Any = None


@dataclass(eq=False)
class _Worker:
    id: int
    alive: bool = True
    models: set[str] = field(default_factory=set)
    inflight: Dispatch | None = None
    control: deque[Dispatch] = field(default_factory=deque)


@dataclass(eq=False)
class _Model:
    key: str
    queue: DeadlineQueue
    max_batch: int
    batch_delay: float
    aimd: AIMD
    replicas: set[int] = field(default_factory=set)
    drop_at: float = float("inf")
    batches: int = 0
    late_batches: int = 0


@dataclass
class Decisions:
    """What one poll decided: actions to send, requests to reject, when to poll again."""

    dispatches: list[Dispatch] = field(default_factory=list)
    rejected: list[tuple[Request, HeadwayError]] = field(default_factory=list)
    wakeup: float | None = None


class Scheduler:
    """Deadline-aware batching over a set of workers. See the module docstring."""

    def __init__(
        self,
        clock: Clock,
        estimator: LatencyEstimator | None = None,
        *,
        retries: int = 1,
        overhead_window: int = 64,
    ) -> None:
        self.clock = clock
        self.estimator = estimator or LatencyEstimator()
        self.retries = retries
        self._models: dict[str, _Model] = {}
        self._workers: dict[int, _Worker] = {}
        self._waiting: set[str] = set()
        self._inflight: dict[int, Dispatch] = {}
        self._ids = itertools.count(1)
        self._overheads: deque[float] = deque(maxlen=overhead_window)
        self._overhead = 0.0

    # -- topology -------------------------------------------------------------------------
    def add_model(
        self, key: str, *, max_batch: int = 32, batch_delay: float = 0.0, max_queue: int = 4096
    ) -> None:
        if key not in self._models:
            self._models[key] = _Model(
                key, DeadlineQueue(max_queue), max_batch, batch_delay, AIMD(max_batch)
            )

    def remove_model(self, key: str) -> list[Request]:
        """Forget a model; returns its queued requests for the caller to fail."""
        model = self._models.pop(key, None)
        self._waiting.discard(key)
        if model is None:
            return []
        return [model.queue.pop() for _ in range(len(model.queue))]

    def has_model(self, key: str) -> bool:
        return key in self._models

    def replicas(self, key: str) -> set[int]:
        model = self._models.get(key)
        return set(model.replicas) if model else set()

    def add_worker(self, worker: int) -> None:
        self._workers[worker] = _Worker(worker)

    def placed(self, key: str, worker: int) -> None:
        """`key` is now loaded on `worker`."""
        self._workers[worker].models.add(key)
        if key in self._models:
            self._models[key].replicas.add(worker)

    def unplaced(self, key: str, worker: int) -> None:
        if worker in self._workers:
            self._workers[worker].models.discard(key)
        if key in self._models:
            self._models[key].replicas.discard(worker)

    def worker_lost(self, worker: int) -> tuple[list[Request], list[Request]]:
        """A worker died: requeue what it held (once), fail the rest. Returns (retried, failed)."""
        slot = self._workers.pop(worker, None)
        if slot is None:
            return [], []
        for key in slot.models:
            if key in self._models:
                self._models[key].replicas.discard(worker)
        retried: list[Request] = []
        failed: list[Request] = []
        dispatch = slot.inflight
        if dispatch is not None:
            self._inflight.pop(dispatch.id, None)
            for request in dispatch.requests:
                request.attempts += 1
                model = self._models.get(request.model)
                if request.attempts <= self.retries and model is not None:
                    self._push(model, request)
                    retried.append(request)
                else:
                    failed.append(request)
        return retried, failed

    # -- actions ----------------------------------------------------------------------------
    def control(self, worker: int, kind: str, key: str, payload: Any = None) -> Dispatch:
        """Queue a LOAD or UNLOAD for `worker`; it runs before any further INFER there."""
        dispatch = Dispatch(next(self._ids), worker, kind, key, payload=payload)
        self._workers[worker].control.append(dispatch)
        return dispatch

    def submit(self, request: Request) -> None:
        """Admit a request or raise at once: Overloaded (queue full) or DeadlineUnmeetable."""
        model = self._models[request.model]
        if model.queue.full:
            raise Overloaded(
                f"model {request.model!r}: queue is full ({model.queue.capacity} requests); "
                "retry later or add replicas"
            )
        now = self.clock.now()
        service = self.service_time(request.model, request.rows)
        left = request.deadline - now
        if left <= 0 or (service is not None and service > left):
            need = f"needs ~{service * 1e3:.2f} ms" if service is not None else "is already late"
            raise DeadlineUnmeetable(
                f"model {request.model!r}: deadline cannot be met: the request {need}, "
                f"{max(left, 0) * 1e3:.2f} ms left; raise the timeout or slo_ms"
            )
        if service is not None and model.queue.rows and model.replicas:
            # Only the rows that run before this request delay it, and they run batched with
            # it. All queued rows bound them; count exactly only when that bound does not fit.
            finish = self._finish_time(model, model.queue.rows + request.rows)
            if finish is not None and finish > left:
                mine = (request.priority, request.deadline)
                ahead = sum(r.rows for r in model.queue if (r.priority, r.deadline) <= mine)
                finish = self._finish_time(model, ahead + request.rows) if ahead else service
                if finish is not None and finish > left:
                    raise DeadlineUnmeetable(
                        f"model {request.model!r}: deadline cannot be met: {ahead} rows queued "
                        f"ahead; with them it needs ~{finish * 1e3:.1f} ms, "
                        f"{left * 1e3:.1f} ms left"
                    )
        self._push(model, request)

    def _finish_time(self, model: _Model, rows: int) -> float | None:
        """Predicted seconds until `rows` queued rows have run: one batch if they fit in one,
        else rounds of full batches over the model's replicas."""
        if rows <= model.max_batch:
            return self.service_time(model.key, rows)
        full = self.service_time(model.key, model.max_batch)
        if full is None:
            return None
        batches = -(-rows // model.max_batch)
        return -(-batches // max(1, len(model.replicas))) * full

    def _latest_start(self, model: _Model, request: Request) -> float:
        """The last moment `request` can start and still be predicted to meet its deadline."""
        return request.deadline - (self.service_time(model.key, request.rows) or 0.0)

    def _push(self, model: _Model, request: Request) -> None:
        model.queue.push(request)
        self._waiting.add(model.key)
        model.drop_at = min(model.drop_at, self._latest_start(model, request))

    def service_time(self, key: str, rows: int) -> float | None:
        """Predicted seconds from dispatch to answer for `rows` rows (RPC overhead included)."""
        estimate = self.estimator.estimate(key, rows)
        return None if estimate is None else estimate + self._overhead

    def poll(self) -> Decisions:
        """Decide what idle workers run now and which requests to reject."""
        now = self.clock.now()
        decisions = Decisions()
        for key in list(self._waiting):
            model = self._models[key]
            if now >= model.drop_at:
                self._drop_hopeless(model, now, decisions)
        for worker in self._workers.values():
            if worker.inflight is not None or not worker.alive:
                continue
            if worker.control:
                decisions.dispatches.append(self._start(worker, worker.control.popleft(), now))
                continue
            model = self._most_urgent(worker)
            if model is None:
                continue
            head = model.queue.peek()
            assert head is not None
            if model.batch_delay and model.queue.rows < model.max_batch:
                # Hold a small batch for more rows, but never past the moment a queued request
                # would have to be dropped (the queue is short here: fewer than max_batch rows).
                ready_at = head.arrival + model.batch_delay
                if now < ready_at and ready_at < min(
                    self._latest_start(model, r) for r in model.queue
                ):
                    decisions.wakeup = _earliest(decisions.wakeup, ready_at)
                    continue
            decisions.dispatches.append(self._start(worker, self._batch(model, now), now))
        for key in self._waiting:
            drop_at = self._models[key].drop_at
            if drop_at != float("inf"):
                decisions.wakeup = _earliest(decisions.wakeup, drop_at)
        return decisions

    def _most_urgent(self, worker: _Worker) -> _Model | None:
        best: _Model | None = None
        best_key: tuple[int, float, int] | None = None
        candidates = (
            self._waiting & worker.models
            if len(worker.models) > len(self._waiting)
            else {k for k in worker.models if k in self._waiting}
        )
        for key in candidates:
            model = self._models[key]
            head = model.queue.peek()
            if head is not None and (best_key is None or head.sort_key() < best_key):
                best, best_key = model, head.sort_key()
        return best

    def _batch(self, model: _Model, now: float) -> Dispatch:
        head = model.queue.peek()
        assert head is not None
        target = largest_batch(
            self.estimator,
            model.key,
            budget=head.deadline - now,
            cap=model.max_batch,
            aimd=model.aimd,
            overhead=self._overhead,
        )
        requests = [model.queue.pop()]
        rows = requests[0].rows
        earliest = head.deadline
        while model.queue:
            nxt = model.queue.peek()
            assert nxt is not None
            if rows + nxt.rows > target:
                break
            if nxt.deadline < earliest:  # a lower priority level with an earlier deadline
                service = self.service_time(model.key, rows + nxt.rows)
                if service is not None and service > nxt.deadline - now:
                    break
                earliest = nxt.deadline
            requests.append(model.queue.pop())
            rows += nxt.rows
        if not model.queue:
            self._waiting.discard(model.key)
            model.drop_at = float("inf")
        dispatch = Dispatch(next(self._ids), -1, INFER, model.key, requests, rows)
        dispatch.expected = self.service_time(model.key, rows)
        return dispatch

    def _start(self, worker: _Worker, dispatch: Dispatch, now: float) -> Dispatch:
        dispatch.worker = worker.id
        dispatch.sent_at = now
        worker.inflight = dispatch
        self._inflight[dispatch.id] = dispatch
        return dispatch

    def _drop_hopeless(self, model: _Model, now: float, decisions: Decisions) -> None:
        doomed = {id(r) for r in model.queue if self._latest_start(model, r) <= now}
        for request in model.queue.remove_if(doomed):
            service = self.service_time(model.key, request.rows) or 0.0
            why = (
                "no replica became ready in time"
                if not model.replicas
                else f"its deadline passed while queued (needs ~{service * 1e3:.2f} ms to run)"
            )
            decisions.rejected.append(
                (
                    request,
                    DeadlineUnmeetable(f"model {model.key!r}: rejected before running: {why}"),
                )
            )
        if model.queue:
            model.drop_at = min(self._latest_start(model, r) for r in model.queue)
        else:
            self._waiting.discard(model.key)
            model.drop_at = float("inf")

    def complete(self, dispatch_id: int, duration: float | None) -> Dispatch | None:
        """An action finished (`duration`: seconds the worker measured; None if it failed)."""
        dispatch = self._inflight.pop(dispatch_id, None)
        if dispatch is None:
            return None
        worker = self._workers.get(dispatch.worker)
        if worker is not None and worker.inflight is dispatch:
            worker.inflight = None
        if dispatch.kind == INFER and duration is not None:
            now = self.clock.now()
            if all(r.measured for r in dispatch.requests):
                self.estimator.observe(dispatch.model, dispatch.rows, duration)
            self._overheads.append(max(0.0, now - dispatch.sent_at - duration))
            self._overhead = percentile(list(self._overheads), 90.0)
            model = self._models.get(dispatch.model)
            if model is not None:
                met = all(now <= r.deadline for r in dispatch.requests)
                model.aimd.on_batch(met_deadlines=met)
                model.batches += 1
                model.late_batches += not met
        return dispatch

    # -- statistics ---------------------------------------------------------------------------
    def queue_length(self, key: str) -> int:
        model = self._models.get(key)
        return len(model.queue) if model else 0

    def busy_workers(self) -> int:
        return sum(1 for w in self._workers.values() if w.inflight is not None)

    def statistics(self) -> dict[str, Any]:
        estimates = self.estimator.snapshot()
        return {
            "overhead_s": self._overhead,
            "models": {
                key: {
                    "queue": len(m.queue),
                    "replicas": sorted(m.replicas),
                    "aimd_limit": m.aimd.limit,
                    "batches": m.batches,
                    "late_batches": m.late_batches,
                    "estimates_s": estimates.get(key, {}),
                }
                for key, m in self._models.items()
            },
        }


def _earliest(current: float | None, when: float) -> float:
    """The earlier of a wakeup time and another (None: no wakeup yet; 0.0 is a real time)."""
    return when if current is None else min(current, when)
