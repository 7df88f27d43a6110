"""A discrete-event simulation of a serving cluster: a trace, a scheduler, simulated workers.

Time is virtual (a `ManualClock`), so a run of minutes of traffic over thousands of models
and dozens of workers takes seconds. The scheduler is the server's own, unchanged; only the
workers and the network (a fixed one-way delay) are simulated.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD, Dispatch
from headway.control.predictions import TRUSTED_LOADS
from headway.control.request import Request
from headway.control.scheduler import Scheduler
from headway.control.scheduling_policy import HEADWAY, SchedulingPolicy
from headway.errors import HeadwayError
from headway.sim.worker import Execution, SimulatedWorker


@dataclass(frozen=True)
class ModelProfile:
    """A model as the simulation knows it: measured durations per batch size, load time, size."""

    durations: dict[int, float]
    load_seconds: float
    size_mb: float
    max_batch: int = 16

    def duration(self, rows: int) -> float:
        """Interpolated linearly between measured batch sizes (extrapolated per row beyond)."""
        sizes = sorted(self.durations)
        if rows in self.durations:
            return self.durations[rows]
        if rows > sizes[-1]:
            return self.durations[sizes[-1]] * rows / sizes[-1]
        upper = next(s for s in sizes if s > rows)
        lower = max((s for s in sizes if s < rows), default=None)
        if lower is None:
            return self.durations[upper]
        share = (rows - lower) / (upper - lower)
        return self.durations[lower] + share * (self.durations[upper] - self.durations[lower])


class Outcome(IntEnum):
    PENDING = 0
    ANSWERED = 1
    REJECTED = 2


@dataclass
class SimulationResult:
    """Per-request outcomes and what the scheduler did, with the usual summaries."""

    policy: str
    arrivals: np.ndarray
    deadlines: np.ndarray
    finished: np.ndarray
    outcome: np.ndarray
    reasons: dict[str, int]
    counters: dict[str, int]
    duration: float
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self, start: float | None = None) -> dict[str, Any]:
        """Figures of the requests that arrived at `start` or later (all by default: a warm-up
        before `start` is left out); rates divide by the time from `start` to the last arrival."""
        window = slice(None) if start is None else self.arrivals >= start
        arrivals, finished = self.arrivals[window], self.finished[window]
        outcome, deadlines = self.outcome[window], self.deadlines[window]
        duration = self.duration if start is None else float(self.arrivals[-1] - start)
        answered = outcome == Outcome.ANSWERED
        latency = (finished - arrivals)[answered]
        on_time = answered & (finished <= deadlines + 1e-12)
        total = len(outcome)
        pct = (
            dict(
                zip(
                    ("p50", "p99", "p99.9"),
                    np.percentile(latency, [50, 99, 99.9]) * 1e3,
                    strict=True,
                )
            )
            if latency.size
            else {}
        )
        return {
            "policy": self.policy,
            "requests": total,
            "answered": int(answered.sum()),
            "on_time": int(on_time.sum()),
            "late": int((answered & ~on_time).sum()),
            "rejected": int((outcome == Outcome.REJECTED).sum()),
            "unanswered": int((outcome == Outcome.PENDING).sum()),
            "slo_attainment": float(on_time.sum() / total) if total else 0.0,
            "goodput_rps": float(on_time.sum() / duration) if duration > 0 else 0.0,
            "throughput_rps": float(answered.sum() / duration) if duration > 0 else 0.0,
            "latency_ms": {
                **{k: round(float(v), 3) for k, v in pct.items()},
                "max": round(float(latency.max() * 1e3), 3) if latency.size else None,
            },
            "reasons": dict(self.reasons),
            **{k: v for k, v in self.counters.items() if k in ("loads", "evictions", "refusals")},
        }


class Simulation:
    """Replays a trace through a `Scheduler` over `SimulatedWorker`s. See the module docstring."""

    def __init__(
        self,
        profiles: dict[str, ModelProfile],
        *,
        workers: int,
        memory_mb: float,
        policy: SchedulingPolicy = HEADWAY,
        rpc_seconds: float = 0.0002,
        noise: float = 0.0,
        seed_profiles: bool | None = None,
        max_queue: int = 4096,
        seed: int = 0,
    ) -> None:
        self.profiles = profiles
        self.clock = ManualClock()
        self.policy = policy
        self.scheduler = Scheduler(self.clock, policy=policy, demand_loading=True)
        self.rpc = rpc_seconds
        #: Headway starts from measured profiles (as Clockwork does); the baseline learns.
        self.seed_profiles = policy.profile_batching if seed_profiles is None else seed_profiles
        self.max_queue = max_queue
        self.workers = [
            SimulatedWorker(w, self._duration, noise=noise, seed=seed) for w in range(workers)
        ]
        for worker in self.workers:
            self.scheduler.add_worker(worker.id, memory_mb=memory_mb)
        self._events: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self._wakeup = float("inf")

    def _duration(self, key: str, rows: int) -> float:
        profile = self.profiles[key]
        return profile.load_seconds if rows == 0 else profile.duration(rows)

    def register(self, key: str) -> None:
        """Tell the scheduler of model `key` (seeded with its profile when `seed_profiles`)."""
        if self.scheduler.has_model(key):
            return
        profile = self.profiles[key]
        self.scheduler.add_model(
            key, max_batch=profile.max_batch, max_queue=self.max_queue, size_mb=profile.size_mb
        )
        if self.seed_profiles:  # enough samples per size for the estimates to be trusted
            for _ in range(self.scheduler.estimator.min_samples):
                for rows, seconds in profile.durations.items():
                    self.scheduler.estimator.observe(key, rows, seconds)
            for _ in range(TRUSTED_LOADS):  # as many as the scheduler trusts over others'
                self.scheduler.loads.observe(key, 1, profile.load_seconds)

    def run(
        self, times: np.ndarray, models: Sequence[str], slo: float, *, drain: float = 10.0
    ) -> SimulationResult:
        """Feed requests (`times` sorted, seconds; `models` their keys) with deadline `slo`."""
        total = len(times)
        arrivals = np.asarray(times, dtype=np.float64)
        deadlines = arrivals + slo
        finished = np.full(total, np.nan)
        outcome = np.zeros(total, dtype=np.int8)
        reasons: dict[str, int] = {}

        def arrive(index: int, now: float) -> Request:
            key = models[index]
            self.register(key)
            return Request(key, {}, 1, now, float(deadlines[index]), token=index)

        def answered(request: Request, now: float) -> None:
            outcome[request.token] = Outcome.ANSWERED
            finished[request.token] = now

        def rejected(request: Request, error: HeadwayError, now: float) -> None:
            outcome[request.token] = Outcome.REJECTED
            finished[request.token] = now
            reasons[error.reason] = reasons.get(error.reason, 0) + 1

        self.drive(arrivals, arrive, answered, rejected, drain=drain)
        duration = float(arrivals[-1] - arrivals[0]) if total > 1 else 1.0
        span = max(self.clock.now(), duration) * len(self.workers)
        busy = {kind: sum(w.busy[kind] for w in self.workers) for kind in (INFER, LOAD)}
        return SimulationResult(
            self.policy.name,
            arrivals,
            deadlines,
            finished,
            outcome,
            reasons,
            dict(vars(self.scheduler.counters)),
            duration,
            extra={"utilisation": {kind: t / span for kind, t in busy.items()}},
        )

    def at(self, when: float, action: Callable[[float], None]) -> None:
        """Call `action(now)` at virtual time `when` during `drive` (then decide): what changes
        the cluster while it runs, e.g. an autoscaler placing a model on one more worker."""
        heapq.heappush(self._events, (when, next(self._seq), 3, action))

    def drive(
        self,
        arrivals: np.ndarray,
        arrive: Callable[[int, float], Request],
        answered: Callable[[Request, float], None],
        rejected: Callable[[Request, HeadwayError, float], None],
        *,
        drain: float = 10.0,
    ) -> None:
        """The event loop: at each of `arrivals` (sorted seconds) submit `arrive(index, now)`;
        report each request answered or rejected. `answered` may submit further requests to
        `self.scheduler` (a pipeline's next stages): they are decided at the same instant."""
        total = len(arrivals)

        def decide(now: float) -> None:
            decisions = self.scheduler.poll()
            for request, error in decisions.rejected:
                rejected(request, error, now)
            for dispatch in decisions.dispatches:
                execution = self.workers[dispatch.worker].execute(dispatch, now + self.rpc)
                heapq.heappush(
                    self._events, (execution.finished + self.rpc, next(self._seq), 1, execution)
                )
            if decisions.wakeup is not None and decisions.wakeup < self._wakeup:
                self._wakeup = decisions.wakeup
                heapq.heappush(self._events, (decisions.wakeup, next(self._seq), 2, None))

        end = (arrivals[-1] if total else 0.0) + drain
        cursor = 0
        while cursor < total or self._events:
            next_event = self._events[0][0] if self._events else float("inf")
            if cursor < total and arrivals[cursor] <= next_event:
                now = float(arrivals[cursor])
                if now > end:
                    break
                self.clock.set(max(now, self.clock.now()))
                request = arrive(cursor, now)
                try:
                    self.scheduler.submit(request)
                except HeadwayError as error:
                    rejected(request, error, now)
                cursor += 1
                decide(now)
                continue
            when, _, kind, payload = heapq.heappop(self._events)
            if when > end:
                break
            self.clock.set(max(when, self.clock.now()))
            if kind == 2:
                if when >= self._wakeup:
                    self._wakeup = float("inf")
            elif kind == 3:
                payload(when)
            else:
                self._complete(payload, when, answered)
            decide(when)

    def _complete(
        self, execution: Execution, now: float, answered: Callable[[Request, float], None]
    ) -> None:
        dispatch: Dispatch = execution.dispatch
        if execution.refused:
            self.scheduler.refused(dispatch.id)
            return
        self.scheduler.complete(dispatch.id, execution.duration)
        if dispatch.kind == LOAD:
            if execution.duration is not None:
                self.scheduler.placed(dispatch.model, dispatch.worker)
            else:
                self.scheduler.load_failed(dispatch.model, dispatch.worker)
        elif dispatch.kind == INFER and execution.duration is not None:
            for request in dispatch.requests:
                answered(request, now)
