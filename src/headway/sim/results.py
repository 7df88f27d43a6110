"""What a simulation takes and gives: model profiles, and per-request outcomes with summaries."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from headway.repository import Generation


@dataclass(frozen=True)
class ModelProfile:
    """A model as the simulation knows it: measured durations per batch size, load time, size.
    A generative one (`generative`, its model.yaml's) has its steps' durations per number of
    sequences in the step instead."""

    durations: dict[int, float]
    load_seconds: float
    size_mb: float
    max_batch: int = 16
    generative: Generation | None = None
    #: A generative model's first steps (those that start their sequences, reading their
    #: inputs) per number of sequences started, where they take other than the following ones.
    first_steps: dict[int, float] | None = None

    def duration(self, rows: int) -> float:
        """Interpolated linearly between measured batch sizes (extrapolated per row beyond)."""
        return interpolated(self.durations, rows)

    def step(self, sequences: int, started: int = 0) -> float:
        """A generative step of `sequences` sequences, `started` of them starting in it: the
        following step's time, and what a first step of `started` took beyond a following
        one of as many (never below nothing)."""
        seconds = self.duration(max(sequences, 1))
        if started and self.first_steps:
            seconds += max(interpolated(self.first_steps, started) - self.duration(started), 0.0)
        return seconds


def interpolated(durations: dict[int, float], rows: int) -> float:
    """`durations` (by size) at `rows`, linearly between the sizes measured, the smallest's
    below them and per row beyond the largest."""
    sizes = sorted(durations)
    if rows in durations:
        return durations[rows]
    if rows > sizes[-1]:
        return durations[sizes[-1]] * rows / sizes[-1]
    upper = next(s for s in sizes if s > rows)
    lower = max((s for s in sizes if s < rows), default=None)
    if lower is None:
        return durations[upper]
    share = (rows - lower) / (upper - lower)
    return durations[lower] + share * (durations[upper] - durations[lower])


class Outcome(IntEnum):
    PENDING = 0
    ANSWERED = 1
    REJECTED = 2


@dataclass
class SimulationResult:
    """Per-request outcomes and what the scheduler did, with the usual summaries."""

    policy: str
    arrivals: np.ndarray
    deadlines: np.ndarray
    finished: np.ndarray
    outcome: np.ndarray
    reasons: dict[str, int]
    counters: dict[str, int]
    duration: float
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self, start: float | None = None) -> dict[str, Any]:
        """Figures of the requests that arrived at `start` or later (all by default: a warm-up
        before `start` is left out); rates divide by the time from `start` to the last arrival."""
        window = slice(None) if start is None else self.arrivals >= start
        arrivals, finished = self.arrivals[window], self.finished[window]
        outcome, deadlines = self.outcome[window], self.deadlines[window]
        duration = self.duration if start is None else float(self.arrivals[-1] - start)
        answered = outcome == Outcome.ANSWERED
        latency = (finished - arrivals)[answered]
        on_time = answered & (finished <= deadlines + 1e-12)
        total = len(outcome)
        pct = (
            dict(
                zip(
                    ("p50", "p99", "p99.9"),
                    np.percentile(latency, [50, 99, 99.9]) * 1e3,
                    strict=True,
                )
            )
            if latency.size
            else {}
        )
        return {
            "policy": self.policy,
            "requests": total,
            "answered": int(answered.sum()),
            "on_time": int(on_time.sum()),
            "late": int((answered & ~on_time).sum()),
            "rejected": int((outcome == Outcome.REJECTED).sum()),
            "unanswered": int((outcome == Outcome.PENDING).sum()),
            "slo_attainment": float(on_time.sum() / total) if total else 0.0,
            "goodput_rps": float(on_time.sum() / duration) if duration > 0 else 0.0,
            "throughput_rps": float(answered.sum() / duration) if duration > 0 else 0.0,
            "latency_ms": {
                **{k: round(float(v), 3) for k, v in pct.items()},
                "max": round(float(latency.max() * 1e3), 3) if latency.size else None,
            },
            "reasons": dict(self.reasons),
            **{k: v for k, v in self.counters.items() if k in ("loads", "evictions", "refusals")},
        }


@dataclass
class StreamsResult:
    """Per-request outcomes of streamed requests (seconds on the simulation's clock; NaN where
    none): arrival, first part, last part, parts, and whether it was refused or failed."""

    arrivals: np.ndarray
    first: np.ndarray
    last: np.ndarray
    parts: np.ndarray
    outcome: np.ndarray
    reasons: dict[str, int]
    duration: float

    def attained(self, ttft: float, tpot: float) -> np.ndarray:
        """Which requests ended with their first part within `ttft` and a mean time per part
        after it within `tpot` (DistServe's two targets)."""
        ended = self.outcome == Outcome.ANSWERED
        first = self.first - self.arrivals
        gaps = np.where(self.parts > 1, (self.last - self.first) / np.maximum(self.parts - 1, 1), 0)
        with np.errstate(invalid="ignore"):
            met: np.ndarray = ended & (first <= ttft + 1e-12) & (gaps <= tpot + 1e-12)
        return met

    def summary(self, ttft: float, tpot: float) -> dict[str, Any]:
        total = len(self.outcome)
        ended = self.outcome == Outcome.ANSWERED
        first = (self.first - self.arrivals)[~np.isnan(self.first)]
        span = float(np.nanmax(self.last) - self.arrivals[0]) if ended.any() else 0.0
        return {
            "requests": total,
            "answered": int(ended.sum()),
            "rejected": int((self.outcome == Outcome.REJECTED).sum()),
            "attainment": float(self.attained(ttft, tpot).sum() / total) if total else 0.0,
            "ttft_p99_ms": float(np.percentile(first, 99) * 1e3) if first.size else None,
            "parts_per_second": float(self.parts.sum() / span) if span > 0 else 0.0,
            "reasons": dict(self.reasons),
        }
