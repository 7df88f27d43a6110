"""Traffic envelopes (network calculus): the most arrivals in any window of each length.

InferLine's tuner compares the live envelope with the planning trace's: for window lengths that
double from about the pipeline's service time up to a minute, the rate r_i = q_i / dT_i, where
q_i is the largest number of arrivals in any window of length dT_i. Short windows see bursts
that a rate averaged over a minute hides.
"""

from __future__ import annotations

import numpy as np

#: The longest window, seconds.
LONGEST = 60.0


def window_lengths(shortest: float, longest: float = LONGEST) -> list[float]:
    """`shortest`, doubled until `longest` would be passed; `longest` itself last."""
    if not (shortest > 0):
        raise ValueError(f"the shortest window must be positive, got {shortest}")
    lengths: list[float] = []
    length = min(shortest, longest)
    while length < longest:
        lengths.append(length)
        length *= 2
    lengths.append(longest)
    return lengths


def max_count(arrivals: np.ndarray, length: float) -> int:
    """The most of `arrivals` (sorted seconds) in any half-open window [t, t + length)."""
    if arrivals.size == 0:
        return 0
    ends = np.searchsorted(arrivals, arrivals + length, side="left")
    return int((ends - np.arange(arrivals.size)).max())


def envelope(arrivals: np.ndarray, lengths: list[float]) -> dict[float, float]:
    """Rate (arrivals per second) at each window length: max_count / length."""
    times = np.asarray(arrivals, dtype=np.float64)
    return {length: max_count(times, length) / length for length in lengths}
