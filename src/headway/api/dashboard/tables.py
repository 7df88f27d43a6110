"""The dashboard's tables (`GET /dashboard/data.json`): each model, worker, application and
flow operator now, with rates and quantiles over the last readings (`recorder.TABLE_WINDOW`).
docs/dashboard.md says what each column means.
"""

from __future__ import annotations

from typing import Any

from headway.api.dashboard.sampling import Reading, model_figures, quantile_ms, worker_figures


def tables(now: Reading, before: Reading | None) -> dict[str, Any]:
    """The figures of the tables: counters since the start, rates and quantiles over the
    window from `before` to `now` (None: since each model started)."""
    seconds = now.at - before.at if before else 0.0
    snapshot = now.statistics
    earlier = {m.status.label: m for m in before.statistics.models} if before else {}
    models = []
    for model in snapshot.models:
        status, counts = model.status, model.counts
        last = earlier.get(status.label)
        window = model_figures(counts, last.counts if last else None)
        models.append(
            {
                "name": status.label,
                "state": status.state,
                "reason": status.reason,
                "warming": status.warming,
                # replicas: the workers that hold it, as the Workers table lists them
                "replicas": len(status.workers),
                "workers": list(status.workers),
                "memory_mb": status.memory_mb,
                "requests": counts.requests,
                "errors": dict(counts.errors),
                "measuring_runs": counts.measuring.runs,
                "queue": model.scheduling.queued,
                "rate": _rate(window["requests"], seconds),
                "p50_ms": window["p50_ms"],
                "p99_ms": window["p99_ms"],
                "slo_attainment": window["slo"],
                "mean_batch": window["batch"],
                # since the start, for a model that has served nobody in the window
                "p99_ms_all": quantile_ms(counts.latency, 0.99),
            }
        )
    labels = snapshot.labels
    window_workers = worker_figures(now, before, labels)
    workers = []
    for worker in snapshot.workers:
        figures = window_workers.get(worker.worker, {})
        running = worker.running
        workers.append(
            {
                "worker": worker.worker,
                "pid": worker.pid,
                "node": worker.node,  # on a cluster (the Ray engine): where each runs
                "models": sorted(
                    m.status.label for m in snapshot.models if worker.worker in m.status.workers
                ),
                "models_mb": worker.used_mb,
                "budget_mb": worker.budget_mb,
                "rss_mb": figures.get("rss_mb"),
                "cpu": figures.get("cpu"),
                "running": None
                if running is None
                else f"{running[0]} {labels.get(running[1], running[1])}",
                "busy": {
                    name.removeprefix("busy:"): share
                    for name, share in figures.items()
                    if name.startswith("busy:") and share
                },
            }
        )
    calls = {o["name"]: o["calls"] for o in before.operators} if before else {}
    operators = []
    for operator in now.operators:
        was = calls.get(operator["name"])
        rate = _rate(operator["calls"] - was, seconds) if was is not None else None
        operators.append({**operator, "rate": rate})
    return {
        "time": now.wall,
        "window_s": seconds,
        "models": models,
        "workers": workers,
        "apps": now.apps,
        "operators": operators,
    }


def _rate(count: float | None, seconds: float) -> float | None:
    return None if count is None or seconds <= 0 else count / seconds
