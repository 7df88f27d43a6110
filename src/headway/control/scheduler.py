"""The scheduler: which action runs on which worker next, and what is rejected at once.

Pure logic with an injected clock (Clockwork's "consolidate choice"). It keeps one queue per
model (replicas share it), each worker's timeline of actions in flight, and on each `poll`:

1. drops queued requests that can no longer meet their deadline (answered at once, never late);
2. gives each available worker its next action: a queued control action (explicit LOAD or
   UNLOAD) first; else the largest batch of its most urgent loaded model that the estimates
   say will meet the earliest deadline in it; or, with demand loading, a LOAD of the most
   urgent model that no worker holds (evicting idle, least recently used models to fit the
   worker's memory share), when its requests can still make their deadlines after the load.

Each INFER carries the latest time it may start; a worker refuses one that arrives later.
`SchedulingPolicy` switches these behaviours off one by one for a Clipper-style baseline.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from headway.clock import Clock
from headway.control.batching import AIMD, largest_batch
from headway.control.memory import WorkerMemory
from headway.control.policy import HEADWAY, SchedulingPolicy
from headway.control.profiles import LatencyEstimator, percentile
from headway.control.queues import DeadlineQueue
from headway.control.request import Request
from headway.errors import ColdStartTooSlow, DeadlineUnmeetable, HeadwayError, Overloaded

INFER, LOAD, UNLOAD = "infer", "load", "unload"
#: The LOAD duration a worker's timeline assumes before any load was measured.
DEFAULT_LOAD_SECONDS = 0.25
#: At most this many actions are in flight on one worker, whatever `schedule_ahead` allows.
MAX_IN_FLIGHT = 4
#: A model never loaded is expected to load as fast as this percentile of the other models'
#: LOAD estimates: robust to a few slow outliers (a worker's first load also imports the
#: framework, ~1 s), which as the maximum would make every cold start look hopeless.
UNSEEN_LOAD_QUANTILE = 90.0


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
    #: Expected start on the worker's timeline, and the latest start that still meets the
    #: deadlines of the requests it carries (None: no limit).
    earliest: float = 0.0
    latest: float | None = None
    evict: list[str] = field(default_factory=list)


@dataclass(eq=False)
class _Worker:
    id: int
    memory: WorkerMemory
    alive: bool = True
    models: set[str] = field(default_factory=set)
    inflight: deque[Dispatch] = field(default_factory=deque)
    control: deque[Dispatch] = field(default_factory=deque)
    free_at: float = 0.0


@dataclass(eq=False)
class _Model:
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


@dataclass
class Decisions:
    """What one poll decided: actions to send, requests to reject, when to poll again."""

    dispatches: list[Dispatch] = field(default_factory=list)
    rejected: list[tuple[Request, HeadwayError]] = field(default_factory=list)
    wakeup: float | None = None


@dataclass
class Counters:
    """Events the scheduler caused, for metrics and experiments."""

    loads: int = 0
    evictions: int = 0
    cold_starts: int = 0
    refusals: int = 0
    dropped: int = 0
    rejected_at_admission: int = 0


class Scheduler:
    """Deadline-aware batching, loading and eviction over workers. See the module docstring."""

    def __init__(
        self,
        clock: Clock,
        estimator: LatencyEstimator | None = None,
        *,
        policy: SchedulingPolicy = HEADWAY,
        demand_loading: bool = False,
        retries: int = 1,
        overhead_window: int = 64,
    ) -> None:
        self.clock = clock
        self.estimator = estimator or LatencyEstimator()
        self.loads = LatencyEstimator(min_samples=1)
        self.policy = policy
        self.demand_loading = demand_loading
        self.retries = retries
        self.counters = Counters()
        self._models: dict[str, _Model] = {}
        self._workers: dict[int, _Worker] = {}
        self._waiting: set[str] = set()
        #: Lazy min-heaps (stale entries are skipped when met): queued models by drop time, and
        #: models no worker holds or loads by their head request (the candidates for a LOAD).
        self._drops: list[tuple[float, str]] = []
        self._cold: list[tuple[tuple[int, float, int], str]] = []
        self._inflight: dict[int, Dispatch] = {}
        self._ids = itertools.count(1)
        self._overheads: deque[float] = deque(maxlen=overhead_window)
        self._overhead = 0.0

    # -- topology -------------------------------------------------------------------------
    def add_model(
        self,
        key: str,
        *,
        max_batch: int = 32,
        batch_delay: float = 0.0,
        max_queue: int = 4096,
        size_mb: float = 0.0,
    ) -> None:
        if key not in self._models:
            queue = DeadlineQueue(max_queue, fifo=not self.policy.deadline_order)
            self._models[key] = _Model(
                key, queue, max_batch, batch_delay, AIMD(max_batch), size_mb=size_mb
            )

    def remove_model(self, key: str) -> list[Request]:
        """Forget a model; returns its queued requests for the caller to fail."""
        model = self._models.pop(key, None)
        self._waiting.discard(key)
        if model is None:
            return []
        for worker in self._workers.values():
            worker.models.discard(key)
            worker.memory.remove(key)
        return [model.queue.pop() for _ in range(len(model.queue))]

    def has_model(self, key: str) -> bool:
        return key in self._models

    def replicas(self, key: str) -> set[int]:
        model = self._models.get(key)
        return set(model.replicas) if model else set()

    def add_worker(self, worker: int, memory_mb: float | None = None) -> None:
        self._workers[worker] = _Worker(worker, WorkerMemory(memory_mb), free_at=self.clock.now())

    def placed(self, key: str, worker: int, size_mb: float | None = None) -> None:
        """`key` is now loaded on `worker` (`size_mb`: its measured memory, when known)."""
        slot = self._workers[worker]
        slot.models.add(key)
        model = self._models.get(key)
        if model is not None:
            model.replicas.add(worker)
            model.loading.discard(worker)
            if size_mb is not None:
                model.size_mb = size_mb
            if key in slot.memory:
                slot.memory.resize(key, model.size_mb)
            else:
                slot.memory.add(key, model.size_mb, self.clock.now())

    def unplaced(self, key: str, worker: int) -> None:
        slot = self._workers.get(worker)
        if slot is not None:
            slot.models.discard(key)
            slot.memory.remove(key)
        model = self._models.get(key)
        if model is not None:
            model.replicas.discard(worker)
            model.loading.discard(worker)
            if model.queue:
                self._refresh_drop(model)  # unloaded again: a load counts once more
                self._mark_cold(model)

    def load_failed(self, key: str, worker: int) -> None:
        """A LOAD did not succeed: release what it reserved."""
        self.unplaced(key, worker)

    def worker_lost(self, worker: int) -> tuple[list[Request], list[Request]]:
        """A worker died: requeue what it held (once), fail the rest. Returns (retried, failed)."""
        slot = self._workers.pop(worker, None)
        if slot is None:
            return [], []
        held: list[_Model] = []
        for model in self._models.values():
            if worker in model.replicas or worker in model.loading:
                held.append(model)
            model.replicas.discard(worker)
            model.loading.discard(worker)
        retried: list[Request] = []
        failed: list[Request] = []
        for dispatch in slot.inflight:
            self._inflight.pop(dispatch.id, None)
            for request in dispatch.requests:
                request.attempts += 1
                model = self._models.get(request.model)
                if request.attempts <= self.retries and model is not None:
                    self._push(model, request)
                    retried.append(request)
                else:
                    failed.append(request)
        for model in held:
            if model.queue:
                self._refresh_drop(model)
                self._mark_cold(model)
        return retried, failed

    # -- admission ----------------------------------------------------------------------------
    def control(self, worker: int, kind: str, key: str, payload: Any = None) -> Dispatch:
        """Queue a LOAD or UNLOAD for `worker`; it runs before any further INFER there."""
        dispatch = Dispatch(next(self._ids), worker, kind, key, payload=payload)
        self._workers[worker].control.append(dispatch)
        model = self._models.get(key)
        if kind == LOAD and model is not None:
            model.loading.add(worker)
        return dispatch

    def submit(self, request: Request) -> None:
        """Admit a request or raise at once: Overloaded (queue full) or DeadlineUnmeetable."""
        model = self._models[request.model]
        if model.queue.full:
            raise Overloaded(
                f"model {request.model!r}: queue is full ({model.queue.capacity} requests); "
                "retry later or add replicas"
            )
        cold = self.demand_loading and not model.replicas
        self.counters.cold_starts += cold
        if self.policy.early_reject:
            try:
                self._admit(model, request, cold)
            except DeadlineUnmeetable:
                self.counters.rejected_at_admission += 1
                raise
        self._push(model, request)

    def _admit(self, model: _Model, request: Request, cold: bool) -> None:
        now = self.clock.now()
        service = self.service_time(request.model, request.rows)
        left = request.deadline - now
        if left <= 0 or (service is not None and service > left):
            need = f"needs ~{service * 1e3:.2f} ms" if service is not None else "is already late"
            raise DeadlineUnmeetable(
                f"model {request.model!r}: deadline cannot be met: the request {need}, "
                f"{max(left, 0) * 1e3:.2f} ms left; raise the timeout or slo_ms"
            )
        if cold:
            # Only now: a request that could not make it even were the model loaded is not a
            # cold start too slow, and must not be told so.
            load = self._load_wait(model, now)
            if load + (service or 0.0) > left:
                raise ColdStartTooSlow(
                    f"model {request.model!r}: deadline cannot be met: the model is not loaded "
                    f"and loading it takes ~{load * 1e3:.0f} ms; {max(left, 0) * 1e3:.1f} ms left"
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

    def load_time(self, key: str) -> float | None:
        """Predicted seconds to LOAD `key`: its own measurements, else the UNSEEN_LOAD_QUANTILE
        of the other models' estimates, else None (nothing measured yet: admission is
        optimistic, as for INFER)."""
        own = self.loads.estimate(key, 1)
        if own is not None:
            return own
        return self.loads.across(UNSEEN_LOAD_QUANTILE)

    def _load_wait(self, model: _Model, now: float) -> float:
        """Seconds until `model` could run somewhere: 0 if placed, else the rest of a load."""
        if model.replicas:
            return 0.0
        ends = [
            d.earliest + (d.expected or 0.0)
            for w in model.loading
            for d in self._workers[w].inflight
            if d.kind == LOAD and d.model == model.key
        ]
        if ends:
            return max(0.0, min(ends) - now)
        return self.load_time(model.key) or 0.0

    def _latest_start(self, model: _Model, request: Request) -> float:
        """The last moment `request` can start and still be predicted to meet its deadline."""
        return request.deadline - (self.service_time(model.key, request.rows) or 0.0)

    def _push(self, model: _Model, request: Request) -> None:
        model.queue.push(request)
        self._waiting.add(model.key)
        if self.policy.early_reject:
            self._set_drop(model, min(model.drop_at, self._drop_time(model, request)))
        if model.queue.peek() is request:
            self._mark_cold(model)

    def _refresh_drop(self, model: _Model) -> None:
        """Recompute `model.drop_at` after what it depends on changed (its placement, the load
        estimate): a cached time that became too late would keep a hopeless request at the head
        of an unloaded model's queue, and with it the load its other requests still need."""
        if not self.policy.early_reject:
            return  # nothing is ever dropped: no drop time to keep
        self._set_drop(
            model, min((self._drop_time(model, r) for r in model.queue), default=float("inf"))
        )

    def _set_drop(self, model: _Model, when: float) -> None:
        if when != model.drop_at:
            model.drop_at = when
            if when != float("inf") and self.policy.early_reject:
                heapq.heappush(self._drops, (when, model.key))

    def _mark_cold(self, model: _Model) -> None:
        """Index a queued model that no worker holds or loads under its head request."""
        if self.demand_loading and not model.replicas and not model.loading:
            head = model.queue.head_key()
            if head is not None:
                heapq.heappush(self._cold, (head, model.key))

    def _drop_time(self, model: _Model, request: Request) -> float:
        latest = self._latest_start(model, request)
        if self.demand_loading and not model.replicas and not model.loading:
            latest -= self.load_time(model.key) or 0.0
        return latest

    def service_time(self, key: str, rows: int) -> float | None:
        """Predicted seconds from dispatch to answer for `rows` rows (RPC overhead included)."""
        estimate = self.estimator.estimate(key, rows)
        return None if estimate is None else estimate + self._overhead

    # -- decisions ----------------------------------------------------------------------------
    def poll(self) -> Decisions:
        """Decide what available workers run next and which requests to reject."""
        now = self.clock.now()
        decisions = Decisions()
        drops = self._drops
        if self.policy.early_reject:
            while drops and drops[0][0] <= now:
                when, key = heapq.heappop(drops)
                model = self._models.get(key)
                if model is not None and key in self._waiting and model.drop_at == when:
                    self._drop_hopeless(model, now, decisions)
        for worker in self._workers.values():
            while self._available(worker, now):
                dispatch = self._next_action(worker, now, decisions)
                if dispatch is None:
                    break
                decisions.dispatches.append(self._start(worker, dispatch, now))
        if self.policy.early_reject:
            while drops and not self._current_drop(*drops[0]):
                heapq.heappop(drops)
            if drops:
                decisions.wakeup = _earliest(decisions.wakeup, drops[0][0])
        return decisions

    def _current_drop(self, when: float, key: str) -> bool:
        model = self._models.get(key)
        return model is not None and key in self._waiting and model.drop_at == when

    def _available(self, worker: _Worker, now: float) -> bool:
        if not worker.alive:
            return False
        if not worker.inflight:
            return True
        return (
            len(worker.inflight) < MAX_IN_FLIGHT
            and worker.free_at - now <= self.policy.schedule_ahead
            and self.policy.schedule_ahead > 0
        )

    def _next_action(self, worker: _Worker, now: float, decisions: Decisions) -> Dispatch | None:
        if worker.control:
            return worker.control.popleft()
        start = max(now, worker.free_at)
        model = self._most_urgent(worker)
        cold = self._cold_candidate(worker, start) if self.demand_loading else None
        if cold is not None and (model is None or cold[1] < model.queue.head_key()):  # type: ignore[operator]
            return self._load(worker, cold[0], cold[2])
        if model is None:
            return None
        head = model.queue.peek()
        assert head is not None
        if model.batch_delay and model.queue.rows < model.max_batch:
            # Hold a small batch for more rows, but never past the moment a queued request
            # would have to be dropped (the queue is short here: fewer than max_batch rows).
            ready_at = head.arrival + model.batch_delay
            if now < ready_at and ready_at < min(self._latest_start(model, r) for r in model.queue):
                decisions.wakeup = _earliest(decisions.wakeup, ready_at)
                return None
        return self._batch(model, start)

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
            head_key = model.queue.head_key()
            if head_key is not None and (best_key is None or head_key < best_key):
                best, best_key = model, head_key
        return best

    def _cold_candidate(
        self, worker: _Worker, start: float
    ) -> tuple[_Model, tuple[int, float, int], list[str]] | None:
        """The most urgent queued model that no worker holds or loads, that fits this worker
        (after evictions) and, under `feasible_loads_only`, can still make its deadline."""
        best: tuple[_Model, tuple[int, float, int], list[str]] | None = None
        pinned = {d.model for d in worker.inflight}
        cold, passed, seen = self._cold, [], set()
        while cold and best is None:  # in head order: the first that qualifies is the best
            entry = heapq.heappop(cold)
            head_key, key = entry
            model = self._models.get(key)
            if (
                model is None
                or key in seen
                or key not in self._waiting
                or model.replicas
                or model.loading
                or model.queue.head_key() != head_key
            ):
                continue  # stale: the model was placed, emptied or has another head now
            seen.add(key)
            passed.append(entry)
            head = model.queue.peek()
            assert head is not None
            if self.policy.feasible_loads_only:
                ready = start + (self.load_time(key) or 0.0)
                if ready + (self.service_time(key, head.rows) or 0.0) > head.deadline:
                    continue
            victims = worker.memory.victims(
                model.size_mb,
                pinned=pinned,
                idle=lambda k: k not in self._waiting,
                idle_first=self.policy.idle_first_eviction,
            )
            if victims is not None:
                best = (model, head_key, victims)
        for entry in passed:
            heapq.heappush(cold, entry)
        return best

    def _load(self, worker: _Worker, model: _Model, victims: list[str]) -> Dispatch:
        now = self.clock.now()
        for key in victims:
            self.unplaced(key, worker.id)
            self.counters.evictions += 1
        worker.memory.add(model.key, model.size_mb, now)
        model.loading.add(worker.id)
        self.counters.loads += 1
        dispatch = Dispatch(next(self._ids), worker.id, LOAD, model.key, evict=victims)
        dispatch.expected = self.load_time(model.key) or DEFAULT_LOAD_SECONDS
        return dispatch

    def _batch(self, model: _Model, start: float) -> Dispatch:
        head = model.queue.peek()
        assert head is not None
        if self.policy.profile_batching:
            target = largest_batch(
                self.estimator,
                model.key,
                budget=head.deadline - start,
                cap=model.max_batch,
                aimd=model.aimd,
                overhead=self._overhead,
            )
        else:
            target = min(model.max_batch, model.aimd.size)
        requests = [model.queue.pop()]
        rows = requests[0].rows
        earliest = head.deadline
        while model.queue:
            nxt = model.queue.peek()
            assert nxt is not None
            if rows + nxt.rows > target:
                break
            if self.policy.early_reject and nxt.deadline < earliest:
                # a lower priority level (or FIFO order) with an earlier deadline
                service = self.service_time(model.key, rows + nxt.rows)
                if service is not None and service > nxt.deadline - start:
                    break
                earliest = nxt.deadline
            requests.append(model.queue.pop())
            rows += nxt.rows
        if not model.queue:
            self._waiting.discard(model.key)
            model.drop_at = float("inf")
        elif self.policy.early_reject:
            self._set_drop(model, min(self._drop_time(model, r) for r in model.queue))
        dispatch = Dispatch(next(self._ids), -1, INFER, model.key, requests, rows)
        dispatch.expected = self.service_time(model.key, rows)
        if self.policy.early_reject and dispatch.expected is not None:
            dispatch.latest = min(r.deadline for r in requests) - dispatch.expected
        return dispatch

    def _start(self, worker: _Worker, dispatch: Dispatch, now: float) -> Dispatch:
        dispatch.worker = worker.id
        dispatch.sent_at = now
        dispatch.earliest = max(now, worker.free_at)
        worker.free_at = dispatch.earliest + (dispatch.expected or 0.0)
        worker.inflight.append(dispatch)
        worker.memory.touch(dispatch.model, now)
        self._inflight[dispatch.id] = dispatch
        return dispatch

    def _drop_hopeless(self, model: _Model, now: float, decisions: Decisions) -> None:
        doomed = {id(r) for r in model.queue if self._drop_time(model, r) <= now}
        for request in model.queue.remove_if(doomed):
            service = self.service_time(model.key, request.rows) or 0.0
            error: HeadwayError
            if model.replicas:
                error = DeadlineUnmeetable(
                    f"model {model.key!r}: rejected before running: its deadline passed while "
                    f"queued (needs ~{service * 1e3:.2f} ms to run)"
                )
            elif not self.demand_loading:
                error = DeadlineUnmeetable(
                    f"model {model.key!r}: rejected before running: no replica became ready in time"
                )
            else:
                error = ColdStartTooSlow(
                    f"model {model.key!r}: rejected before running: the model could not be "
                    "loaded in time"
                )
            decisions.rejected.append((request, error))
            self.counters.dropped += 1
        if model.queue:
            self._set_drop(model, min(self._drop_time(model, r) for r in model.queue))
            self._mark_cold(model)
        else:
            self._waiting.discard(model.key)
            model.drop_at = float("inf")

    # -- results ------------------------------------------------------------------------------
    def complete(self, dispatch_id: int, duration: float | None) -> Dispatch | None:
        """An action finished (`duration`: seconds the worker measured; None if it failed)."""
        dispatch = self._finish(dispatch_id)
        if dispatch is None:
            return None
        now = self.clock.now()
        if dispatch.kind == LOAD and duration is not None:
            unseen = self.loads.across(UNSEEN_LOAD_QUANTILE)  # models never loaded
            self.loads.observe(dispatch.model, 1, duration)
            if self.demand_loading and self.loads.across(UNSEEN_LOAD_QUANTILE) != unseen:
                # unloaded models' drop times count the new estimate (their own estimates,
                # where they have one, did not change: only this model's did, and it is loaded)
                for key in self._waiting:
                    model = self._models[key]
                    if not model.replicas and not model.loading:
                        self._refresh_drop(model)
        if dispatch.kind == INFER and duration is not None:
            if all(r.measured for r in dispatch.requests):
                self.estimator.observe(dispatch.model, dispatch.rows, duration)
            self._overheads.append(max(0.0, now - dispatch.sent_at - duration))
            if len(self._overheads) % 8 == 1 or len(self._overheads) < 8:
                self._overhead = percentile(list(self._overheads), 90.0)
            model = self._models.get(dispatch.model)
            if model is not None:
                met = all(now <= r.deadline for r in dispatch.requests)
                model.aimd.on_batch(met_deadlines=met)
                model.batches += 1
                model.late_batches += not met
        return dispatch

    def refused(self, dispatch_id: int) -> Dispatch | None:
        """The worker refused an INFER that reached it after its latest start: requeue its
        requests (the next poll drops those that can no longer make it)."""
        dispatch = self._finish(dispatch_id)
        if dispatch is None:
            return None
        self.counters.refusals += 1
        model = self._models.get(dispatch.model)
        if model is not None:
            for request in dispatch.requests:
                self._push(model, request)
        return dispatch

    def _finish(self, dispatch_id: int) -> Dispatch | None:
        dispatch = self._inflight.pop(dispatch_id, None)
        if dispatch is None:
            return None
        worker = self._workers.get(dispatch.worker)
        if worker is not None:
            if dispatch in worker.inflight:
                worker.inflight.remove(dispatch)
            if not worker.inflight:
                worker.free_at = self.clock.now()
        return dispatch

    # -- statistics ---------------------------------------------------------------------------
    def queue_length(self, key: str) -> int:
        model = self._models.get(key)
        return len(model.queue) if model else 0

    def busy_workers(self) -> int:
        return sum(1 for w in self._workers.values() if w.inflight)

    def worker_memory(self) -> dict[int, tuple[float, float | None, int]]:
        """Per worker: (used MB, capacity MB, resident models)."""
        return {
            w.id: (w.memory.used_mb, w.memory.capacity_mb, len(w.memory.resident))
            for w in self._workers.values()
        }

    def statistics(self) -> dict[str, Any]:
        estimates = self.estimator.snapshot()
        return {
            "policy": self.policy.name,
            "overhead_s": self._overhead,
            "counters": vars(self.counters).copy(),
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
