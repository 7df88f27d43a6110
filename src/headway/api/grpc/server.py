"""The gRPC server: `inference.GRPCInferenceService` over HTTP/2 on the server's event loop.

Its own HTTP/2 path (`api.grpc.http2`) rather than grpcio's server (docs/decisions.md says
why): a call read in a loop turn reaches the controller in that turn, beside the calls read
with it, so concurrent calls batch as REST's requests do. An inference is admitted while its
bytes are being read and answered the moment its prediction is known (its receiver,
`CallReply`); the other RPCs run as tasks (`api.grpc.service`), each routed to its RPC by
`CallRouter`. It listens before the workers start (so a port in use fails at once, and health
answers during start-up) and stops before the app does: GOAWAY to every client, calls in
flight finish (up to `grace` seconds).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from headway.api.accepting import PendingAccepts
from headway.api.app import HeadwayApp
from headway.api.errors import INTERNAL_REASON
from headway.api.grpc import messages
from headway.api.grpc.bidi import StreamCall
from headway.api.grpc.calls import INTERNAL, Call, Limits
from headway.api.grpc.codec import encode_infer, parameters
from headway.api.grpc.connections import Connections
from headway.api.grpc.context import Aborted, CallContext
from headway.api.grpc.http2 import LINGER_S, Http2Connection
from headway.api.grpc.service import ADMIN, ALWAYS, InferenceService, authorize
from headway.api.grpc.status import grpc_status
from headway.api.grpc.streams import InferStream
from headway.api.http import SWEEP_S
from headway.api.limits import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_CONNECTIONS, WRITE_TIMEOUT_S
from headway.api.oip import InferRequest
from headway.api.parameters import schedule_policy
from headway.api.tls import Handshakes
from headway.api.turns import ReadTurns
from headway.control.admission.reasons import SHED
from headway.control.request import InferenceRequest, Prediction, Tensors
from headway.errors import ConfigError, HeadwayError, Unavailable

log = logging.getLogger("headway.grpc")

_INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
_CANCELLED = grpc.StatusCode.CANCELLED.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
_DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
_UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]
#: The one method that streams both ways: Triton's decoupled inference.
STREAM_PATH = f"/{messages.SERVICE}/ModelStreamInfer"


class CallRouter:
    """Turns each call into its RPC over the app (the `Handler` of every connection)."""

    def __init__(self, app: HeadwayApp) -> None:
        self.app = app
        self.service = InferenceService(app)
        self.methods = {
            f"/{messages.SERVICE}/{name}": (name, request)
            for name, (request, _) in messages.methods().items()
        }
        self.tasks: set[asyncio.Task[Any]] = set()

    def accepts(self, path: str) -> bool:
        return path in self.methods

    def streams(self, path: str) -> bool:
        return path == STREAM_PATH

    def open(self, call: StreamCall) -> InferStream:
        """A `ModelStreamInfer` call: Triton's decoupled stream (`api.grpc.streams`)."""
        return InferStream(self.app, self.service, call)

    def call(self, call: Call) -> None:
        name, request_class = self.methods[call.path]
        token = self.app.inference_token
        if token is not None and name not in ALWAYS:  # before its message is even parsed
            sent = call.metadata(b"authorization")
            if not token.allows(sent):
                call.fail(_UNAUTHENTICATED, token.message(sent))
                return
        try:
            request = request_class.FromString(call.message)
        except DecodeError as exc:
            call.fail(_INVALID_ARGUMENT, f"cannot parse the {name} request message: {exc}")
            return
        app = self.app
        if name == "ModelInfer" and app.tracing is None and app.started:
            self._infer_now(call, request)
            return
        task = asyncio.ensure_future(self._run(name, request, CallContext(call)))
        self.tasks.add(task)
        task.add_done_callback(partial(self._ran, call))

    def _infer_now(self, call: Call, request: Any) -> None:
        """An inference admitted in this loop turn, answered by its receiver (`CallReply`)."""
        waited = max(0.0, time.monotonic() - call.received)
        try:
            controller = self.app.controller
            arrival = controller.clock.now() - waited
            # screened as REST's requests are: not while the server keeps up
            if controller.may_refuse(waited):
                refusal = self._refusal(call, request, arrival)
                if refusal is not None:
                    call.fail(*refusal)
                    return
            self.service.submit_infer(
                request,
                CallContext(call),
                partial(CallReply, call, self.app.max_answer_bytes),
                arrival=arrival,
            )
        except HeadwayError as exc:
            _failed(call, exc)
        except Exception as exc:  # never crash on one call
            _internal(call, "ModelInfer", exc)

    def _refusal(self, call: Call, request: Any, arrival: float) -> tuple[int, str, str] | None:
        """The status, message and reason that overload refuses an inference with before its
        tensors are decoded (`Controller.screen`, as REST's `api.refusals`), or None: decode
        and admit it."""
        timeout, priority = schedule_policy(parameters(request.parameters))
        if call.timeout is not None:
            timeout = call.timeout if timeout is None else min(timeout, call.timeout)
        name = request.model_name
        refusal = self.app.controller.screen(
            InferenceRequest(
                name,
                version=request.model_version or None,
                timeout=timeout,
                priority=priority,
                arrival=arrival,
            )
        )
        if refusal is None:
            return None
        code = _UNAVAILABLE if refusal is SHED else _DEADLINE_EXCEEDED
        return code, refusal.message(name), refusal.reason

    async def _run(self, name: str, request: Any, context: CallContext) -> bytes:
        app = self.app
        if not (name in ALWAYS or app.started):
            raise Unavailable("the server is starting: models are loading; retry shortly")
        if name in ADMIN and app.admin_token is not None:
            await authorize(app.admin_token, context)
        response = await getattr(self.service, name)(request, context)
        return bytes(response.SerializeToString())

    def _ran(self, call: Call, task: asyncio.Task[bytes]) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            call.fail(_CANCELLED, "the server is stopping")
            return
        exc = task.exception()
        if exc is None:
            call.answer(task.result())
        elif isinstance(exc, Aborted):
            call.fail(exc.code.value[0], exc.details)
        elif isinstance(exc, HeadwayError):
            _failed(call, exc)
        else:
            _internal(call, call.path.rsplit("/", 1)[-1], exc)


