"""Answering a request for a model with a prediction cache (its `cache: true`).

A repeat of an answered request is answered from the cache (`cache.PredictionCache`); a repeat
of one still running shares its answer instead of running again; anything else runs, and its
answer is kept. Both kinds of repeat count as hits of the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from headway.control.cache import PredictionCache, cache_key
from headway.control.model_stats import ModelStats
from headway.control.models import Prediction
from headway.control.request import Request
from headway.errors import HeadwayError

#: The size counted for an answer beside its outputs' bytes.
ENTRY_OVERHEAD = 64


class CachedAnswers:
    """The cache and the answers in flight, by cache key (see the module docstring)."""

    def __init__(self, cache: PredictionCache) -> None:
        self.cache = cache
        self._in_flight: dict[bytes, asyncio.Future[Prediction]] = {}

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
