"""Duration estimates per (model, batch size), from rolling windows of measured durations.

Clockwork's rule: predict with a high percentile of the last few measurements, so that an
estimate errs on the side of meeting deadlines (`LatencyEstimator` says how sizes never
measured, outliers and models never measured are estimated).
"""

from __future__ import annotations

import bisect
import math
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
    derived: dict[int, float] = field(default_factory=dict)  # unmeasured sizes asked for
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

    Sizes never measured are bounded by the nearest measured size above them; beyond the largest,
    extrapolated along the line through the two largest measured (a batch's cost is a fixed part
    plus a part per row), or per row from the only one measured (the most it could cost, short of
    a superlinear model)."""

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
        if samples is None:
            samples = windows.by_size[batch_size] = deque(maxlen=self.window)
            bisect.insort(windows.sizes, batch_size)
        samples.append(seconds)
        # Estimates are asked for far more often than measurements arrive (every admission,
        # every batch size a dispatch considers): compute the changed one here, once.
        windows.estimates[batch_size] = self._of(samples)
        windows.derived.clear()  # bounds and extrapolations may have moved
        if len(samples) >= self.min_samples:
            windows.profiled = True
        if self._pooling:
            if len(self._pool) == self._pool.maxlen:
                del self._pooled[bisect.bisect_left(self._pooled, self._pool[0])]
            self._pool.append(seconds)
            bisect.insort(self._pooled, seconds)
        self._dirty.add(model)

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

    def recent(self, q: float) -> float | None:
        """The q-th percentile (nearest rank) of the last `pool` measurements of any model;
        None when there are none (or no pool)."""
        ordered = self._pooled
        if not ordered:
            return None
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
        windows = self._models.get(model)
        if windows is None:
            return None
        value = windows.estimates.get(batch_size)
        if value is not None:
            return value
        value = windows.derived.get(batch_size)
        if value is not None:
            return value
        sizes = windows.sizes
        if not sizes:
            return None
        above = bisect.bisect_right(sizes, batch_size)
        if above < len(sizes):  # bounded by the nearest measured size above
            value = windows.estimates[sizes[above]]
        else:
            value = _extrapolated(windows, batch_size)
        windows.derived[batch_size] = value
        return value

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
        """Current estimates per model and measured batch size (for statistics and the store)."""
        return {model: dict(sorted(w.estimates.items())) for model, w in self._models.items()}

    def _of(self, samples: deque[float]) -> float:
        """The estimate from one window: its percentile, the `trim` slowest left out."""
        ordered = sorted(samples)
        if self.trim and len(ordered) > 2 * self.trim:
            ordered = ordered[: -self.trim]
        return ranked(ordered, self.quantile)


def _extrapolated(windows: _Windows, batch_size: int) -> float:
    """The estimate for more rows than the largest measured size: along the line through the two
    largest measured sizes (never steeper than per row from the largest, never falling), or per
    row from the only size measured. Per row from a lone small size is the safe bound, but for
    a model whose cost is mostly per call it is far too high: a sweep of sizes at warm-up gives
    the line its second point."""
    sizes, estimates = windows.sizes, windows.estimates
    largest = sizes[-1]
    per_row = estimates[largest] / largest
    if len(sizes) > 1:
        before = sizes[-2]
        slope = (estimates[largest] - estimates[before]) / (largest - before)
        per_row = min(per_row, max(0.0, slope))
    return estimates[largest] + per_row * (batch_size - largest)
