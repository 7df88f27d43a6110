"""Duration estimates per (model, batch size), from rolling windows of measured durations.

Clockwork's rule: predict with a high percentile of the last few measurements, so that an
estimate errs on the side of meeting deadlines (`LatencyEstimator` says how sizes never
measured, outliers and models never measured are estimated).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import deque
from dataclasses import dataclass, field


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank: with 10 samples, p99 is the maximum."""
    if not values:
        raise ValueError("percentile of no values")
    return ranked(sorted(values), q)


def ranked(ordered: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank of values already sorted (not empty)."""
    # q * n / 100, not q / 100 * n: the latter rounds 55 / 100 * 100 up to rank 56. The small
    # tolerance keeps exact ranks exact for fractional q too (99.9 of 1000 is rank 999).
    return ordered[max(1, math.ceil(q * len(ordered) / 100.0 - 1e-9)) - 1]


@dataclass
class _Windows:
    """One model's measurements per batch size, and each size's estimate, kept current."""

    by_size: dict[int, deque[float]] = field(default_factory=dict)
    estimates: dict[int, float] = field(default_factory=dict)  # per measured size
    sizes: list[int] = field(default_factory=list)  # the measured sizes, sorted
    derived: dict[int, float] = field(default_factory=dict)  # estimates asked for, until a change
    # ceilings[i]: the lowest estimate of a size at least sizes[i] measured `min_samples` times
    ceilings: list[float] = field(default_factory=list)
    profiled: bool = False  # some size has `min_samples` measurements (windows only grow)


class LatencyEstimator:
    """Predicts action durations from recent measurements.

    `window` measurements are kept per (model, batch size); the estimate is their
    `quantile`-th percentile, after leaving out the `trim` slowest once more than `2 * trim`
    are kept (an outlier on a shared machine: a neighbour's burst, not the action's cost; for
    LOADs, one slowed load would otherwise turn the model's cold starts away until it had loaded
    `window` more times). With `pool`, the last `pool` measurements of any model are also kept
    together (`recent`): they predict for a model never measured. `min_samples` measurements at
    some size are needed before a model counts as profiled (until then the batcher falls back to
    AIMD).

    A batch's cost is a fixed part plus a part per row, and more rows never run faster; so the
    estimates of neighbouring sizes inform each other:

    - a size never measured is interpolated between the measured sizes on either side of it;
      beyond the largest, extrapolated along the line through the two largest measured, or per
      row from the only one measured (the most it could cost, short of a superlinear model);
    - a size measured fewer than `min_samples` times is estimated no higher than the line
      through its measured neighbours: its few runs may be a stall or a new shape's first run,
      and an estimate resting on them alone would refuse the requests that could correct it;
    - no size is estimated higher than a bigger size measured `min_samples` times.

    `typical` is the median of a size's window: the batches queued ahead of a request are
    predicted by it, the request's own batch by the high percentile."""

    def __init__(
        self,
        *,
        window: int = 10,
        quantile: float = 99.0,
        min_samples: int = 3,
        trim: int = 0,
        pool: int = 0,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        if trim < 0 or 2 * trim >= window:
            raise ValueError("trim must be at least 0 and less than half the window")
        self.window = window
        self.quantile = quantile
        self.min_samples = min_samples
        self.trim = trim
        self._pool: deque[float] = deque(maxlen=max(1, pool))
        self._pooled: list[float] = []  # the pool, sorted
        self._pooling = pool > 0
        self._models: dict[str, _Windows] = {}
        self._peaks: dict[str, float] = {}  # model -> its highest estimate (see `across`)
        self._ordered: list[float] = []  # the peaks, sorted
        self._dirty: set[str] = set()  # models whose peak may have changed since

    def observe(self, model: str, batch_size: int, seconds: float) -> None:
        """Record one measured duration of an INFER of `batch_size` rows."""
        windows = self._models.setdefault(model, _Windows())
        samples = windows.by_size.get(batch_size)
        at = bisect.bisect_left(windows.sizes, batch_size)
        if samples is None:
            samples = windows.by_size[batch_size] = deque(maxlen=self.window)
            windows.sizes.insert(at, batch_size)
            windows.ceilings.insert(at, math.inf)
        samples.append(seconds)
        # Estimates are asked for far more often than measurements arrive (every admission,
        # every batch size a dispatch considers): compute the changed one here, once.
        estimate = self._of(samples)
        # Every estimate derives from the measured sizes, their estimates and which of them
        # were measured `min_samples` times. A measurement that changes none of these (most:
        # a window's high percentile moves only when its slowest run arrives or leaves) leaves
        # the ceilings and the estimates asked for as they are, and they stay cached.
        if windows.estimates.get(batch_size) != estimate or len(samples) == self.min_samples:
            windows.estimates[batch_size] = estimate
            _lower_ceilings(windows, at, self.min_samples)
            windows.derived.clear()  # bounds and extrapolations may have moved
            self._dirty.add(model)
        if len(samples) >= self.min_samples:
            windows.profiled = True
        if self._pooling:
            if len(self._pool) == self._pool.maxlen:
                del self._pooled[bisect.bisect_left(self._pooled, self._pool[0])]
            self._pool.append(seconds)
            bisect.insort(self._pooled, seconds)

    def forget(self, model: str) -> None:
        self._models.pop(model, None)
        self._dirty.add(model)

    def across(self, q: float = 100.0) -> float | None:
        """The q-th percentile (nearest rank) over models of each one's highest estimate at
        any measured size; None when nothing was measured. Kept sorted incrementally, so
        asking often is cheap."""
        ordered = self._ordered
        for model in self._dirty:
            old = self._peaks.pop(model, None)
            if old is not None:
                del ordered[bisect.bisect_left(ordered, old)]
            windows = self._models.get(model)
            if windows and windows.estimates:
                new = max(windows.estimates.values())
                self._peaks[model] = new
                bisect.insort(ordered, new)
        self._dirty.clear()
        if not ordered:
            return None
        return ranked(ordered, q)

    def recent(self, q: float, *, leave_out: int = 0) -> float | None:
        """The q-th percentile (nearest rank) of the last `pool` measurements of any model;
        None when there are none (or no pool). While so few are pooled that the percentile
        would be the slowest itself, the `leave_out` slowest are left out (once more than
        twice as many are pooled): one stalled measurement is not the estimate."""
        ordered = self._pooled
        if not ordered:
            return None
        n = len(ordered)
        if leave_out and n > 2 * leave_out and math.ceil(q * n / 100.0 - 1e-9) >= n:
            return ranked(ordered[: n - leave_out], q)
        return ranked(ordered, q)

    def profiled(self, model: str) -> bool:
        """Whether some batch size has enough measurements to trust estimates."""
        windows = self._models.get(model)
        return windows is not None and windows.profiled

    def samples(self, model: str, batch_size: int) -> int:
        """How many measurements of `batch_size` rows the window holds."""
        windows = self._models.get(model)
        samples = windows.by_size.get(batch_size) if windows else None
        return len(samples) if samples else 0

    def largest_measured(self, model: str) -> int:
        windows = self._models.get(model)
        return windows.sizes[-1] if windows and windows.sizes else 0

    def estimate(self, model: str, batch_size: int) -> float | None:
        """Predicted seconds for an INFER of `batch_size` rows, or None with no data at all."""
        found = self.lookup(model, batch_size)
        return None if found is None else found[0]

    def lookup(self, model: str, batch_size: int) -> tuple[float, bool] | None:
        """`estimate` and `profiled` together, in one look at the model (the admission path
        asks both for every request); None with no data at all."""
        windows = self._models.get(model)
        if windows is None or not windows.sizes:
            return None
        value = windows.derived.get(batch_size)
        if value is None:
            value = windows.derived[batch_size] = _estimate(windows, batch_size, self.min_samples)
        return value, windows.profiled

    def typical(self, model: str, batch_size: int) -> float | None:
        """The median of `batch_size`'s window once it holds `min_samples` measurements (what a
        run usually takes), else the estimate; None with no data at all."""
        windows = self._models.get(model)
        samples = windows.by_size.get(batch_size) if windows else None
        if samples is None or len(samples) < self.min_samples:
            return self.estimate(model, batch_size)
        return min(statistics.median_low(samples), self.estimate(model, batch_size) or math.inf)

    def fastest(self, model: str, batch_size: int) -> float | None:
        """The least `batch_size` rows could take, as far as measurements tell: the fastest
        recent run of the largest measured size not above it (more rows never run faster);
        None when no size that small was measured."""
        windows = self._models.get(model)
        if windows is None:
            return None
        below = bisect.bisect_right(windows.sizes, batch_size)
        if below == 0:
            return None
        return min(windows.by_size[windows.sizes[below - 1]])

    def snapshot(self) -> dict[str, dict[int, float]]:
        """Current estimates per model and measured batch size (for the store)."""
        return {model: dict(sorted(w.estimates.items())) for model, w in self._models.items()}

    def estimates(self, model: str) -> dict[int, float]:
        """`model`'s current estimate of each measured batch size (for its statistics)."""
        windows = self._models.get(model)
        return {} if windows is None else dict(sorted(windows.estimates.items()))

    def _of(self, samples: deque[float]) -> float:
        """The estimate from one window: its percentile, the `trim` slowest left out."""
        ordered = sorted(samples)
        if self.trim and len(ordered) > 2 * self.trim:
            ordered = ordered[: -self.trim]
        return ranked(ordered, self.quantile)


def _estimate(windows: _Windows, batch_size: int, min_samples: int) -> float:
    """`batch_size`'s estimate from the measured sizes (see `LatencyEstimator`)."""
    sizes = windows.sizes
    at = bisect.bisect_left(sizes, batch_size)
    if at < len(sizes) and sizes[at] == batch_size:
        value = _measured(windows, at, min_samples)
    elif at == len(sizes):
        value = _extrapolated(windows, len(sizes), batch_size, min_samples)
    elif at == 0:  # bounded by the smallest measured size, above it
        value = _measured(windows, 0, min_samples)
    else:
        below, above = sizes[at - 1], sizes[at]
        low = _measured(windows, at - 1, min_samples)
        high = _measured(windows, at, min_samples)
        value = low + (high - low) * (batch_size - below) / (above - below)
    return min(value, windows.ceilings[at]) if at < len(sizes) else value


def _measured(windows: _Windows, at: int, min_samples: int) -> float:
    """The estimate of the measured size `sizes[at]`: its window's, or, measured fewer than
    `min_samples` times, no higher than the line through its measured neighbours."""
    sizes, estimates = windows.sizes, windows.estimates
    size = sizes[at]
    value = estimates[size]
    if len(windows.by_size[size]) >= min_samples or len(sizes) == 1:
        return value
    if at == len(sizes) - 1:  # the largest: along the line through the two below it
        line = _extrapolated(windows, at, size, min_samples=0)
    elif at == 0:  # the smallest: no higher than the next size up
        line = estimates[sizes[1]]
    else:
        below, above = sizes[at - 1], sizes[at + 1]
        low, high = estimates[below], estimates[above]
        line = low + (high - low) * (size - below) / (above - below)
    return min(value, line)


def _lower_ceilings(windows: _Windows, at: int, min_samples: int) -> None:
    """Bring `ceilings` up to date after a measurement of `sizes[at]`: the lowest estimate of a
    size at least `sizes[i]` measured `min_samples` times (more rows never run faster), infinity
    when there is none. Only `sizes[at]`'s estimate and count changed, so only the ceilings at
    and below it can move, and they stop moving at the first that did not."""
    sizes, ceilings, estimates, by_size = (
        windows.sizes,
        windows.ceilings,
        windows.estimates,
        windows.by_size,
    )
    floor = ceilings[at + 1] if at + 1 < len(sizes) else math.inf
    for i in range(at, -1, -1):
        size = sizes[i]
        if len(by_size[size]) >= min_samples:
            floor = min(floor, estimates[size])
        if i < at and ceilings[i] == floor:
            return
        ceilings[i] = floor


def _extrapolated(windows: _Windows, count: int, batch_size: int, min_samples: int) -> float:
    """The estimate for more rows than the largest of the `count` smallest measured sizes:
    along the line through the two largest of them (never steeper than per row from the
    largest, never falling), or per row from the only one. Per row from a lone small size is
    the safe bound, but for a model whose cost is mostly per call it is far too high: a sweep of
    sizes at warm-up gives the line its second point."""
    sizes = windows.sizes
    largest = sizes[count - 1]
    top = _measured(windows, count - 1, min_samples) if min_samples else windows.estimates[largest]
    per_row = top / largest
    if count > 1:
        before = sizes[count - 2]
        slope = (top - windows.estimates[before]) / (largest - before)
        per_row = min(per_row, max(0.0, slope))
    return top + per_row * (batch_size - largest)