class CallReply:
    """The receiver of one inference: its prediction (or its error) as the call's answer."""

    __slots__ = ("call", "decoded", "limit")

    def __init__(self, call: Call, limit: int, decoded: InferRequest) -> None:
        self.call = call
        self.limit = limit  # the largest answer, in bytes (`--max-answer-mb`)
        self.decoded = decoded

    def part(self, outputs: Tensors) -> None:
        raise NotImplementedError("a unary call answers whole: nothing streams to it")

    def done(self, prediction: Prediction) -> None:
        call = self.call
        try:
            response = encode_infer(
                prediction.model, prediction.version, prediction.outputs, self.decoded, self.limit
            )
            call.answer(response.SerializeToString())
        except HeadwayError as exc:
            _failed(call, exc)
        except Exception as exc:
            _internal(call, "ModelInfer", exc)

    def fail(self, error: Exception) -> None:
        if isinstance(error, HeadwayError):
            _failed(self.call, error)
        else:
            _internal(self.call, "ModelInfer", error)


def _failed(call: Call, error: HeadwayError) -> None:
    """End `call` with the status of `error`, its message and its reason."""
    call.fail(grpc_status(error).value[0], error.message, error.reason)


def _internal(call: Call, name: str, exc: BaseException) -> None:
    log.error("internal error in %s", name, exc_info=exc)
    call.fail(INTERNAL, f"internal error: {type(exc).__name__}: {exc}", INTERNAL_REASON)


