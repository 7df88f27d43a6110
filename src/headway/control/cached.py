"""Answering a request for a model with a prediction cache (its `cache: true`).

A repeat of an answered request is answered from the cache (`cache.PredictionCache`); a repeat
of one still running shares its answer instead of running again; anything else runs, and its
answer is kept. Both kinds of repeat count as hits of the model. Such a request is answered by
a task, not by the dispatcher's settling of its batch, so its outcome is counted here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial

from headway.clock import Clock
from headway.control.cache import PredictionCache, cache_key
from headway.control.jobs import Job
from headway.control.model_stats import ModelStats
from headway.control.request import Prediction
from headway.errors import HeadwayError, Unavailable

#: The size counted for an answer beside its outputs' bytes.
ENTRY_OVERHEAD = 64


class CachedAnswers:
    """The cache and the answers in flight, by cache key (see the module docstring)."""

    def __init__(self, cache: PredictionCache, clock: Clock) -> None:
        self.cache = cache
        self.clock = clock
        self._in_flight: dict[bytes, asyncio.Future[Prediction]] = {}

    def submit(
        self, job: Job, stats: ModelStats, run: Callable[[Job], Awaitable[Prediction]]
    ) -> None:
        """Answer `job` (through its receiver) by a task (`answer`), its outcome counted in
        `stats` once it is done, unless the job was withdrawn meanwhile."""
        task = asyncio.ensure_future(self.answer(job, stats, run))
        task.add_done_callback(partial(self._settled, job, stats))

    def _settled(self, job: Job, stats: ModelStats, task: asyncio.Future[Prediction]) -> None:
        """Count the outcome of a job answered through the cache, and answer it."""
        receiver = job.receiver
        if receiver is None:
            return  # withdrawn
        job.receiver = None
        if task.cancelled():
            receiver.fail(Unavailable("the server is stopping"))
            return
        error = task.exception()
        if error is None:
            stats.answered([self.clock.now() - job.arrival])
            receiver.done(task.result())
            return
        if isinstance(error, HeadwayError):
            stats.failed(error.reason, self.clock.now() - job.arrival)
        if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit: not ours
            raise error
        receiver.fail(error)

    async def answer(
        self,
        job: Job,
        stats: ModelStats,
        run: Callable[[Job], Awaitable[Prediction]],
    ) -> Prediction:
        """The prediction for `job`: cached, shared with the same request in flight, or from
        `run(job)` (kept in the cache once it succeeds)."""
        key = cache_key(job.model, job.inputs, job.outputs)
        hit = self.cache.get(key)
        if hit is not None:
            stats.cache_hits += 1
            return hit  # type: ignore[no-any-return]
        shared = self._in_flight.get(key)
        if shared is not None:
            stats.cache_hits += 1
            return await asyncio.shield(shared)
        stats.cache_misses += 1
        future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            prediction = await run(job)
        except HeadwayError as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: sharers re-raise it, nobody else must
            raise
        finally:
            self._in_flight.pop(key, None)
        future.set_result(prediction)
        size = sum(a.nbytes for a in prediction.outputs.values()) + ENTRY_OVERHEAD
        self.cache.put(key, prediction, size)
        return prediction
