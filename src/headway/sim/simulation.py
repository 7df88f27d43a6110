"""The scheduler-level event loop the planner's pipeline estimator runs on (`drive`).

A trace of single requests is replayed through the server's own controller instead
(`ServerSimulation`); docs/decisions.md says why pipelines are not, yet. Time is virtual (a
`ManualClock`); only the workers and the network (a fixed one-way delay) are simulated.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD, Dispatch
from headway.control.request import Request
from headway.control.scheduler import Scheduler
from headway.control.scheduling_policy import HEADWAY, SchedulingPolicy
from headway.errors import HeadwayError
from headway.sim.results import ModelProfile, seed_profile
from headway.sim.worker import Execution, SimulatedWorker


class Simulation:
    """A `Scheduler` over `SimulatedWorker`s, driven by `drive`. See the module docstring."""

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
        if self.seed_profiles:
            seed_profile(self.scheduler, key, profile)

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
