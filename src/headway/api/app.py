"""The routes: the Open Inference Protocol, the admin routes and the application API.

`HeadwayApp.respond` takes one whole request (method, path, headers, body) and replies
(status, body, headers): a hand-written router, no framework on the hot path. Each route
decodes the body, calls the controller, encodes the answer (the infer route, the hot one, is
`api.inference`); errors become the protocol's `{"error": "..."}` with the status from
`api.errors`.
`api.http` serves the app over HTTP/1.1, `api.rsgi` behind granian, `api.asgi` on any ASGI
server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Coroutine
from functools import partial
from typing import Any, Protocol

import orjson

import headway
from headway.api import apidocs
from headway.api.apps import AppRoutes, lookup_route
from headway.api.auth import BearerToken, for_admin, for_inference, is_admin, is_open
from headway.api.completions import CompletionRoutes, openai_shaped
from headway.api.dashboard import Dashboard
from headway.api.descriptions import config, index, metadata, unready
from headway.api.errors import (
    JSON,
    Headers,
    NoRoute,
    Reply,
    Response,
    expect,
    failure,
    problem,
)
from headway.api.generate import GenerateRoute
from headway.api.inference import InferRoute
from headway.api.limits import body_decoder
from headway.api.limits import max_answer_bytes as max_answer_bytes_for
from headway.api.metrics import render
from headway.api.openapi import OPENAPI
from headway.api.origins import OriginPolicy
from headway.api.paths import empty_segment, segments
from headway.api.statistics import statistics
from headway.api.text import MAX_PROMPT_BYTES
from headway.api.tracing import Tracing
from headway.apps import AppRegistry
from headway.control.controller import Controller
from headway.errors import InvalidInput, PayloadTooLarge, Unavailable
from headway.planning.live import LiveTuner

_TEXT: Headers = [(b"content-type", b"text/plain; version=0.0.4")]
AUTH = b"authorization"
#: Triton's protocol extensions that Headway implements (clients look here before calling them).
EXTENSIONS = [
    "binary_tensor_data",
    "model_repository",
    "schedule_policy",
    "model_configuration",
    "statistics",
]


class HeadwayApp:
    """The routes over a `Controller`: `respond` answers one whole request."""

    def __init__(
        self,
        controller: Controller,
        *,
        max_body_bytes: int = 64 * 2**20,
        max_answer_bytes: int | None = None,
        apps: AppRegistry | None = None,
        admin_token: str | None = None,
        inference_token: str | None = None,
        tracing: Tracing | None = None,
        origins: OriginPolicy | None = None,
        history_seconds: int | None = None,
        max_prompt_bytes: int = MAX_PROMPT_BYTES,
    ) -> None:
        self.controller = controller
        self.max_body_bytes = max_body_bytes
        #: The largest answer (`--max-answer-mb`; by default `limits.ANSWER_PER_BODY` bodies).
        self.max_answer_bytes = max_answer_bytes or max_answer_bytes_for(max_body_bytes)
        #: With a token, the routes that change state need it (`api.auth`).
        self.admin_token: BearerToken | None = for_admin(admin_token)
        #: With one, every route but the health probes needs it or the admin token.
        self.inference_token = for_inference(inference_token, admin_token)
        #: Which browser requests the routes that change state accept (`api.origins`).
        self.origins = origins if origins is not None else OriginPolicy()
        self.started = False
        self.apps = apps if apps is not None else AppRegistry(controller, controller.store)
        self._apps = AppRoutes(self.apps)
        #: The infer route (`api.inference`).
        self.inference = InferRoute(controller, self.max_answer_bytes)
        #: Triton's generate extension (`api.generate`) and OpenAI's completions
        #: (`api.completions`), over text generators; prompts up to `--max-prompt-kb`.
        self.generation = GenerateRoute(controller, max_prompt_bytes)
        self.completions = CompletionRoutes(controller, max_prompt_bytes)
        #: The infer paths routed so far, to their model's (name, version): routed again
        #: without splitting the path.
        self._infer_targets: dict[str, tuple[str, str | None]] = {}
        self.tracing = tracing
        self._tasks: set[asyncio.Task[Response]] = set()  # routes still answering
        #: Other frontends over this app (the gRPC server): started before it starts (they
        #: answer "starting" until it has), stopped before it stops, whichever HTTP server
        #: runs the app.
        self.companions: list[Companion] = []
        #: The live tuner (`headway serve --tune`), when one runs: its figures go to /metrics.
        self.tuner: LiveTuner | None = None
        #: `/dashboard`: its routes, and the figures it reads once a second while serving
        #: (`history_seconds` of them kept; 0: no history).
        self.dashboard = Dashboard(controller, self.apps, history_seconds=history_seconds)

    @property
    def tracing(self) -> Tracing | None:
        """OpenTelemetry traces of inferences and queries (`api.tracing`); None: off."""
        return self._tracing

    @tracing.setter
    def tracing(self, tracing: Tracing | None) -> None:
        self._tracing = tracing
        self.controller.tracing = tracing is not None
        self._apps.tracing = tracing
        self.inference.tracing = tracing

    async def start(self) -> None:
        """Start the companions (so a port in use fails before any worker starts), then the
        workers; load the models, restore the applications."""
        for companion in self.companions:
            await companion.start()
        try:
            await self.controller.start()
            await self.apps.start()
        except BaseException:
            for companion in self.companions:
                await companion.stop()
            raise
        self.dashboard.start()
        self.started = True

    async def stop(self) -> None:
        self.started = False
        self.dashboard.stop()
        for companion in self.companions:
            await companion.stop()
        for task in list(self._tasks):
            task.cancel()
        await self.apps.stop()
        await self.controller.stop()
        if self.tracing is not None:
            self.tracing.shutdown()  # exports the spans still batched

    @property
    def loop_held_until(self) -> float:
        """When a model's run last ended that held the event loop (`--engine inline`), in
        `time.monotonic()`: bytes read after it may have waited for it in the kernel."""
        return self.controller.loop_held_until

    def catch_up(self) -> None:
        """The HTTP server is deep in a long turn of reads: answer what the workers finished
        meanwhile (`Controller.catch_up`)."""
        self.controller.catch_up()

    async def read_body(self, headers: dict[bytes, bytes], pieces: AsyncIterable[bytes]) -> bytes:
        """A body that arrives in `pieces`, counted against the body limit as it comes and
        decoded (gzip, deflate) piece by piece (for servers that stream bodies to the app)."""
        decoder = body_decoder(headers.get(b"content-encoding"), self.max_body_bytes)
        chunks: list[bytes] = []
        size = 0
        async for chunk in pieces:
            if chunk:
                size += len(chunk)
                self.check_size(size)
                chunks.append(bytes(chunk) if decoder is None else decoder.feed(chunk))
        if decoder is not None:
            decoder.finish()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def check_length(self, declared: bytes | None) -> None:
        """A declared Content-Length over the limit is refused before the body is read."""
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise PayloadTooLarge(
                f"request body of {int(declared)} bytes exceeds the limit of "
                f"{self.max_body_bytes} bytes (--max-body-mb)"
            )

    def check_size(self, size: int) -> None:
        if size > self.max_body_bytes:
            raise PayloadTooLarge(
                f"request body exceeds the limit of {self.max_body_bytes} bytes (--max-body-mb)"
            )

    # -- routing -----------------------------------------------------------------------------
    def respond(
        self,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        body: bytes,
        reply: Reply,
        received: float | None = None,
    ) -> None:
        """Answer one request by calling `reply((status, body, headers))` once. Never raises.

        `path` is as sent, percent-encoded, without the query: the routes split it on '/'
        and decode each segment (`api.paths`), so an encoded slash is part of a name;
        `headers` has lower-case names; `body` is the whole request body, decoded by the
        server that read it (its Content-Encoding is not looked at here);
        `received` is when its first bytes were read (the controller's clock): a deadline
        counts from then, so time spent waiting in a busy server counts against it. Most
        routes reply before this returns. An inference replies the moment its prediction is
        known (`Controller.submit`'s `then`: no task, no callback queue between the worker's
        answer and the write); routes that must wait for something else run as a task, which
        `stop` cancels if it is still running.
        """
        if self.origins.cors:  # only with --allow-origin: the answer may need CORS headers
            reply = self.origins.answering(headers, reply)
        if path.startswith("/v1/"):  # OpenAI's API: every error in its shape
            reply = openai_shaped(reply)
        target = self._infer_targets.get(path) if method == "POST" and self.started else None
        token = self.inference_token
        if token is not None and target is not None and not token.allows(headers.get(AUTH)):
            target = None  # routed the long way, which answers 401
        try:
            if target is not None:  # most requests: an infer path seen before, not split again
                inference = self.inference
                if inference.tracing is None:
                    inference.infer(target[0], target[1], headers, body, received, reply)
                else:
                    inference.traced(target[0], target[1], headers, body, received, reply)
                return
            answer = self._route(method, path, headers, body, received, reply)
        except Exception as exc:
            reply(failure(exc, method, path))
            return
        if answer is None:  # an inference: it replies itself
            return
        if isinstance(answer, tuple):
            reply(answer)
            return
        task = asyncio.ensure_future(_guarded(answer, method, path))
        self._tasks.add(task)
        task.add_done_callback(partial(_reply_from_task, reply, self._tasks))

    async def handle(
        self,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None = None,
    ) -> Response:
        """`respond`, awaited (for ASGI servers and callers that simply want the answer)."""
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self.respond(method, path, headers, body, partial(_settle, answer), received)
        return await answer

    def _route(
        self,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None,
        reply: Reply,
    ) -> Answer | None:
        parts = segments(path)
        if empty_segment(parts):
            raise NoRoute(f"no route {method} {path}: the path has an empty segment ('//' or a "
                          "trailing '/')")  # fmt: skip
        if method == "OPTIONS" and b"access-control-request-method" in headers:
            return self.origins.preflight(headers)  # a browser asks before a cross-origin call
        admin = is_admin(method, parts)
        if admin:  # a browser page's request is refused before its token is looked at
            refusal = self.origins.refusal(method, headers)
            if refusal is not None:
                return refusal
        token = self.admin_token
        if token is None or not admin:
            token = None if self.inference_token is None or is_open(parts) else self.inference_token
        if token is not None:
            refusal = token.refusal(headers.get(AUTH))
            if refusal is not None:
                return refusal
        if not self.started and parts[:2] != ["v2", "health"]:
            raise Unavailable("the server is starting: models are loading; retry shortly")
        if parts and parts[0] == "v2":
            return self._v2(method, path, parts[1:], headers, body, received, reply)
        if parts and parts[0] == "apps":
            return self._apps(method, parts[1:], path, body, headers.get(b"traceparent"))
        if parts and parts[0] == "lookups":
            return lookup_route(self.apps, method, parts[1:], body)
        if parts and parts[0] == "v1":
            return self._v1(method, path, parts[1:], body, received, reply)
        if parts == ["metrics"]:
            expect(method, "GET")
            return 200, render(self.controller, self.apps, self.tuner), _TEXT
        if parts == ["openapi.json"]:
            expect(method, "GET")
            return 200, orjson.dumps(OPENAPI), JSON
        if not parts:
            expect(method, "GET")
            return 307, b"", [(b"location", b"/dashboard")]
        if parts[0] == "dashboard":
            expect(method, "GET")
            return self.dashboard.route(parts[1:])
        if parts[0] == "docs":
            expect(method, "GET")
            return apidocs.route(parts[1:])
        raise NoRoute(f"no route {method} {path}")

    def _v2(
        self,
        method: str,
        path: str,
        parts: list[str],
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None,
        reply: Reply,
    ) -> Answer | None:
        c = self.controller
        if not parts:
            expect(method, "GET")
            return (
                200,
                orjson.dumps(
                    {"name": "headway", "version": headway.__version__, "extensions": EXTENSIONS}
                ),
                JSON,
            )
        head = parts[0]
        if parts == ["models", "stats"]:
            expect(method, "GET")
            return 200, orjson.dumps(statistics(c)), JSON
        if head == "health" and len(parts) == 2 and parts[1] == "live":
            expect(method, "GET")
            return 200, orjson.dumps({"live": True}), JSON
        if head == "health" and len(parts) == 2 and parts[1] == "ready":
            expect(method, "GET")
            # starting until every model loaded at start is warm (its batch sizes measured)
            warming = any(model.warming for model in c.status())
            return _readiness(c, starting=not self.started or warming)
        if head == "models" and len(parts) >= 2:
            name, rest = parts[1], parts[2:]
            version = None
            if len(rest) >= 2 and rest[0] == "versions":
                version, rest = rest[1], rest[2:]
            if rest == ["infer"]:
                expect(method, "POST")
                if len(self._infer_targets) >= _INFER_TARGETS_KEPT:
                    self._infer_targets.clear()
                self._infer_targets[path] = name, version  # the raw path: routed as sent
                route = self.inference
                if route.tracing is None:
                    route.infer(name, version, headers, body, received, reply)
                else:
                    route.traced(name, version, headers, body, received, reply)
                return None
            if rest == ["generate"] or rest == ["generate_stream"]:
                expect(method, "POST")
                stream = rest[0] == "generate_stream"
                self.generation.generate(
                    name, version, body, received, reply, stream=stream, path=path
                )
                return None
            if not rest:
                expect(method, "GET")
                return 200, orjson.dumps(metadata(c.model(name, version))), JSON
            if rest == ["ready"]:
                expect(method, "GET")
                model = c.model(name, version)
                ok = model.state == "READY"
                answer = {"name": name, "ready": ok}
                if not ok:  # an error answer: `error`, as every error, and Triton's `reason`
                    reason = model.reason or model.state.lower()
                    answer["reason"] = reason
                    answer["error"] = f"model {name!r} is not ready: {reason}"
                return (200 if ok else 400), orjson.dumps(answer), JSON
            if rest == ["config"]:
                expect(method, "GET")
                return 200, orjson.dumps(config(c.model(name, version))), JSON
            if rest == ["stats"]:
                expect(method, "GET")
                return 200, orjson.dumps(statistics(c, name, version)), JSON
        if head == "repository":
            if parts[1:] == ["index"]:
                expect(method, "POST")
                return 200, orjson.dumps(index(c)), JSON
            if len(parts) == 4 and parts[1] == "models" and parts[3] in ("load", "unload"):
                expect(method, "POST")
                return self._load(parts[2]) if parts[3] == "load" else self._unload(parts[2])
        raise NoRoute(f"no route {method} {path}")

    def _v1(
        self,
        method: str,
        path: str,
        parts: list[str],
        body: bytes,
        received: float | None,
        reply: Reply,
    ) -> Answer | None:
        """OpenAI's API over the text generators (`api.completions`)."""
        if parts == ["models"]:
            expect(method, "GET")
            return self.completions.models()
        if parts == ["completions"] or parts == ["chat", "completions"]:
            expect(method, "POST")
            self.completions.complete(body, parts[0] == "chat", received, reply)
            return None
        raise NoRoute(f"no route {method} {path}")

    async def _load(self, name: str) -> Response:
        model = await self.controller.load(name)
        if model.state != "READY":
            raise InvalidInput(f"model {name!r} {model.reason}")
        return 200, b"", JSON

    async def _unload(self, name: str) -> Response:
        self.controller.model(name)
        await self.controller.unload(name)
        return 200, b"", JSON


class Companion(Protocol):
    """A frontend that serves the same app beside HTTP (`HeadwayApp.companions`)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


#: How many infer paths `HeadwayApp` keeps routed (any path a client sends may be one).
_INFER_TARGETS_KEPT = 256

#: What a route gives: an answer now, or a coroutine to run as a task.
Answer = Response | Coroutine[Any, Any, Response]


def _readiness(controller: Controller, *, starting: bool) -> Response:
    """200 when every model the server was asked to serve is ready; else 503 naming those that
    are not and why (`starting` until the server has finished starting: a client waiting for
    it can tell a server still loading from one that came up with models it cannot serve)."""
    if starting:
        waiting = {
            model.label: "the server is starting: models are loading"
            for model in controller.status()
            if model.default
        }
    else:
        waiting = unready(controller)
    if not waiting:
        return 200, orjson.dumps({"ready": True}), JSON
    reasons = "; ".join(f"{name}: {reason}" for name, reason in waiting.items())
    body = {
        "ready": False,
        "starting": starting,
        "error": f"{len(waiting)} model(s) not ready: {reasons}",
        "models": waiting,
    }
    return 503, orjson.dumps(body), JSON


def _reply_from_task(
    reply: Reply, tasks: set[asyncio.Task[Response]], task: asyncio.Task[Response]
) -> None:
    tasks.discard(task)
    reply(problem(503, "the server is stopping") if task.cancelled() else task.result())


def _settle(answer: asyncio.Future[Response], response: Response) -> None:
    if not answer.done():  # its awaiter may have gone (a client that disconnected)
        answer.set_result(response)


async def _guarded(answer: Coroutine[Any, Any, Response], method: str, path: str) -> Response:
    try:
        return await answer
    except Exception as exc:
        return failure(exc, method, path)
