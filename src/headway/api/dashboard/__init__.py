"""The dashboard: `GET /dashboard` serves a static page (three files in `static/`, no build
step) that draws what the server is doing, and the figures it draws:

- `data.json`: the tables (`tables`), from the recorder's last readings;
- `history.json`, `history/<n>.json`: the per-second figures kept (`history`), all of them or
  those after sample `n` (the page asks for the new ones each second);
- `flows.json`: each flow application's operator graph (`plan.describe`);
- `plan.json`: the plan the server was started with (`headway serve --plan`), as
  `headway plan` wrote it, or null.

The recorder (`recorder.Recorder`) reads the server's records once a second on a timer; a poll
reads nothing, it only encodes. `GET /` redirects here.
"""

from __future__ import annotations

from functools import cache, partial
from pathlib import Path
from typing import Any

import orjson

from headway.api.dashboard.recorder import Recorder, read
from headway.api.dashboard.tables import tables
from headway.api.errors import JSON, Response, problem
from headway.apps import AppRegistry
from headway.control.controller import Controller
from headway.flows.serving import FlowApplication

STATIC = Path(__file__).parent / "static"
_TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript", ".css": b"text/css"}
_NUMPY = orjson.OPT_SERIALIZE_NUMPY


class Dashboard:
    """The dashboard's routes over a controller and its applications, and the recorder that
    keeps their figures. `plan`: the plan file's content, when the server follows one."""

    def __init__(
        self,
        controller: Controller,
        apps: AppRegistry,
        *,
        history_seconds: int | None = None,
        plan: dict[str, Any] | None = None,
    ) -> None:
        self.apps = apps
        extra = {} if history_seconds is None else {"seconds": history_seconds}
        self.recorder = Recorder(partial(read, controller, apps), **extra)
        self.plan = plan

    def start(self) -> None:
        """Start reading once a second (on the running loop)."""
        self.recorder.start()

    def stop(self) -> None:
        self.recorder.stop()

    def route(self, parts: list[str]) -> Response:
        """`parts`: the path's segments after `dashboard`."""
        if parts == ["data.json"]:
            return 200, orjson.dumps(self.data(), option=_NUMPY), JSON
        if parts == ["history.json"]:
            return self._history(0)
        if len(parts) == 2 and parts[0] == "history" and parts[1].endswith(".json"):
            after = parts[1].removesuffix(".json")
            if not after.isdigit():
                return problem(404, f"no history {parts[1]!r}: ask for history/<sample>.json")
            return self._history(int(after))
        if parts == ["flows.json"]:
            return 200, orjson.dumps(flows(self.apps)), JSON
        if parts == ["plan.json"]:
            return 200, orjson.dumps(self.plan), JSON
        name = "index.html" if not parts else "/".join(parts)
        found = _static(name)
        if found is None:
            return problem(404, f"no dashboard file {name!r}")
        return found

    def data(self) -> dict[str, Any]:
        """The tables, and what the history holds (its samples, series and bytes) and what
        reading costs (the recorder's mean tick)."""
        recorder = self.recorder
        out = tables(*recorder.latest())
        ring = recorder.ring
        out["history"] = {
            "period_s": recorder.period,
            "seconds": 0 if ring is None else ring.capacity,
            "samples": 0 if ring is None else min(ring.seq, ring.capacity),
            "last": 0 if ring is None else ring.seq,
            "series": 0 if ring is None else len(ring.series),
            "bytes": 0 if ring is None else ring.nbytes,
            "most_bytes": 0 if ring is None else ring.most_bytes,
            "dropped": 0 if ring is None else ring.dropped,
            "tick_ms": 1000.0 * recorder.spent_s / recorder.ticks if recorder.ticks else None,
        }
        out["flows"] = sorted(
            name for name, app in self.apps.apps.items() if isinstance(app, FlowApplication)
        )
        out["plan"] = self.plan is not None
        return out

    def _history(self, after: int) -> Response:
        ring = self.recorder.ring
        if ring is None:
            return 200, b'{"first":1,"last":0,"t":[],"series":[]}', JSON
        return 200, orjson.dumps(ring.since(after), option=_NUMPY), JSON


def flows(apps: AppRegistry) -> list[dict[str, Any]]:
    """Each flow application's compiled graph: its stages (their operators, kind, racing
    replicas, the models they call) and edges (`FlowPlan.describe`)."""
    out = []
    for name, app in sorted(apps.apps.items()):
        if isinstance(app, FlowApplication):
            out.append({"app": name, **app.plan.describe()})
    return out


@cache
def _static(name: str) -> Response | None:
    path = STATIC / name
    if "/" in name or not path.is_file() or path.suffix not in _TYPES:
        return None
    return 200, path.read_bytes(), [(b"content-type", _TYPES[path.suffix])]
