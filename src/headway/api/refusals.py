"""The HTTP server's shortcut under overload: refuse an infer request before routing it.

Under open-loop overload the frontend must answer every request it reads, and what it
refuses must cost it far less than what it serves (`control.overload` says why). So the
connection asks `QuickRefusals.check` of each whole infer POST before handing it to the app:
the model's name from the URL, the request's deadline from its JSON head (its `parameters`,
not its tensors), how long it waited to be read, and the controller's O(1) verdict. A refused
request is answered with a prepared 503 (`Retry-After`, and an `error` naming the model and
the reason), counted in /metrics by model and reason, and never routed, decoded or admitted.
Anything this cannot read cheaply and surely goes the usual way, which answers it as before.
"""

from __future__ import annotations

import orjson

from headway.api.app import HeadwayApp
from headway.api.errors import JSON, Response
from headway.api.parameters import schedule_policy
from headway.control.overload import BACKLOG, LATE, SHED
from headway.errors import HeadwayError

_PREFIX = b"/v2/models/"
_SUFFIX = b"/infer"
#: Seconds a refused client is asked to wait before retrying (`Retry-After`).
RETRY_AFTER_S = 1
_HEADERS = [*JSON, (b"retry-after", str(RETRY_AFTER_S).encode())]
_WHY = {
    LATE: "deadline cannot be met: the request waited too long to be read (the server is "
    "overloaded); retry with backoff, or raise the timeout or slo_ms",
    BACKLOG: "deadline cannot be met: the work queued ahead of it would make it late (the "
    "model is overloaded); retry with backoff, or raise the timeout or slo_ms",
    SHED: "refused at once: the server is behind reading requests (overloaded) and refuses "
    "those that waited longest; retry with backoff",
}


_UNSEEN = ("", None)  # a URL not routed yet
#: At most this many URLs' routes are kept (`QuickRefusals.route`): a server's models'.
MAX_ROUTES = 1024


class QuickRefusals:
    """Answers to infer requests that overload would make late, decided before decoding."""

    def __init__(self, app: HeadwayApp) -> None:
        self.app = app
        controller = app.controller
        #: Read by the connection before it asks `check`: a request that waited less than
        #: `overload.NOTICEABLE_WAIT_S`, while the lag is `calm` and no model's work refused
        #: one since it last shrank (the scheduler's `backlog_epoch` is not its `epoch`), is
        #: one `check` would answer None and whose wait the lag need not observe.
        self.lag = controller.lag
        self.scheduler = controller.scheduler
        self._answers: dict[tuple[bytes, str], Response] = {}  # prepared, per model and reason
        self._routes: dict[bytes, tuple[str, int | None] | None] = {}  # see `route`

    def check(
        self, url: bytes, headers: dict[bytes, bytes], body: bytes, waited: float
    ) -> Response | None:
        """The 503 for an infer POST to `url` that waited `waited` s to be read, if the
        controller refuses it now (`Controller.quick_refusal`); else None: serve it as usual.
        The answer is the same object for each model and reason, so its bytes can be kept."""
        route = self._routes.get(url, _UNSEEN)
        if route is _UNSEEN:
            route = self.route(url)
        app = self.app
        if route is None or not app.started or app.tracing is not None:
            return None
        if not app.controller.may_refuse_unread(route[0], route[1], waited):
            return None  # a server that keeps up: not worth reading its deadline
        if b"inference-header-content-length" in headers:
            return None  # binary tensors: the usual way
        try:
            document = orjson.loads(body)
            parameters = document.get("parameters") or {}
            timeout, priority = schedule_policy(parameters)
        except (orjson.JSONDecodeError, AttributeError, HeadwayError):
            return None  # answered with its 400 the usual way
        reason = app.controller.quick_refusal(
            route[0], route[1], timeout=timeout, priority=priority, waited=waited
        )
        if reason is None:
            app.inference.parsed(body, document)  # read as the route would: not parsed twice
            return None
        answer = self._answers.get((url, reason))
        if answer is None:
            message = refusal_message(route[0], reason)
            answer = 503, orjson.dumps({"error": message, "reason": reason}), _HEADERS
            self._answers[url, reason] = answer
        return answer

    def route(self, url: bytes) -> tuple[str, int | None] | None:
        """The model name and version an infer `url` names, or None if it is not one this
        reads cheaply (kept for the next request to the same URL, up to MAX_ROUTES)."""
        route: tuple[str, int | None] | None = None
        if url.startswith(_PREFIX) and url.endswith(_SUFFIX) and b"%" not in url:
            parts = url[len(_PREFIX) : -len(_SUFFIX)].split(b"/")
            version = parts[2] if len(parts) == 3 and parts[1] == b"versions" else None
            if parts[0] and (
                len(parts) == 1 or (version and version.isdigit() and len(version) < 19)
            ):
                route = parts[0].decode("latin-1"), None if version is None else int(version)
        if len(self._routes) < MAX_ROUTES:
            self._routes[url] = route
        return route


def refusal_message(model: str, reason: str) -> str:
    """What a client refused for `reason` is told (REST's `error`, gRPC's `grpc-message`)."""
    return f"model {model!r}: {_WHY[reason]}"
