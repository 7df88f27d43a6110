"""The prediction cache: a bounded store of answers keyed on (model version, requested
outputs, input bytes), and the answering of requests for a model with `cache: true`.

Eviction is CLOCK (second chance), as in Clipper: an entry used since the hand last passed is
spared once; values larger than the whole cache are not stored (`PredictionCache`). A repeat
of an answered request is answered from the cache; a repeat of one still running shares its
answer instead of running again; anything else runs, and its answer is kept
(`CachedAnswers`). Both kinds of repeat count as hits of the model. Such a request is answered
by a task, not by the relay's settling of its batch, so its outcome is counted here too.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from headway.clock import Clock
from headway.control.jobs import Job
from headway.control.model_stats import ModelStats
from headway.control.request import Prediction
from headway.errors import HeadwayError, Unavailable

#: The size counted for an answer beside its outputs' bytes.
ENTRY_OVERHEAD = 64


def cache_key(model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None) -> bytes:
    """A digest of everything that determines a deterministic model's answer."""
    digest = hashlib.blake2b(model.encode(), digest_size=20)
    digest.update(repr(tuple(outputs) if outputs is not None else None).encode())
    for name in sorted(inputs):
        array = inputs[name]
        digest.update(f"|{name}|{array.dtype.str}|{array.shape}|".encode())
        if array.dtype == object:
            for item in array.reshape(-1):
                raw = item if isinstance(item, bytes) else str(item).encode()
                digest.update(len(raw).to_bytes(4, "little"))
                digest.update(raw)
        else:
            digest.update(np.ascontiguousarray(array).data)
    return digest.digest()


@dataclass(slots=True)
class _Entry:
    value: Any
    size: int
    used: bool = False


class PredictionCache:
    """CLOCK-evicted cache with a byte budget."""

    def __init__(self, capacity_bytes: int = 32 * 1024 * 1024) -> None:
        self.capacity = capacity_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._entries: dict[bytes, _Entry] = {}
        self._ring: list[bytes] = []
        self._hand = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> Any | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        entry.used = True
        self.hits += 1
        return entry.value

    def put(self, key: bytes, value: Any, size: int) -> bool:
        """Store a finished answer; False when it is larger than the whole cache."""
        if size > self.capacity:
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= old.size
            index = self._ring.index(key)
            self._ring.pop(index)
            if index < self._hand:  # keep the hand on the entry it pointed at
                self._hand -= 1
        while self.size + size > self.capacity and self._ring:
            self._evict_one()
        self._entries[key] = _Entry(value, size)
        self._ring.append(key)
        self.size += size
        return True

    def _evict_one(self) -> None:
        while True:
            if self._hand >= len(self._ring):
                self._hand = 0
            key = self._ring[self._hand]
            entry = self._entries[key]
            if entry.used:
                entry.used = False
                self._hand += 1
                continue
            self._ring.pop(self._hand)
            del self._entries[key]
            self.size -= entry.size
            return


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