class GrpcServer(ReadTurns):
    """Serves `InferenceService` on host:port; a companion of the app (`HeadwayApp.companions`)."""

    def __init__(
        self,
        app: HeadwayApp,
        *,
        host: str = "127.0.0.1",
        port: int = 8001,
        grace: float = 5.0,
        header_timeout: float = HEADER_TIMEOUT_S,
        body_timeout: float = BODY_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        write_timeout: float = WRITE_TIMEOUT_S,
        idle_timeout: float = Limits.idle_timeout,
        stream_idle_timeout: float = Limits.stream_idle_timeout,
        max_buffered: int = Limits.server_buffer,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.app = app
        self.tls = tls  # gRPC over TLS, ALPN h2: each connection's handshake first (`api.tls`)
        self._handshakes: Handshakes | None = None
        self.host = host
        self.port = port
        self.grace = grace
        max_message = app.max_body_bytes
        if max_buffered < 2 * max_message:  # a request of the largest size must fit
            log.warning(
                "--grpc-max-buffered-mb %g raised to %g: twice --max-body-mb",
                max_buffered / 2**20, 2 * max_message / 2**20,
            )  # fmt: skip
            max_buffered = 2 * max_message
        self.limits = Limits(
            max_message=max_message,
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            max_connections=max_connections,
            write_timeout=write_timeout,
            idle_timeout=idle_timeout,
            stream_idle_timeout=stream_idle_timeout,
            # a quarter of the server's (one connection cannot take all), and at least a
            # request of the largest size with room for another
            connection_buffer=max(
                min(Limits.connection_buffer, max_buffered // 4), 2 * max_message
            ),
            server_buffer=max_buffered,
        )
        self.connections: Connections[Http2Connection] = Connections()
        self.unanswered = 0  # calls handed over and not yet answered
        self.buffered = 0  # request bytes held for calls still arriving
        self.router = CallRouter(app)
        self._server: asyncio.Server | None = None
        self._pending: PendingAccepts | None = None  # see `accept_pending`
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.loop = loop = asyncio.get_running_loop()
        protocol: Callable[[], asyncio.Protocol] = self._connection
        if self.tls is not None:
            self._handshakes = Handshakes(
                self.tls, self._connection, established=self.connections,
                cap=self.limits.max_connections, timeout=self.limits.header_timeout,
                accept_pending=self.accept_pending,
            )  # fmt: skip
            protocol = self._handshakes.protocol
        try:
            self._server = await loop.create_server(
                protocol,
                self.host,
                self.port,
                reuse_address=True,
                backlog=2048,
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot listen for gRPC on {self.host}:{self.port} (in use?): "
                f"choose another --grpc-port, or 0 to serve no gRPC ({exc.strerror})"
            ) from None
        self._pending = PendingAccepts(loop, self._server, protocol)
        sockets = self._server.sockets
        if sockets and self.port == 0:
            self.port = sockets[0].getsockname()[1]
        self._sweeper = loop.create_task(self._sweep())

    def _connection(self) -> Http2Connection:
        return Http2Connection(self.router, self.limits, self)

    def accept_pending(self) -> None:
        """Accept the connections waiting in the listen queues (`api.accepting`)."""
        if self._pending is not None:
            self._pending.accept()

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        if self._pending is not None:
            self._pending.close()
            self._pending = None
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._handshakes is not None:
            self._handshakes.close()
        for connection in list(self.connections):
            connection.go_away()
        give_up_at = time.monotonic() + self.grace
        while self.unanswered > 0 and time.monotonic() < give_up_at:
            await asyncio.sleep(0.01)
        tasks = list(self.router.tasks)
        for task in tasks:
            task.cancel()
        if tasks:  # the cancelled calls answer CANCELLED
            await asyncio.wait(tasks)
        for connection in list(self.connections):
            connection.close()
        give_up_at = time.monotonic() + LINGER_S  # clients close on the GOAWAY's end
        while self.connections.sockets() and time.monotonic() < give_up_at:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.drop()
        self._server = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _sweep(self) -> None:
        limits = self.limits
        timeouts = (limits.header_timeout, limits.body_timeout, limits.write_timeout)
        every = min(SWEEP_S, *timeouts, limits.idle_timeout, limits.stream_idle_timeout) / 2
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for connection in list(self.connections):
                connection.sweep(now)
