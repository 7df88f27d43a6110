"""The routes: the Open Inference Protocol, the admin routes and the application API.

`HeadwayApp.handle` takes one whole request (method, path, headers, body) and returns
(status, body, headers): a hand-written router, no framework on the hot path. It decodes the
body (`oip`), calls the controller, encodes the answer; errors become the protocol's
`{"error": "..."}` with the status from `api.errors`. `api.http` serves it over HTTP/1.1; it
is also an ASGI app, for uvicorn or any other ASGI server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Protocol

import orjson

import headway
from headway.api import apidocs, dashboard, oip
from headway.api.apps import AppRoutes, lookup_route
from headway.api.auth import AdminToken, is_admin
from headway.api.descriptions import config, index, metadata, unready
from headway.api.errors import (
    JSON,
    Headers,
    Response,
    error_response,
    http_status,
    method_not_allowed,
    problem,
)
from headway.api.limits import (
    MAX_HEADER_BYTES,
    MAX_URL_BYTES,
    body_decoder,
    headers_too_large,
    uri_too_long,
)
from headway.api.metrics import render
from headway.api.openapi import OPENAPI
from headway.api.parameters import NO_POLICY, schedule_policy
from headway.api.statistics import statistics
from headway.api.tracing import Trace, Tracing
from headway.apps import AppRegistry
from headway.control.controller import Controller
from headway.control.overload import NOTICEABLE_WAIT_S
from headway.errors import HeadwayError, InvalidInput, PayloadTooLarge, Unavailable
from headway.planning.live import LiveTuner

log = logging.getLogger("headway.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_TEXT: Headers = [(b"content-type", b"text/plain; version=0.0.4")]
#: Triton's protocol extensions that Headway implements (clients look here before calling them).
EXTENSIONS = [
    "binary_tensor_data",
    "model_repository",
    "schedule_policy",
    "model_configuration",
    "statistics",
]


class HeadwayApp:
    """ASGI application over a `Controller`."""

    def __init__(
        self,
        controller: Controller,
        *,
        max_body_bytes: int = 64 * 2**20,
        apps: AppRegistry | None = None,
        admin_token: str | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.controller = controller
        self.max_body_bytes = max_body_bytes
        #: With a token, the routes that change state need it (`api.auth`).
        self.admin_token = AdminToken(admin_token) if admin_token else None
        self.started = False
        self.apps = apps if apps is not None else AppRegistry(controller, controller.store)
        self._apps = AppRoutes(self.apps)
        self.tracing = tracing
        self._tasks: set[asyncio.Task[Response]] = set()  # routes still answering
        #: Other frontends over this app (the gRPC server): started before it starts (they
        #: answer "starting" until it has), stopped before it stops, whichever HTTP server
        #: runs the app.
        self.companions: list[Companion] = []
        #: The live tuner (`headway serve --tune`), when one runs: its figures go to /metrics.
        self.tuner: LiveTuner | None = None
        #: The last infer body whose JSON head was parsed, its header length and the head.
        self._parsed: tuple[bytes, int | None, dict[str, Any]] | None = None
        #: A request read sooner than this is not asked `Controller.refuse_late`: only a
        #: deadline shorter than one row's run plus its wait could be late, and admission
        #: refuses any such (the connection's quick refusal skips it alike). A policy that
        #: does not reject early asks it of every request.
        self._late_after = NOTICEABLE_WAIT_S if controller.scheduler.policy.early_reject else 0.0

    @property
    def tracing(self) -> Tracing | None:
        """OpenTelemetry traces of inferences and queries (`api.tracing`); None: off."""
        return self._tracing

    @tracing.setter
    def tracing(self, tracing: Tracing | None) -> None:
        self._tracing = tracing
        self.controller.tracing = tracing is not None
        self._apps.tracing = tracing

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
        self.started = True

    async def stop(self) -> None:
        self.started = False
        for companion in self.companions:
            await companion.stop()
        for task in list(self._tasks):
            task.cancel()
        await self.apps.stop()
        await self.controller.stop()
        if self.tracing is not None:
            self.tracing.shutdown()  # exports the spans still batched

    def catch_up(self) -> None:
        """The HTTP server is deep in a long turn of reads: answer what the workers finished
        meanwhile (`Controller.catch_up`)."""
        self.controller.catch_up()

    # -- ASGI (for uvicorn and other ASGI servers; `api.http` is the default server) --------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            status, payload, extra = await self._asgi_answer(scope, receive)
            await send({"type": "http.response.start", "status": status, "headers": extra})
            await send({"type": "http.response.body", "body": payload})
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _asgi_answer(self, scope: Scope, receive: Receive) -> Response:
        refused = _head_refused(scope)
        if refused is not None:
            return refused
        headers = dict(scope["headers"])
        try:
            body = await self._read_asgi_body(headers, receive)
        except HeadwayError as exc:
            return error_response(exc)
        return await self.handle(scope["method"], scope["path"], headers, body)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as exc:
                    log.exception("start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _read_asgi_body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        """The body, decoded (gzip, deflate) as it arrives, within the body limit."""
        self.check_length(headers.get(b"content-length"))

        async def pieces() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                yield message.get("body", b"")
                if not message.get("more_body"):
                    return

        return await self.read_body(headers, pieces())

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

        `headers` has lower-case names; `body` is the whole request body, decoded by the
        server that read it (its Content-Encoding is not looked at here);
        `received` is when its first bytes were read (the controller's clock): a deadline
        counts from then, so time spent waiting in a busy server counts against it. Most
        routes reply before this returns. An inference replies the moment its prediction is
        known (`Controller.submit`'s `then`: no task, no callback queue between the worker's
        answer and the write); routes that must wait for something else run as a task, which
        `stop` cancels if it is still running.
        """
        try:
            answer = self._route(method, path, headers, body, received, reply)
        except Exception as exc:
            reply(_failure(exc, method, path))
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
        parts = [p for p in path.split("/") if p]
        if not self.started and parts[:2] != ["v2", "health"]:
            raise Unavailable("the server is starting: models are loading; retry shortly")
        if self.admin_token is not None and is_admin(method, parts):
            refusal = self.admin_token.refusal(headers)
            if refusal is not None:
                return refusal
        if parts and parts[0] == "v2":
            return self._v2(method, parts[1:], headers, body, received, reply)
        if parts and parts[0] == "apps":
            return self._apps(method, parts[1:], path, body, headers.get(b"traceparent"))
        if parts and parts[0] == "lookups":
            return lookup_route(self.apps, method, parts[1:], body)
        if parts == ["metrics"]:
            _expect(method, "GET")
            return 200, render(self.controller, self.apps, self.tuner), _TEXT
        if parts == ["openapi.json"]:
            _expect(method, "GET")
            return 200, orjson.dumps(OPENAPI), JSON
        if not parts:
            _expect(method, "GET")
            return 307, b"", [(b"location", b"/dashboard")]
        if parts[0] == "dashboard":
            _expect(method, "GET")
            return dashboard.route(parts[1:], self.controller, self.apps)
        if parts[0] == "docs":
            _expect(method, "GET")
            return apidocs.route(parts[1:])
        raise _NotFound(f"no route {method} {path}")

    def _v2(
        self,
        method: str,
        parts: list[str],
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None,
        reply: Reply,
    ) -> Answer | None:
        c = self.controller
        if not parts:
            _expect(method, "GET")
            return (
                200,
                orjson.dumps(
                    {"name": "headway", "version": headway.__version__, "extensions": EXTENSIONS}
                ),
                JSON,
            )
        head = parts[0]
        if parts == ["models", "stats"]:
            _expect(method, "GET")
            return 200, orjson.dumps(statistics(c)), JSON
        if head == "health" and len(parts) == 2 and parts[1] == "live":
            _expect(method, "GET")
            return 200, orjson.dumps({"live": True}), JSON
        if head == "health" and len(parts) == 2 and parts[1] == "ready":
            _expect(method, "GET")
            # starting until every model loaded at start is warm (its batch sizes measured)
            return _readiness(c, starting=not self.started or bool(c.measuring.warming))
        if head == "models" and len(parts) >= 2:
            name, rest = parts[1], parts[2:]
            version = None
            if len(rest) >= 2 and rest[0] == "versions":
                version, rest = rest[1], rest[2:]
            if rest == ["infer"]:
                _expect(method, "POST")
                if self._tracing is None:
                    self._infer(name, version, headers, body, received, reply)
                else:
                    self._traced_infer(name, version, headers, body, received, reply)
                return None
            if not rest:
                _expect(method, "GET")
                return 200, orjson.dumps(metadata(c.model(name, version))), JSON
            if rest == ["ready"]:
                _expect(method, "GET")
                model = c.model(name, version)
                ok = model.state == "READY"
                answer = {"name": name, "ready": ok}
                if not ok:  # an error answer: `error`, as every error, and Triton's `reason`
                    reason = model.reason or model.state.lower()
                    answer["reason"] = reason
                    answer["error"] = f"model {name!r} is not ready: {reason}"
                return (200 if ok else 400), orjson.dumps(answer), JSON
            if rest == ["config"]:
                _expect(method, "GET")
                return 200, orjson.dumps(config(c.model(name, version))), JSON
            if rest == ["stats"]:
                _expect(method, "GET")
                return 200, orjson.dumps(statistics(c, name, version)), JSON
        if head == "repository":
            if parts[1:] == ["index"]:
                _expect(method, "POST")
                return 200, orjson.dumps(index(c)), JSON
            if len(parts) == 4 and parts[1] == "models" and parts[3] in ("load", "unload"):
                _expect(method, "POST")
                return self._load(parts[2]) if parts[3] == "load" else self._unload(parts[2])
        raise _NotFound(f"no route {method} /v2/{'/'.join(parts)}")

    async def _load(self, name: str) -> Response:
        model = await self.controller.load(name)
        if model.state != "READY":
            raise InvalidInput(f"model {name!r} {model.reason}")
        return 200, b"", JSON

    async def _unload(self, name: str) -> Response:
        self.controller.model(name)
        await self.controller.unload(name)
        return 200, b"", JSON

    def infer_head(self, body: bytes, length: int | None) -> dict[str, Any]:
        """`oip.infer_head` of an infer body, parsed once: the transport's quick refusal
        (`api.refusals`) reads it before the request is routed, and `_infer` again after."""
        parsed = self._parsed
        if parsed is not None and parsed[0] is body and parsed[1] == length:
            return parsed[2]
        head = oip.infer_head(body, length)
        self._parsed = body, length, head
        return head

    def _infer(
        self,
        name: str,
        version: str | None,
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None,
        reply: Reply,
        trace: Trace | None = None,
    ) -> None:
        controller = self.controller
        model = controller.model(name, version)
        raw_length = headers.get(b"inference-header-content-length")
        length: int | None = None
        if raw_length is not None:
            try:
                length = int(raw_length)
            except ValueError:
                raise InvalidInput("Inference-Header-Content-Length must be an integer") from None
        # its parameters (its deadline) first: a request that waited too long to be read is
        # refused before its tensors are decoded, so under overload a refusal stays cheap
        head = None if length == 0 else self.infer_head(body, length)
        parameters = head.get("parameters") if head else None
        timeout, priority = schedule_policy(parameters) if parameters else NO_POLICY
        # its own wait since its bytes were read (not the loop's worst lag, which refused
        # everyone after one stall)
        if received is not None:
            now = controller.clock.now()
            waited = now - received
            if waited >= self._late_after and waited > 0.0:
                controller.refuse_late(model, timeout=timeout, waited=waited, now=now)
        if head is None:
            specs = model.config.inputs
            if len(specs) != 1:
                raise InvalidInput("a headerless binary body needs a model with one input")
            spec = specs[0]
            request = oip.decode_raw_single(body, spec.name, spec.datatype, list(spec.shape))
            request.all_binary = True
        else:
            request = oip.decode_infer(body, length, head)
        if trace is not None:
            trace.mark_decoded(controller.clock.now())
        controller.submit(
            name,
            request.inputs,
            version=version,
            outputs=request.outputs,
            timeout=timeout,
            priority=priority,
            waited=0.0 if received is None else controller.clock.now() - received,
            then=partial(_reply_encoded, reply, request, name),
            trace=trace,
        )

    def _traced_infer(
        self,
        name: str,
        version: str | None,
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None,
        reply: Reply,
    ) -> None:
        """`_infer` inside a trace (`api.tracing`): its spans end when its answer leaves."""
        assert self.tracing is not None
        clock = self.controller.clock
        trace = self.tracing.start(
            name, headers.get(b"traceparent"), clock.now() if received is None else received
        )

        def answered(response: Response) -> None:
            trace.finish(clock.now(), response[0])
            reply(response)

        try:
            self._infer(name, version, headers, body, received, answered, trace)
        except HeadwayError as exc:
            trace.finish(clock.now(), http_status(exc))
            raise


