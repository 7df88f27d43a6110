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
from typing import Any

from headway.clock import Clock
from headway.control.cache import PredictionCache, cache_key
from headway.control.model_stats import ModelStats
from headway.control.models import Prediction
from headway.control.request import Request
from headway.errors import HeadwayError

#: The size counted for an answer beside its outputs' bytes.
ENTRY_OVERHEAD = 64


class CachedAnswers:
    """The cache and the answers in flight, by cache key (see the module docstring)."""

    def __init__(self, cache: PredictionCache, clock: Clock) -> None:
        self.cache = cache
        self.clock = clock
        self._in_flight: dict[bytes, asyncio.Future[Prediction]] = {}

    def submit(
        self,
        request: Request,
        stats: ModelStats,
        run: Callable[[Request], Awaitable[Prediction]],
        started: float,
        then: Callable[[asyncio.Future[Prediction]], None] | None = None,
    ) -> asyncio.Future[Prediction]:
        """The future of `request`'s prediction (`answer`), its outcome counted in `stats` once
        it is done (the request's clock started at `started`); `then(future)`, if given, runs as
        a done-callback after that."""
        future = asyncio.ensure_future(self.answer(request, stats, run))
        future.add_done_callback(partial(self._settled, stats, started))
        if then is not None:
            future.add_done_callback(then)
        return future

    def _settled(self, stats: ModelStats, started: float, future: asyncio.Future[Any]) -> None:
        """Count the outcome of a request answered through the cache."""
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            stats.answered([self.clock.now() - started])
        elif isinstance(error, HeadwayError):
            stats.failed(error.reason, self.clock.now() - started)

    async def answer(
        self,
        request: Request,
        stats: ModelStats,
        run: Callable[[Request], Awaitable[Prediction]],
    ) -> Prediction:
        """The prediction for `request`: cached, shared with the same request in flight, or
        from `run(request)` (kept in the cache once it succeeds)."""
        key = cache_key(request.model, request.inputs, request.outputs)
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
            prediction = await run(request)
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
