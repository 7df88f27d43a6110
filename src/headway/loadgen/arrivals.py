"""Open-loop arrival schedules: when each request is due, as offsets from the start of a run.

Pure functions of their arguments (the seed included), so a schedule is reproducible and is
tested without sockets: ``constant`` gaps, ``poisson`` (exponential gaps) and ``gamma`` (gaps
with coefficient of variation ``cv``: shape ``1/cv**2``; ``cv = 1`` is Poisson).
"""

from __future__ import annotations

import math

import numpy as np

ARRIVALS = ("poisson", "gamma", "constant")


def validate(rate: float, arrival: str, cv: float | None) -> None:
    """Raise ValueError, naming what to fix, for a rate/arrival/cv combination that is unusable."""
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive number of requests per second, got {rate}")
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival process {arrival!r}; expected one of {ARRIVALS}")
    if cv is not None and arrival != "gamma":
        raise ValueError("a coefficient of variation (cv) only applies to gamma arrivals")
    if arrival == "gamma" and (cv is None or not (cv > 0 and math.isfinite(cv))):
        raise ValueError(f"gamma arrivals need a positive coefficient of variation, got {cv}")


def gaps(
    rate: float, count: int, arrival: str = "poisson", cv: float | None = None, seed: int = 0
) -> np.ndarray:
    """``count`` inter-arrival gaps in seconds (float64) with mean ``1/rate``."""
    validate(rate, arrival, cv)
    return _draw(np.random.default_rng(seed), rate, count, arrival, cv)


def _draw(
    rng: np.random.Generator, rate: float, count: int, arrival: str, cv: float | None
) -> np.ndarray:
    if arrival == "constant":
        return np.full(count, 1.0 / rate)
    if arrival == "poisson":
        return rng.exponential(1.0 / rate, size=count)
    assert cv is not None
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), size=count)


def schedule(
    rate: float,
    duration: float,
    arrival: str = "poisson",
    cv: float | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Send offsets in seconds (float64, increasing) of every arrival in ``[0, duration)``.

    The first request goes out at 0 for ``constant`` arrivals, and after one random gap otherwise
    (so a Poisson schedule is memoryless from the start). The same arguments always give the
    same schedule.
    """
    validate(rate, arrival, cv)
    if not (duration >= 0 and math.isfinite(duration)):
        raise ValueError(f"duration must be a non-negative number of seconds, got {duration}")
    if arrival == "constant":
        return np.arange(math.ceil(duration * rate - 1e-9), dtype=np.float64) / rate
    # Draw in chunks sized to cover the duration with a margin; one chunk nearly always suffices.
    expected = duration * rate
    chunk = int(expected + 6 * math.sqrt(expected * max(1.0, (cv or 1.0) ** 2)) + 16)
    rng = np.random.default_rng(seed)
    parts: list[np.ndarray] = []
    total = 0.0
    while total < duration:
        times = total + np.cumsum(_draw(rng, rate, chunk, arrival, cv))
        parts.append(times)
        total = float(times[-1])
    if not parts:
        return np.empty(0, dtype=np.float64)
    times = np.concatenate(parts)
    return times[: int(np.searchsorted(times, duration, side="left"))]
