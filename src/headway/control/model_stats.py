"""Counters and fixed-bucket histograms per model, cheap enough for the request path.

The transport turns these records into Prometheus text; the core only counts.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class Histogram:
    """Cumulative-on-read histogram with fixed upper bounds (plus +Inf)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def observe_all(self, values: list[float]) -> None:
        """`observe` each of `values`, in order (one call for a batch's requests)."""
        counts, bounds, total = self.counts, self.bounds, self.total
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        self.total = total
        self.count += len(values)

    def cumulative(self) -> list[tuple[float, int]]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


#: Seconds over which a model's parts per second are counted (`PartRate`).
RATE_WINDOW_S = 10


class PartRate:
    """Parts delivered per second over the last RATE_WINDOW_S seconds: a ring of one-second
    counts, cheap to add to from every step."""

    __slots__ = ("counts", "seconds")

    def __init__(self) -> None:
        self.counts = [0] * RATE_WINDOW_S
        self.seconds = [-1] * RATE_WINDOW_S

    def add(self, parts: int, now: float) -> None:
        second = int(now)
        slot = second % RATE_WINDOW_S
        if self.seconds[slot] != second:
            self.seconds[slot], self.counts[slot] = second, 0
        self.counts[slot] += parts

    def per_second(self, now: float) -> float:
        second = int(now)
        recent = (
            c
            for c, s in zip(self.counts, self.seconds, strict=True)
            if second - RATE_WINDOW_S < s <= second
        )
        return sum(recent) / RATE_WINDOW_S


@dataclass
class BatchTimes:
    """Where the time of the INFER actions of one batch size went (Triton's batch_stats)."""

    count: int = 0
    #: Sending the batch to the worker and its answer back: the round trip less the run.
    input_s: float = 0.0
    #: The worker running the model on the batch (the duration it measured).
    infer_s: float = 0.0
    #: Splitting the answer into each request's outputs and answering them.
    output_s: float = 0.0


@dataclass
class MeasuringRuns:
    """The runs the controller made to measure a model: how many, their rows, their time."""

    runs: int = 0
    rows: int = 0
    seconds: float = 0.0

    def ran(self, rows: int, seconds: float) -> None:
        self.runs += 1
        self.rows += rows
        self.seconds += seconds


@dataclass
class ModelStats:
    """What happened to one model's requests."""

    requests: int = 0
    successes: int = 0
    #: Answers delivered after their deadline (the scheduler exists to keep this at zero).
    late: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    cache_hits: int = 0
    cache_misses: int = 0
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    batch_size: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))
    #: Seconds each request waited between its arrival and its batch leaving for a worker.
    queue: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    #: Seconds each INFER action ran on its worker.
    compute: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    #: Seconds from arrival to failure, summed over failed requests.
    failure_seconds: float = 0.0
    batches: dict[int, BatchTimes] = field(default_factory=dict)
    #: The same times counted once per request a batch carried (Triton's inference_stats).
    per_request: BatchTimes = field(default_factory=BatchTimes)
    #: When the last INFER action finished (the controller's clock); 0.0: never.
    last_inference: float = 0.0
    #: Measuring runs (warm-up runs, a sweep's batches, probes): INFER actions that carried
    #: no client's request, kept apart from the figures above, which count traffic only.
    measuring: MeasuringRuns = field(default_factory=MeasuringRuns)
    #: Streams (answers in parts, docs/streams.md): seconds from each one's arrival to its
    #: first part, and from each part to the next; the parts delivered, their rate, and the
    #: streams that ended with their last part.
    first_part: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    part_gap: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    parts: int = 0
    part_rate: PartRate = field(default_factory=PartRate)
    streams: int = 0

    def delivered(self, firsts: list[float], gaps: list[float], now: float) -> None:
        """Count the parts of one step or one part message: the first parts of their streams
        (`firsts`: seconds since each one's arrival) and the later ones (`gaps`: seconds since
        each one's part before)."""
        if firsts:
            self.first_part.observe_all(firsts)
        if gaps:
            self.part_gap.observe_all(gaps)
        count = len(firsts) + len(gaps)
        self.parts += count
        self.part_rate.add(count, now)

    def answered(self, latencies: list[float]) -> None:
        """Count requests answered, each `latencies` seconds after its arrival."""
        self.successes += len(latencies)
        self.latency.observe_all(latencies)

    def failed(self, reason: str, seconds: float) -> None:
        """Count a request failed for `reason`, `seconds` after its arrival."""
        self.errors[reason] += 1
        self.failure_seconds += seconds

    def executed(
        self,
        rows: int,
        waits: list[float],
        *,
        infer_s: float,
        input_s: float,
        output_s: float,
        at: float,
    ) -> None:
        """Count one INFER action that ran: its rows, each request's wait, its times."""
        self.batch_size.observe(rows)
        self.compute.observe(infer_s)
        self.queue.observe_all(waits)
        times = self.batches.get(rows)
        if times is None:
            times = self.batches[rows] = BatchTimes()
        times.count += 1
        times.input_s += input_s
        times.infer_s += infer_s
        times.output_s += output_s
        carried = len(waits)
        mine = self.per_request
        mine.count += carried
        mine.input_s += input_s * carried
        mine.infer_s += infer_s * carried
        mine.output_s += output_s * carried
        self.last_inference = at

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "successes": self.successes,
            "late": self.late,
            "errors": dict(self.errors),
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "batches": self.batch_size.count,
            "mean_batch_size": self.batch_size.total / self.batch_size.count
            if self.batch_size.count
            else 0.0,
            "mean_latency_s": self.latency.total / self.latency.count
            if self.latency.count
            else 0.0,
        }
