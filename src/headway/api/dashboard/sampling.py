"""Figures over an interval from two readings of the server's records: what the history keeps
each second, and what the dashboard's tables show over their window.

A `Reading` is everything read at one moment: the controller's frozen statistics
(`ControllerSnapshot`), the applications' own records, and each worker process's CPU time and
resident memory. Counters become counts in the interval (`requests`, `answered`,
`rejected:<reason>`, ...: the page divides by the interval for a rate), histograms become the
quantiles of the values observed in it, gauges are read as they are at its end.

Streams: a model that has streamed gains `ttfp_p50_ms`, `ttfp_p99_ms` (time to first part),
`tpot_p50_ms`, `tpot_p99_ms` (time from one part to the next) and `parts` (`stream_figures`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from headway.control.snapshots import ControllerSnapshot, HistogramSnapshot, ModelCounts

#: A figure for one entity: its name -> value (None: nothing to say over the interval).
Figures = dict[str, float | None]


@dataclass(frozen=True)
class Usage:
    """A process's CPU seconds (user and system) so far and its resident memory."""

    cpu_s: float
    rss_mb: float


@dataclass(frozen=True)
class Reading:
    """What the server's records said at one moment: `wall` (seconds since the epoch) and
    `at` (the controller's clock) for when."""

    wall: float
    #: The controller's statistics (`Controller.statistics`).
    statistics: ControllerSnapshot
    #: Each application's summary (`AppRegistry.summary`).
    apps: list[dict[str, Any]] = field(default_factory=list)
    #: Each flow operator's statistics, named `app/operator` (`flows.stats`).
    operators: list[dict[str, Any]] = field(default_factory=list)
    #: Each worker's process, by worker number (only those this machine can read).
    usage: Mapping[int, Usage] = field(default_factory=dict)

    @property
    def at(self) -> float:
        return self.statistics.at


def quantile_ms(histogram: HistogramSnapshot, q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q`, in ms (the last finite bound for
    the +Inf bucket); None for no values. As Prometheus' histogram_quantile, without its
    interpolation inside the bucket: an upper bound on the true quantile."""
    if not histogram.count:
        return None
    finite = histogram.bounds[-1]
    for bound, running in histogram.cumulative():
        if running >= q * histogram.count:
            return 1000.0 * (finite if bound == float("inf") else bound)
    return 1000.0 * finite


def difference(now: HistogramSnapshot, before: HistogramSnapshot | None) -> HistogramSnapshot:
    """The values `now` holds that `before` (the same histogram, earlier) did not."""
    if before is None or before.bounds != now.bounds or before.count > now.count:
        return now
    return HistogramSnapshot(
        now.bounds,
        tuple(a - b for a, b in zip(now.counts, before.counts, strict=True)),
        now.total - before.total,
        now.count - before.count,
    )


def model_figures(now: ModelCounts, before: ModelCounts | None) -> Figures:
    """One model's traffic over the interval between two of its counts (`before` None: since
    it started). SLO attainment is over the requests settled in the interval: answered in time
    over answered and failed (None when none settled)."""
    requests = now.requests - (before.requests if before else 0)
    answered = now.successes - (before.successes if before else 0)
    late = now.late - (before.late if before else 0)
    before_errors = before.errors if before else {}
    rejected = {
        reason: count - before_errors.get(reason, 0)
        for reason, count in now.errors.items()
        if count - before_errors.get(reason, 0) >= 0
    }
    failed = sum(rejected.values())
    latency = difference(now.latency, before.latency if before else None)
    batches = difference(now.batch_size, before.batch_size if before else None)
    figures: Figures = {
        "requests": requests,
        "answered": answered,
        "late": late,
        "slo": (answered - late) / (answered + failed) if answered + failed else None,
        "p50_ms": quantile_ms(latency, 0.5),
        "p99_ms": quantile_ms(latency, 0.99),
        "batch": batches.total / batches.count if batches.count else None,
    }
    for reason, count in rejected.items():
        figures[f"rejected:{reason}"] = count
    figures.update(stream_figures(now, before))
    return figures


def stream_figures(now: ModelCounts, before: ModelCounts | None) -> Figures:
    """Time to first part, time per part and parts over the interval, for a model that has
    streamed; nothing for one that never did (the page draws streams only where there are)."""
    if not now.parts and not now.first_part.count:
        return {}
    first = difference(now.first_part, before.first_part if before else None)
    gap = difference(now.part_gap, before.part_gap if before else None)
    return {
        "ttfp_p50_ms": quantile_ms(first, 0.5),
        "ttfp_p99_ms": quantile_ms(first, 0.99),
        "tpot_p50_ms": quantile_ms(gap, 0.5),
        "tpot_p99_ms": quantile_ms(gap, 0.99),
        "parts": now.parts - (before.parts if before else 0),
    }


def worker_figures(
    now: Reading, before: Reading | None, labels: Mapping[str, str]
) -> dict[int, Figures]:
    """Each worker over the interval: CPU (% of one core), resident memory, its models'
    memory, and the share of the interval its actions ran for each model (`busy:<model>`)."""
    seconds = now.at - before.at if before else 0.0
    earlier = {w.worker: w for w in before.statistics.workers} if before else {}
    out: dict[int, Figures] = {}
    for worker in now.statistics.workers:
        figures: Figures = {"models_mb": worker.used_mb}
        usage = now.usage.get(worker.worker)
        if usage is not None:
            figures["rss_mb"] = usage.rss_mb
            was = before.usage.get(worker.worker) if before else None
            if was is not None and seconds > 0 and usage.cpu_s >= was.cpu_s:
                figures["cpu"] = 100.0 * (usage.cpu_s - was.cpu_s) / seconds
        last = earlier.get(worker.worker)
        if last is not None and seconds > 0:
            for key, ran in worker.ran_s.items():
                spent = ran - last.ran_s.get(key, 0.0)
                if spent >= 0:
                    figures[f"busy:{labels.get(key, key)}"] = min(1.0, spent / seconds)
        out[worker.worker] = figures
    return out


def sample(now: Reading, before: Reading) -> dict[tuple[str, str, str], float | None]:
    """The history's figures for the interval from `before` to `now`, by (group, entity,
    figure): models, workers, applications and flow operators."""
    out: dict[tuple[str, str, str], float | None] = {}
    earlier = {m.status.label: m for m in before.statistics.models}
    for model in now.statistics.models:
        label = model.status.label
        last = earlier.get(label)
        figures = model_figures(model.counts, last.counts if last else None)
        figures["queue"] = model.scheduling.queued
        figures["replicas"] = len(model.status.workers)
        for name, value in figures.items():
            out["model", label, name] = value
    for worker, figures in worker_figures(now, before, now.statistics.labels).items():
        for name, value in figures.items():
            out["worker", str(worker), name] = value
    queries = {a["name"]: a.get("queries") for a in before.apps}
    for app in now.apps:
        for model, weight in (app.get("weights") or {}).items():
            out["app", app["name"], f"weight:{model}"] = weight
        count, was = app.get("queries"), queries.get(app["name"])
        if count is not None and was is not None and count >= was:
            out["app", app["name"], "queries"] = count - was
    calls = {o["name"]: o["calls"] for o in before.operators}
    for operator in now.operators:
        was = calls.get(operator["name"])
        if was is not None and operator["calls"] >= was:
            out["operator", operator["name"], "calls"] = operator["calls"] - was
    return out