#: How a request's answer reaches its connection: called once, with (status, body, headers).
Reply = Callable[[Response], None]


class Companion(Protocol):
    """A frontend that serves the same app beside HTTP (`HeadwayApp.companions`)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


#: What a route gives: an answer now, or a coroutine to run as a task.
Answer = Response | Coroutine[Any, Any, Response]


def _readiness(controller: Controller, *, starting: bool) -> Response:
    """200 when every model the server was asked to serve is ready; else 503 naming those that
    are not and why (`starting` until the server has finished starting: a client waiting for
    it can tell a server still loading from one that came up with models it cannot serve)."""
    if starting:
        waiting = {name: "the server is starting: models are loading" for name in controller.models}
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


def _reply_encoded(
    reply: Reply, request: oip.InferRequest, name: str, prediction: asyncio.Future[Any]
) -> None:
    """The prediction is known: encode it (or its error) and reply."""
    reply(_encoded(prediction, request, name))


def _reply_from_task(
    reply: Reply, tasks: set[asyncio.Task[Response]], task: asyncio.Task[Response]
) -> None:
    tasks.discard(task)
    reply(problem(503, "the server is stopping") if task.cancelled() else task.result())


def _settle(answer: asyncio.Future[Response], response: Response) -> None:
    if not answer.done():  # its awaiter may have gone (a client that disconnected)
        answer.set_result(response)


def _encoded(prediction: asyncio.Future[Any], request: oip.InferRequest, name: str) -> Response:
    """The answer to a request whose prediction (or error) is known."""
    try:
        result = prediction.result()
        payload, header_length = oip.encode_infer(
            result.model, result.version, result.outputs, request
        )
    except asyncio.CancelledError:
        return problem(503, "the server is stopping")
    except Exception as exc:
        return _failure(exc, "POST", f"/v2/models/{name}/infer")
    if header_length is None:
        return 200, payload, JSON
    binary = [
        (b"content-type", b"application/octet-stream"),
        (b"inference-header-content-length", str(header_length).encode()),
    ]
    return 200, payload, binary


async def _guarded(answer: Coroutine[Any, Any, Response], method: str, path: str) -> Response:
    try:
        return await answer
    except Exception as exc:
        return _failure(exc, method, path)


def _failure(error: Exception, method: str, path: str) -> Response:
    """The answer to a request that raised `error`: its status and message."""
    if isinstance(error, HeadwayError):
        return error_response(error)
    if isinstance(error, _NotFound):
        return problem(404, str(error))
    if isinstance(error, _BadMethod):
        return method_not_allowed(error.method, (error.allowed,))
    log.error("internal error on %s %s", method, path, exc_info=error)  # never crash on one
    return problem(500, f"internal error: {type(error).__name__}: {error}")


def _head_refused(scope: Scope) -> Response | None:
    """An ASGI server's request whose URL or headers are over `api.limits` (414, 431)."""
    url = len(scope.get("raw_path") or scope["path"]) + len(scope.get("query_string", b""))
    if url > MAX_URL_BYTES:
        return problem(414, uri_too_long(url))
    size = sum(len(name) + len(value) for name, value in scope["headers"])
    if size > MAX_HEADER_BYTES:
        return problem(431, headers_too_large(size))
    return None


class _NotFound(Exception):
    pass


class _BadMethod(Exception):
    def __init__(self, method: str, allowed: str) -> None:
        super().__init__(method, allowed)
        self.method = method
        self.allowed = allowed


def _expect(method: str, allowed: str) -> None:
    if method != allowed:
        raise _BadMethod(method, allowed)
