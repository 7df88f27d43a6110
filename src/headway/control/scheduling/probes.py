"""Measuring to keep the estimates honest: the warm-up sweep of batch sizes, probes after a
refusal that may be wrong, and probe loads after a refused cold start.

A refused request never runs, so it never corrects the estimate that refused it: an estimate
for a batch size never measured, or inflated by one slow run, would turn the same requests
away for ever, and so would a never-loaded model's LOAD estimate taken from a few slow loads
(pre-warm loads on a busy machine). Batches of zeros measure instead (`next_sweep_size`,
`Probes`), and an idle worker with nothing queued for it loads a model to measure the load
(`LoadProbes`). A refusal that even the fastest measured run confirms, or a model whose own
loads are trusted (`TRUSTED_LOADS`) and slow, is a verdict: nothing to measure.
"""

from __future__ import annotations

from collections.abc import Mapping

from headway.control.estimates.durations import Durations
from headway.control.jobs import Job
from headway.control.placement.slots import ModelSlot, WorkerSlot

#: The priority level of measuring runs: after every request's (Triton's levels are small).
PROBE_PRIORITY = 2**31
#: Seconds between two probes of one model, at least.
PROBE_INTERVAL_S = 0.05
#: The most of a worker's time that probes of one model take: after a probe expected to take
#: d seconds, the next waits d / PROBE_DUTY.
PROBE_DUTY = 0.1
#: The sweep stops after a size whose run took more than this share of the model's SLO.
SWEEP_SHARE = 0.5
#: ... or more than this, when runs happen in the frontend's own process (the inline engine):
#: there, every run holds up every request, and longer sizes are left to probes.
INLINE_SWEEP_S = 0.005
#: The most of a worker's time that probe loads take: after a probe load expected to take d
#: seconds, the worker's next one waits d / LOAD_PROBE_DUTY. Loads are made only by an idle
#: worker with nothing queued, but a request arriving during one waits for it.
LOAD_PROBE_DUTY = 0.25


def next_sweep_size(
    durations: Durations,
    key: str,
    rows: int,
    *,
    max_batch: int,
    slo: float,
    inline: bool = False,
) -> int | None:
    """The batch size to measure after a sweep run of `rows` rows, or None: the sweep is done."""
    if rows >= max_batch:
        return None
    took = durations.estimator.estimate(key, rows)
    limit = min(SWEEP_SHARE * slo, INLINE_SWEEP_S) if inline else SWEEP_SHARE * slo
    if took is None or took > limit:
        return None
    return min(max_batch, 2 * rows)


class Probes:
    """When a refused request should be answered by a probe of its size.

    At load, Clockwork-style, a sweep of batch sizes runs (1, 2, 4, ... up to `max_batch`, stopping
    at the first size whose run takes half the SLO or more: bigger batches would hardly fit, and
    measuring them holds the worker); after a refusal that the fastest measured run says might
    have fitted, a probe of the refused size. Probes run at the lowest priority, so they never go
    before queued work, and take at most PROBE_DUTY of a worker's time; a refusal that even the
    fastest measured run confirms (a 1 ms deadline for a 600 ms model) is a verdict, and measures
    nothing."""

    def __init__(self, durations: Durations) -> None:
        self._durations = durations
        self._next: dict[str, float] = {}  # model -> the earliest time of its next probe

    def after_refusal(self, model: ModelSlot | None, request: Job, now: float) -> int | None:
        """After `request` was refused at admission: how many rows to measure `model` with
        (`size`), or None, because the refusal does not rest on its estimate alone, something of
        its model is queued, or even the fastest measured run confirms it."""
        if model is None or model.queue or not model.replicas:
            return None
        left = request.deadline - now
        service = self._durations.service_time(model.key, request.rows)
        if service is None or service <= left:
            return None  # refused for the queue or the busy worker: the estimate is not at fault
        return self.size(model.key, request.rows, left, now, max_batch=model.max_batch)

    def size(self, key: str, rows: int, left: float, now: float, *, max_batch: int) -> int | None:
        """How many rows to probe `key` with after refusing a request of `rows` rows with `left`
        seconds to its deadline (and nothing of it queued), or None: no probe. A probe counts
        as sent. It is the refused size, but no more than twice the largest measured (or
        `max_batch`): a huge request is reached by doubling, each probe a measured step
        from the last, never one unbounded run."""
        if now < self._next.get(key, float("-inf")):
            return None
        estimator = self._durations.estimator
        fastest = estimator.fastest(key, rows)
        if fastest is not None and fastest + self._durations.overhead > left:
            return None  # even the fastest run measured would be late: a verdict
        size = min(rows, max(max_batch, 2 * estimator.largest_measured(key)))
        # what the probe will take: a measured size's typical run (its estimate may be the
        # very outlier the probe is for), else the estimate that refused it
        measured = estimator.samples(key, size) > 0
        expected = estimator.fastest(key, size) if measured else estimator.estimate(key, size)
        expected = expected or 0.0
        self._next[key] = now + max(PROBE_INTERVAL_S, expected / PROBE_DUTY)
        return size

    def forget(self, key: str) -> None:
        self._next.pop(key, None)


class LoadProbes:
    """Models whose cold starts were refused on an untrusted LOAD estimate, oldest first, and
    when each worker may make its next probe load."""

    def __init__(self, durations: Durations) -> None:
        self._durations = durations
        self._wanted: dict[str, None] = {}  # insertion-ordered set
        self._next: dict[int, float] = {}  # worker -> the earliest time of its next probe load

    def refused(self, key: str) -> None:
        """A cold start of `key` was refused: measure it, unless its own loads are trusted."""
        if not self._durations.trusts_own_load(key):
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
            if model is None or not model.unplaced or self._durations.trusts_own_load(key):
                del self._wanted[key]  # gone, placed or loading meanwhile, or measured enough
                continue
            victims = worker.memory.victims(
                model.size_mb, pinned=set(), idle=lambda k: k not in waiting
            )
            if victims is None or any(k in waiting for k in victims):
                continue  # it would evict a model with queued work: not for a probe
            del self._wanted[key]
            expected = self._durations.load_time(key) or 0.0
            self._next[worker.id] = now + expected / LOAD_PROBE_DUTY
            return model, victims
        return None
