"""Probe loads: a LOAD made to measure, after a cold start was refused on a LOAD estimate that
rests on few measurements.

A refused cold start never loads the model, so it never corrects the estimate that refused it:
a never-loaded model's estimate taken from a few slow loads (pre-warm loads on a busy machine)
would turn every cold start away for ever. As for INFER estimates (`probes`), such a refusal
is an occasion to measure: an idle worker with nothing queued for it loads the model, and the
measured load refines the estimates. A model whose own loads are trusted (`TRUSTED_LOADS`) and
slow is refused for what it costs: a verdict, nothing to measure.
"""

from __future__ import annotations

from collections.abc import Mapping

from headway.control.predictions import Predictions
from headway.control.slots import ModelSlot, WorkerSlot

#: The most of a worker's time that probe loads take: after a probe load expected to take d
#: seconds, the worker's next one waits d / LOAD_PROBE_DUTY. Loads are made only by an idle
#: worker with nothing queued, but a request arriving during one waits for it.
LOAD_PROBE_DUTY = 0.25


class LoadProbes:
    """Models whose cold starts were refused on an untrusted LOAD estimate, oldest first, and
    when each worker may make its next probe load."""

    def __init__(self, predictions: Predictions) -> None:
        self._predictions = predictions
        self._wanted: dict[str, None] = {}  # insertion-ordered set
        self._next: dict[int, float] = {}  # worker -> the earliest time of its next probe load

    def refused(self, key: str) -> None:
        """A cold start of `key` was refused: measure it, unless its own loads are trusted."""
        if not self._predictions.trusts_own_load(key):
            self._wanted.setdefault(key, None)

    def forget(self, key: str) -> None:
        self._wanted.pop(key, None)

    @property
    def pending(self) -> bool:
        """Whether some model waits for a probe load (the scheduler should be polled)."""
        return bool(self._wanted)

    def wakeup(self, worker: WorkerSlot, now: float) -> float | None:
        """When idle `worker` may make its next probe load, if one waits and it is not yet due."""
        due = self._next.get(worker.id)
        return due if self._wanted and due is not None and due > now else None

    def choose(
        self,
        worker: WorkerSlot,
        now: float,
        *,
        models: Mapping[str, ModelSlot],
        waiting: set[str],
    ) -> tuple[ModelSlot, list[str]] | None:
        """The model for idle `worker` (nothing in flight, nothing queued for it) to load as a
        probe, and the idle models to evict first; None when none is due or fits. A chosen
        model counts as probed."""
        if not self._wanted or worker.inflight or now < self._next.get(worker.id, float("-inf")):
            return None
        for key in list(self._wanted):
            model = models.get(key)
            if model is None or not model.unplaced or self._predictions.trusts_own_load(key):
                del self._wanted[key]  # gone, placed or loading meanwhile, or measured enough
                continue
            victims = worker.memory.victims(
                model.size_mb, pinned=set(), idle=lambda k: k not in waiting
            )
            if victims is None or any(k in waiting for k in victims):
                continue  # it would evict a model with queued work: not for a probe
            del self._wanted[key]
            expected = self._predictions.load_time(key) or 0.0
            self._next[worker.id] = now + expected / LOAD_PROBE_DUTY
            return model, victims
        return None
