"""What the controller did, as read-only records: what its statistics publish
(`Controller.statistics`, `Controller.model_statistics`).

Metrics, the dashboard, the Triton statistics extension, the descriptions of the repository,
the tuner and the simulator read these, never the controller's parts: a reader cannot change
what it reads, and the parts can change how they count without a reader noticing (trio's
`statistics()` records). Each record is made at once, from counters that keep running.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from headway.control.model_stats import BatchTimes, Histogram, MeasuringRuns, ModelStats
from headway.repository import ModelConfig


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A fixed-bucket histogram: `counts[i]` values at most `bounds[i]` (and above the bound
    before), the last for +Inf; their `total` and `count`."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float
    count: int

    @classmethod
    def of(cls, histogram: Histogram) -> HistogramSnapshot:
        return cls(histogram.bounds, tuple(histogram.counts), histogram.total, histogram.count)

    def cumulative(self) -> list[tuple[float, int]]:
        """Each upper bound (+Inf last) with the values at most it."""
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


@dataclass(frozen=True, slots=True)
class BatchTimesSnapshot:
    """Where the time of INFER actions went (Triton's batch_stats): `count` actions, the round
    trip less the run (`input_s`), the worker's run (`infer_s`), answering (`output_s`)."""

    count: int
    input_s: float
    infer_s: float
    output_s: float

    @classmethod
    def of(cls, times: BatchTimes) -> BatchTimesSnapshot:
        return cls(times.count, times.input_s, times.infer_s, times.output_s)


@dataclass(frozen=True, slots=True)
class MeasuringSnapshot:
    """The runs made to measure a model (warm-up, a sweep of batch sizes, probes): INFER
    actions with rows no client asked for, their rows, and the seconds of those that carried
    nothing else."""

    runs: int
    rows: int
    seconds: float

    @classmethod
    def of(cls, runs: MeasuringRuns) -> MeasuringSnapshot:
        return cls(runs.runs, runs.rows, runs.seconds)


@dataclass(frozen=True, slots=True)
class ModelCounts:
    """What happened to one model's requests (`model_stats.ModelStats`), counted so far."""

    requests: int
    successes: int
    #: Answers delivered after their deadline.
    late: int
    #: Failed or refused requests, by the error's reason (`headway.errors`).
    errors: Mapping[str, int]
    cache_hits: int
    cache_misses: int
    #: Seconds from arrival to answer, of answered requests.
    latency: HistogramSnapshot
    #: Clients' rows of each INFER action that ran carrying clients' requests (measuring runs
    #: are counted apart, in `measuring`; so are the figures below).
    batch_size: HistogramSnapshot
    #: Seconds each request waited from its arrival until its batch left for a worker.
    queue: HistogramSnapshot
    #: Seconds each INFER action ran on its worker.
    compute: HistogramSnapshot
    #: Seconds from arrival to failure, summed over failed requests.
    failure_seconds: float
    #: Per batch size, the times of its INFER actions.
    batches: Mapping[int, BatchTimesSnapshot]
    #: The same times counted once per request a batch carried (Triton's inference_stats).
    per_request: BatchTimesSnapshot
    #: When the last INFER action finished (the controller's clock); 0.0: never.
    last_inference: float
    #: Warm-up runs, sweeps and probes: kept apart from the traffic above.
    measuring: MeasuringSnapshot
    #: Streams (answers in parts): seconds from arrival to each one's first part, and from
    #: each part to the next; the parts delivered, per second over the last seconds
    #: (`model_stats.RATE_WINDOW_S`), and the streams that ended with their last part.
    first_part: HistogramSnapshot
    part_gap: HistogramSnapshot
    parts: int
    parts_per_second: float
    streams: int

    @classmethod
    def of(cls, stats: ModelStats, at: float = 0.0) -> ModelCounts:
        """`stats` as they are now; `at`: now on the controller's clock (for the rates)."""
        return cls(
            requests=stats.requests,
            successes=stats.successes,
            late=stats.late,
            errors=dict(stats.errors),
            cache_hits=stats.cache_hits,
            cache_misses=stats.cache_misses,
            latency=HistogramSnapshot.of(stats.latency),
            batch_size=HistogramSnapshot.of(stats.batch_size),
            queue=HistogramSnapshot.of(stats.queue),
            compute=HistogramSnapshot.of(stats.compute),
            failure_seconds=stats.failure_seconds,
            batches={rows: BatchTimesSnapshot.of(t) for rows, t in stats.batches.items()},
            per_request=BatchTimesSnapshot.of(stats.per_request),
            last_inference=stats.last_inference,
            measuring=MeasuringSnapshot.of(stats.measuring),
            first_part=HistogramSnapshot.of(stats.first_part),
            part_gap=HistogramSnapshot.of(stats.part_gap),
            parts=stats.parts,
            parts_per_second=stats.part_rate.per_second(at),
            streams=stats.streams,
        )


@dataclass(frozen=True, slots=True)
class ModelScheduling:
    """What the scheduler keeps of one model: its queue and replicas, Clipper's AIMD batch
    limit, the batches that ended (and of them, late), and its latency estimates by batch
    size."""

    queued: int
    replicas: tuple[int, ...]
    aimd_limit: float
    batches: int
    late_batches: int
    estimates_s: Mapping[int, float]
    #: A generative model's sequences running on its workers (`queued`: those waiting).
    running: int = 0


@dataclass(frozen=True, slots=True)
class ModelStatus:
    """One model version as the controller serves it now.

    `label` is what the transports call it: its name for a model's default version (as the
    unversioned routes), `name@version` for another version served beside it; `key` is always
    `name@version`. `warming`: its first warm-up runs and sweep of batch sizes have not ended."""

    label: str
    key: str
    default: bool
    config: ModelConfig
    state: str
    reason: str
    warming: bool
    #: The workers it is loaded on, and (on a cluster) their nodes.
    workers: tuple[int, ...]
    nodes: tuple[str, ...]
    memory_mb: float

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def version(self) -> int:
        return self.config.version


@dataclass(frozen=True, slots=True)
class ModelSnapshot:
    """One model version: how it is served (`status`), what happened to its requests
    (`counts`), and what the scheduler keeps of it (`scheduling`)."""

    status: ModelStatus
    counts: ModelCounts
    scheduling: ModelScheduling


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """One worker: its process (None: not running), its cluster node (None: one machine), its
    models' memory (each as declared, else as its load measured; with or without a budget)
    against its share of the budget (None: unbounded), how many it holds, the action it runs
    now as (kind, model key) (None: idle), and the seconds its actions ran, by model key."""

    worker: int
    pid: int | None
    node: str | None
    used_mb: float
    budget_mb: float | None
    resident: int
    running: tuple[str, str] | None = None
    ran_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CacheSnapshot:
    """The prediction cache: entries held, their bytes, and lookups that hit or missed."""

    entries: int
    bytes: int
    hits: int
    misses: int


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    """The scheduler's policy, its round-trip estimate, and what it caused: in all
    (`counters`, by `actions.Counters` field) and per (model key, event, reason) (`events`)."""

    policy: str
    overhead_s: float
    counters: Mapping[str, int]
    events: Mapping[tuple[str, str, str], int]


@dataclass(frozen=True, slots=True)
class ControllerSnapshot:
    """Everything the controller publishes, at `at` on its clock: each model version (default
    versions first, by name), each worker it has placed, the cache, the scheduler, and the
    engine (`engine`: its kind, "local", "inline", "ray", ...; `size`: its workers; `pids`: the
    process id of each running worker)."""

    at: float
    models: tuple[ModelSnapshot, ...]
    workers: tuple[WorkerSnapshot, ...]
    cache: CacheSnapshot
    scheduler: SchedulerSnapshot
    engine: str
    size: int
    pids: Mapping[int, int]

    def model(self, label: str) -> ModelSnapshot | None:
        """The model called `label` (its name, or `name@version` for another version)."""
        return next((m for m in self.models if m.status.label == label), None)

    @property
    def labels(self) -> dict[str, str]:
        """Each model's label by its key (`name@version`)."""
        return {m.status.key: m.status.label for m in self.models}
