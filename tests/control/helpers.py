"""What the scheduler's hand-worked tests share: a scheduler built from its workers and models,
times in milliseconds, seeded estimates and requests tagged so a dispatch shows which ones it
carries."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from headway.clock import Clock, ManualClock, TimerClock
from headway.control.actions import LOAD, Dispatch
from headway.control.admission.unread import UnreadRefusals
from headway.control.controller import Controller
from headway.control.estimates.profiles import LatencyEstimator
from headway.control.jobs import Job
from headway.control.model_stats import ModelStats
from headway.control.policy import HEADWAY, SchedulingPolicy
from headway.control.request import (
    DEFAULT_PRIORITY,
    FutureReceiver,
    InferenceRequest,
    Prediction,
    Tensors,
)
from headway.control.scheduling.scheduler import Scheduler
from headway.repository import ModelConfig


class Tag(str):
    """A job's receiver in the scheduler's tests: a name to tell jobs apart; nobody hears its
    answer."""

    def part(self, outputs: Tensors) -> None:
        pass

    def done(self, prediction: Prediction) -> None:
        pass

    def fail(self, error: Exception) -> None:
        pass


def submit(
    controller: Controller,
    name: str,
    inputs: Tensors,
    *,
    then: Callable[[asyncio.Future[Prediction]], None] | None = None,
    version: str | None = None,
    outputs: Sequence[str] | None = None,
    timeout: float | None = None,
    priority: int | None = None,
) -> asyncio.Future[Prediction]:
    """`Controller.submit` of a request for `name` arriving now, its answer a future
    (`then(future)` the moment it is settled)."""
    future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
    request = InferenceRequest(
        name, version=version, timeout=timeout, priority=priority, inputs=inputs, outputs=outputs
    )
    controller.submit(request, FutureReceiver(future, then))
    return future


async def infer(
    controller: Controller,
    name: str,
    inputs: Tensors,
    *,
    version: str | None = None,
    timeout: float | None = None,
) -> Prediction:
    """`Controller.infer` of a request for `name` arriving now."""
    return await controller.infer(
        InferenceRequest(name, version=version, timeout=timeout, inputs=inputs)
    )


def scheduler(
    clock: TimerClock,
    placements: dict[int, list[str]],
    *,
    sizes: dict[str, float] | None = None,
    memory_mb: float | dict[int, float | None] | None = None,
    place: bool = True,
    policy: SchedulingPolicy = HEADWAY,
    demand_loading: bool = False,
    min_samples: int = 3,
    max_batch: int = 32,
    batch_delay: float = 0.0,
    max_queue: int = 4096,
    inline: bool = False,
    own_in_flight: bool = False,
) -> Scheduler:
    """Workers (`memory_mb`: each one's memory share, or one for all) and the models on each
    (`place=False`: known, not yet placed). `sizes`: models' memory in MB; a model in it on no
    worker is known and not placed. The estimator keeps 10 runs per batch size and answers
    their 99th percentile; `min_samples` runs (`seed` gives 3) make a model profiled."""
    estimator = LatencyEstimator(window=10, quantile=99.0, min_samples=min_samples)
    s = Scheduler(
        clock,
        estimator,
        policy=policy,
        demand_loading=demand_loading,
        inline=inline,
        own_in_flight=own_in_flight,
    )
    unplaced = dict(sizes or {})

    def add(key: str, size_mb: float) -> None:
        s.placement.add_model(
            key, size_mb=size_mb, max_batch=max_batch, batch_delay=batch_delay, max_queue=max_queue
        )

    for worker, keys in placements.items():
        share = memory_mb.get(worker) if isinstance(memory_mb, dict) else memory_mb
        s.placement.add_worker(worker, memory_mb=share)
        for key in keys:
            add(key, unplaced.pop(key, 0.0))
            if place:
                s.placed(key, worker)
    for key, size in unplaced.items():
        add(key, size)
    return s


def demand(
    clock: TimerClock,
    workers: dict[int, float | None],
    sizes: dict[str, float],
    *,
    schedule_ahead: float = 0.0,
    max_batch: int = 8,
    full_batches_ahead: bool = True,
) -> Scheduler:
    """A demand-loading scheduler: workers with their memory shares, models with their sizes."""
    policy = dataclasses.replace(
        HEADWAY, schedule_ahead=schedule_ahead, full_batches_ahead=full_batches_ahead
    )
    workers_only: dict[int, list[str]] = {worker: [] for worker in workers}
    return scheduler(clock, workers_only, sizes=sizes, memory_mb=workers, policy=policy,
                     demand_loading=True, max_batch=max_batch)  # fmt: skip


def loaded(s: Scheduler, load: Dispatch, seconds: float, size_mb: float | None = None) -> None:
    """The worker reports the LOAD done, as the controller relays it."""
    assert load.kind == LOAD
    s.complete(load.id, seconds)
    s.placed(load.model, load.worker, size_mb=size_mb)


def ms(value: float) -> float:
    return value / 1000.0


def seed(s: Scheduler, model: str, table: dict[int, float]) -> None:
    """Three measurements of each batch size: enough for the model to count as profiled."""
    for size, seconds in table.items():
        for _ in range(3):
            s.estimator.observe(model, size, seconds)


def request(
    clock: Clock,
    tag: str,
    deadline_in: float,
    model: str = "m",
    *,
    rows: int = 1,
    priority: int = DEFAULT_PRIORITY,
) -> Job:
    """A request arriving now, due `deadline_in` seconds from now, whose token is `tag`."""
    now = clock.now()
    inputs = {"x": np.zeros((rows, 1), np.float32)}
    return Job(model, inputs, rows, now, now + deadline_in, priority, receiver=Tag(tag))


def awaited(job: Job) -> asyncio.Future[Prediction]:
    """The future `job`'s answer settles, from now on (its receiver)."""
    future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
    job.receiver = FutureReceiver(future)
    return future


def tags(dispatch: Dispatch) -> list[str]:
    return [str(r.receiver) for r in dispatch.requests]


def over(s: Scheduler, clock: ManualClock, *, inline: bool) -> UnreadRefusals:
    """`UnreadRefusals` over `s`, whose model `m` (SLO 50 ms) it serves, for either engine."""
    config = ModelConfig("m", 1, "python", Path("m"), slo_ms=50.0)
    config.__dict__["key"] = "m"  # as the scheduler here calls it (`key` is computed once)
    stats = {"m": ModelStats()}
    s.placement.inline = inline
    return UnreadRefusals(
        clock,
        s.durations,
        s.placement,
        s.backlogs,
        s.tally,
        stats,
        lambda name, version: config,
        early_reject=s.policy.early_reject,
        inline=inline,
    )
