"""The dashboard: `GET /dashboard` serves a static page that polls `GET /dashboard/data.json`
once a second and draws what the server is doing. No build step: three files in `static/`.
`GET /` redirects to it."""

from __future__ import annotations

import time
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from headway.api.errors import JSON, Response, problem
from headway.apps import AppRegistry
from headway.control.controller import Controller
from headway.control.snapshots import HistogramSnapshot
from headway.flows.serving import FlowApplication

STATIC = Path(__file__).parent / "static"
_TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript", ".css": b"text/css"}


def route(parts: list[str], controller: Controller, apps: AppRegistry) -> Response:
    """`parts`: the path's segments after `dashboard`."""
    if parts == ["data.json"]:
        return 200, orjson.dumps(snapshot(controller, apps)), JSON
    name = "index.html" if not parts else "/".join(parts)
    found = _static(name)
    if found is None:
        return problem(404, f"no dashboard file {name!r}")
    return found


@cache
def _static(name: str) -> Response | None:
    path = STATIC / name
    if "/" in name or not path.is_file() or path.suffix not in _TYPES:
        return None
    return 200, path.read_bytes(), [(b"content-type", _TYPES[path.suffix])]


def snapshot(controller: Controller, apps: AppRegistry) -> dict[str, Any]:
    """What the page draws: per model its counters and latency, per worker its models, its
    cluster node (Ray engine) and memory against its budget, per application its policy's weights,
    per flow operator its calls, rows, latency and time queued. Rates are the page's:
    it divides the counters' change by the time between two snapshots."""
    statistics = controller.statistics()
    models = []
    for model in statistics.models:
        status, counts = model.status, model.counts
        answered_in_time = counts.successes - counts.late
        models.append(
            {
                "name": status.label,
                "state": status.state,
                "reason": status.reason,
                "requests": counts.requests,
                "successes": counts.successes,
                "errors": dict(counts.errors),
                "slo_attainment": answered_in_time / counts.requests if counts.requests else None,
                "p50_ms": _quantile_ms(counts.latency, 0.5),
                "p99_ms": _quantile_ms(counts.latency, 0.99),
                "mean_batch": counts.batch_size.total / counts.batch_size.count
                if counts.batch_size.count
                else None,
                "queue": model.scheduling.queued,
                "workers": list(status.workers),
            }
        )
    workers = [
        {
            "worker": worker.worker,
            "node": worker.node,  # on a cluster (the Ray engine): where each runs
            "used_mb": worker.used_mb,
            "budget_mb": worker.budget_mb,
            "models": sorted(
                m.status.label for m in statistics.models if worker.worker in m.status.workers
            ),
        }
        for worker in statistics.workers
    ]
    return {"time": time.time(), "models": models, "workers": workers, "apps": apps.summary(),
            "operators": operators(apps)}  # fmt: skip


def operators(apps: AppRegistry) -> list[dict[str, Any]]:
    """Each flow application's operators with their statistics (`flows.stats`), in plan order."""
    out = []
    for name, app in sorted(apps.apps.items()):
        if isinstance(app, FlowApplication):
            for stats in app.statistics()["operators"]:
                out.append({"name": f"{name}/{stats['operator']}", "app": name, **stats})
    return out


def _quantile_ms(histogram: HistogramSnapshot, q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q` (the last finite one for +Inf)."""
    if not histogram.count:
        return None
    finite = histogram.bounds[-1]
    for bound, running in histogram.cumulative():
        if running >= q * histogram.count:
            return 1000.0 * (finite if bound == float("inf") else bound)
    return 1000.0 * finite
