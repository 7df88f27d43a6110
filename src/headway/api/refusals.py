"""The HTTP server's shortcut under overload: refuse an infer request before routing it.

Under open-loop overload the frontend must answer every request it reads, and what it
refuses must cost it far less than what it serves (`control.admission.overload` says why). So the
connection asks `QuickRefusals.answer` of each whole infer POST before handing it to the app:
the model's name from the URL, the request's deadline from its JSON head (its `parameters`,
not its tensors), how long it waited to be read, and the controller's O(1) verdict. A refused
request is answered with a 503 rendered once (`Retry-After`, and an `error` naming the model
and the reason), counted in /metrics by model and reason, and never routed, decoded or admitted.
Anything this cannot read cheaply and surely goes the usual way, which answers it as before.
"""

from __future__ import annotations

import orjson

from headway.api.app import HeadwayApp
from headway.api.errors import JSON, error_json
from headway.api.parameters import NO_POLICY, schedule_policy
from headway.api.rendering import render
from headway.control.admission.reasons import Refusal
from headway.control.request import InferenceRequest
from headway.errors import HeadwayError

_PREFIX = b"/v2/models/"
_SUFFIX = b"/infer"
#: Seconds a refused client is asked to wait before retrying (`Retry-After`).
RETRY_AFTER_S = 1
_HEADERS = [*JSON, (b"retry-after", str(RETRY_AFTER_S).encode())]


#: At most this many URLs' routes are kept (`QuickRefusals.route`): a server's models'.
MAX_ROUTES = 1024


class _Route:
    """An infer URL's model and version, and its refusals rendered once per reason and kind
    of connection (keep-alive, HTTP/1.0): the same few answers over and over."""

    __slots__ = ("answers", "name", "version")

    def __init__(self, name: str, version: str | None) -> None:
        self.name = name
        self.version = version
        self.answers: dict[tuple[Refusal, bool, bool], bytes] = {}

    def answer(self, refusal: Refusal, keep_alive: bool, http10: bool) -> bytes:
        data = self.answers.get((refusal, keep_alive, http10))
        if data is None:
            body = error_json(refusal.message(self.name), refusal.reason)
            data = render((503, body, _HEADERS), keep_alive, http10)
            self.answers[refusal, keep_alive, http10] = data
        return data


_UNSEEN = _Route("", None)  # a URL not routed yet


class QuickRefusals:
    """Answers to infer requests that overload would make late, decided before decoding."""

    def __init__(self, app: HeadwayApp) -> None:
        self.app = app
        #: Asked by the connection before it asks `answer` (`Controller.may_refuse`): while
        #: the server keeps up, a request is not screened, and its wait not observed.
        self.controller = app.controller
        self._routes: dict[bytes, _Route | None] = {}  # see `route`

    def answer(
        self,
        url: bytes,
        headers: dict[bytes, bytes],
        body: bytes,
        waited: float,
        keep_alive: bool,
        http10: bool,
    ) -> bytes | None:
        """The 503, as the bytes to write, for an infer POST to `url` that waited `waited` s
        to be read, if the controller refuses it now (`Controller.screen`, which counts it);
        else None: serve it as usual. The bytes are rendered once per model, reason and
        kind of connection. Its JSON head is read first: the connection asks only while the
        server may be behind, when most requests are refused, and a request served after all
        is routed with this read of its head, not a second."""
        app = self.app
        token = app.inference_token
        if token is not None and not token.allows(headers.get(b"authorization")):
            return None  # the usual way answers 401: nothing of the model or its load
        route = self._routes.get(url, _UNSEEN)
        if route is _UNSEEN:
            route = self.route(url)
        if route is None or not app.started or app.tracing is not None:
            return None
        controller = app.controller
        if b"inference-header-content-length" in headers:  # binary tensors: the usual way
            self._observed(waited)
            return None
        try:
            document = orjson.loads(body)
            parameters = document.get("parameters")
            timeout, priority = schedule_policy(parameters) if parameters else NO_POLICY
        except (orjson.JSONDecodeError, AttributeError, HeadwayError):
            self._observed(waited)  # answered with its 400 the usual way
            return None
        refusal = controller.screen(
            InferenceRequest(
                route.name,
                version=route.version,
                timeout=timeout,
                priority=priority,
                arrival=controller.clock.now() - waited,
            )
        )
        if refusal is None:
            app.inference.parsed(body, document)  # read as the route would: not parsed twice
            return None
        return route.answer(refusal, keep_alive, http10)

    def _observed(self, waited: float) -> None:
        """A request left to the usual way unscreened: its wait counts all the same."""
        self.app.controller.observe_wait(waited)

    def route(self, url: bytes) -> _Route | None:
        """The model name and version an infer `url` names, or None if it is not one this
        reads cheaply (kept for the next request to the same URL, up to MAX_ROUTES)."""
        route: _Route | None = None
        if url.startswith(_PREFIX) and url.endswith(_SUFFIX) and b"%" not in url:
            parts = url[len(_PREFIX) : -len(_SUFFIX)].split(b"/")
            version = parts[2] if len(parts) == 3 and parts[1] == b"versions" else None
            if parts[0] and (
                len(parts) == 1 or (version and version.isdigit() and len(version) < 19)
            ):
                route = _Route(
                    parts[0].decode("latin-1"), None if version is None else version.decode()
                )
        if len(self._routes) < MAX_ROUTES:
            self._routes[url] = route
        return route
