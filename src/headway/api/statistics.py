"""Triton's statistics extension: `GET /v2/models[/{m}[/versions/{v}]]/stats` and the gRPC
`ModelStatistics`, read from the controller's per-model counters (`control.model_stats`).

Durations are cumulative nanoseconds. `queue` is each request's wait from arrival until its
batch left for a worker; `compute_infer` the worker's run of the batch; `compute_input` the
rest of the round trip to the worker and back (sending the tensors, reading the answer);
`compute_output` splitting the batch's answer among its requests. In `inference_stats` these
count once per request (a request carries its batch's times), in `batch_stats` once per
batch. Cache hits and misses are counted without durations.
"""

from __future__ import annotations

import time
from typing import Any

from headway.control.controller import Controller
from headway.control.snapshots import BatchTimesSnapshot, ModelSnapshot


def statistics(
    controller: Controller, name: str | None = None, version: str | None = None
) -> dict[str, Any]:
    """`{"model_stats": [...]}` for every model, one model's versions, or one version."""
    if version is not None and name is not None:
        models = [controller.model_statistics(name, version)]
    else:
        if name is not None:
            controller.model(name)  # NOT_FOUND for a model the repository does not serve
        snapshot = controller.statistics()
        models = [m for m in snapshot.models if name is None or m.status.name == name]
    wall_offset = time.time() - controller.clock.now()
    return {"model_stats": [_model(m, wall_offset) for m in models]}


def _model(model: ModelSnapshot, wall_offset: float) -> dict[str, Any]:
    stats = model.counts
    last = stats.last_inference
    per_request = stats.per_request
    return {
        "name": model.status.name,
        "version": str(model.status.version),
        "last_inference": int((last + wall_offset) * 1000) if last else 0,
        "inference_count": int(stats.batch_size.total),
        "execution_count": stats.batch_size.count,
        "inference_stats": {
            "success": _duration(stats.successes, stats.latency.total),
            "fail": _duration(sum(stats.errors.values()), stats.failure_seconds),
            "queue": _duration(stats.queue.count, stats.queue.total),
            **_compute(per_request),
            "cache_hit": _duration(stats.cache_hits, 0.0),
            "cache_miss": _duration(stats.cache_misses, 0.0),
        },
        "batch_stats": [
            {"batch_size": size, **_compute(times)} for size, times in sorted(stats.batches.items())
        ],
    }


def _compute(times: BatchTimesSnapshot) -> dict[str, dict[str, int]]:
    return {
        "compute_input": _duration(times.count, times.input_s),
        "compute_infer": _duration(times.count, times.infer_s),
        "compute_output": _duration(times.count, times.output_s),
    }


def _duration(count: int, seconds: float) -> dict[str, int]:
    return {"count": count, "ns": int(seconds * 1e9)}
