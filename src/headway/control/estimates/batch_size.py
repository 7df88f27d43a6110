"""Batch sizing: the largest batch that profiles predict will meet the earliest deadline.

Before a model is profiled, Clipper's AIMD bounds the batch: it grows by a fixed step while
batches finish within their deadlines and shrinks by 10% when one does not.
"""

from __future__ import annotations

from headway.control.estimates.profiles import LatencyEstimator


class AIMD:
    """Additive increase, multiplicative decrease of a batch-size limit."""

    def __init__(self, max_batch: int, *, step: float = 1.0, backoff: float = 0.9) -> None:
        self.max_batch = max_batch
        self.step = step
        self.backoff = backoff
        self.limit = 1.0

    def on_batch(self, *, met_deadlines: bool) -> None:
        if met_deadlines:
            self.limit = min(float(self.max_batch), self.limit + self.step)
        else:
            self.limit = max(1.0, self.limit * self.backoff)

    @property
    def size(self) -> int:
        return max(1, int(self.limit))


def largest_batch(
    estimator: LatencyEstimator,
    model: str,
    *,
    budget: float,
    cap: int,
    aimd: AIMD,
    overhead: float = 0.0,
) -> int:
    """The largest batch (<= cap rows) predicted to finish within `budget` seconds.

    With no trustworthy profile, AIMD's limit decides. Never less than 1: a single request
    is always allowed to run (whether it may at all is the scheduler's early-drop rule).
    """
    if cap <= 1:
        return 1
    if not estimator.profiled(model):
        return min(cap, aimd.size)
    # From the top down: a smaller size's estimate above a bigger one's (a stall in one of its
    # few runs) must not bound the batch, or the bigger sizes would never run to refine it.
    for size in range(cap, 1, -1):
        estimate = estimator.estimate(model, size)
        if estimate is not None and estimate + overhead <= budget:
            return size
    return 1
