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
from headway.control.model_stats import Histogram
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
    controller.count_refusals()
    models = []
    labels: dict[str, str] = {}
    for name, state in [*controller.models.items(), *controller.versions.items()]:
        stats = controller.stats[state.config.key]
        labels[state.config.key] = name
        answered_in_time = stats.successes - stats.late
        models.append(
            {
                "name": name,
                "state": state.state,
                "reason": state.reason,
                "requests": stats.requests,
                "successes": stats.successes,
                "errors": dict(stats.errors),
                "slo_attainment": answered_in_time / stats.requests if stats.requests else None,
                "p50_ms": _quantile_ms(stats.latency, 0.5),
                "p99_ms": _quantile_ms(stats.latency, 0.99),
                "mean_batch": stats.batch_size.total / stats.batch_size.count
                if stats.batch_size.count
                else None,
                "queue": controller.scheduler.queue_length(state.config.key),
                "workers": sorted(state.workers),
            }
        )
    nodes = controller.worker_nodes()  # on a cluster (the Ray engine): where each runs
    workers = [
        {
            "worker": worker,
            "node": nodes.get(worker),
            "used_mb": used,
            "budget_mb": budget,
            "models": sorted(
                labels.get(m.config.key, m.config.key)
                for m in [*controller.models.values(), *controller.versions.values()]
                if worker in m.workers
            ),
        }
        for worker, (used, budget, _) in sorted(
            controller.scheduler.placement.worker_memory().items()
        )
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


def _quantile_ms(histogram: Histogram, q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q` (the last finite one for +Inf)."""
    if not histogram.count:
        return None
    finite = histogram.bounds[-1]
    for bound, running in histogram.cumulative():
        if running >= q * histogram.count:
            return 1000.0 * (finite if bound == float("inf") else bound)
    return 1000.0 * finite
