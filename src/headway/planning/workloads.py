"""Arrival traces for planning and tuning: gamma arrivals, rate ramps and a spike.

`cv` is the coefficient of variation of the gaps (not CV²: docs/planning.md compares it with
InferLine's code). A changing rate is made by time-rescaling a unit-rate gamma renewal
process, so within any stretch of constant rate the gaps keep their CV.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headway.loadgen.arrivals import schedule

#: Points per second of the integrated-rate grid (its resolution, for ramps and spikes).
GRID_PER_SECOND = 1000


@dataclass(frozen=True)
class ArrivalSpec:
    """A single stream of queries: mean `rate` (queries/s) for `duration` seconds, gaps with
    coefficient of variation `cv`; optionally ramping linearly to `ramp_to` by the end, and
    multiplied by `spike_factor` for `spike_seconds` from `spike_at`."""

    rate: float
    duration: float
    cv: float = 1.0
    ramp_to: float | None = None
    spike_at: float | None = None
    spike_factor: float = 3.0
    spike_seconds: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "rate": self.rate > 0,
            "duration": self.duration > 0,
            "cv": self.cv > 0,
            "ramp_to": self.ramp_to is None or self.ramp_to > 0,
            "spike_factor": self.spike_factor > 0,
            "spike_seconds": self.spike_seconds > 0,
            "spike_at": self.spike_at is None or 0 <= self.spike_at < self.duration,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"arrival parameters out of range: {', '.join(bad)} ({self})")

    def rate_at(self, times: np.ndarray) -> np.ndarray:
        """Queries per second at each of `times`."""
        end = self.rate if self.ramp_to is None else self.ramp_to
        rates = self.rate + (end - self.rate) * np.clip(times / self.duration, 0.0, 1.0)
        if self.spike_at is not None:
            inside = (times >= self.spike_at) & (times < self.spike_at + self.spike_seconds)
            rates = np.where(inside, rates * self.spike_factor, rates)
        return rates


def arrival_times(spec: ArrivalSpec) -> np.ndarray:
    """Sorted arrival seconds in [0, duration) (the same spec always gives the same times)."""
    constant = spec.ramp_to is None and spec.spike_at is None
    if constant:
        return schedule(spec.rate, spec.duration, "gamma", spec.cv, spec.seed)
    steps = max(2, int(spec.duration * GRID_PER_SECOND) + 1)
    grid = np.linspace(0.0, spec.duration, steps)
    rates = spec.rate_at(grid)
    # the integrated rate at each grid point (trapezoids; exact for a ramp, and a spike's
    # edges are one grid step wide)
    total = np.concatenate([[0.0], np.cumsum((rates[1:] + rates[:-1]) / 2 * np.diff(grid))])
    units = schedule(1.0, float(total[-1]), "gamma", spec.cv, spec.seed)
    placed: np.ndarray = np.interp(units, total, grid)
    return placed
