"""`inference.GRPCInferenceService` on grpc.aio, in the HTTP server's event loop.

It serves the same `HeadwayApp` as REST: one controller, one repository, the same
descriptions (`api.descriptions`, `api.statistics`) turned into the protocol's messages. It
listens before the workers start (so a port in use fails at once, and health answers
during start-up) and stops before the app does, letting calls in flight finish.

An inference's deadline is the sooner of gRPC's own deadline and the `timeout` (µs) or
`slo_ms` parameter, else the model's SLO. Errors travel as status codes (`status`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import orjson
from google.protobuf import json_format

import headway
from headway.api.app import EXTENSIONS, HeadwayApp, schedule_policy
from headway.api.auth import AdminToken
from headway.api.descriptions import config, index, metadata, unready
from headway.api.grpc import messages
from headway.api.grpc.codec import decode_infer, encode_infer
from headway.api.grpc.status import grpc_status
from headway.api.statistics import statistics
from headway.api.tracing import Trace
from headway.errors import ConfigError, HeadwayError, InvalidInput, Unavailable

log = logging.getLogger("headway.grpc")

#: RPCs that answer while the server is starting (everything else is UNAVAILABLE until then).
_ALWAYS = {"ServerLive", "ServerReady"}
#: RPCs that change what the server serves: with an admin token they need it, as over REST
#: (`api.auth`), in the call's metadata as `authorization: Bearer <token>`.
_ADMIN = {"RepositoryModelLoad", "RepositoryModelUnload"}

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class InferenceService:
    """The service's RPCs, each named as in the protocol, over one app."""

    def __init__(self, app: HeadwayApp) -> None:
        self.app = app
        self.controller = app.controller

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return messages.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        ready = self.app.started and not unready(self.controller)  # as REST's readiness
        return messages.ServerReadyResponse(ready=ready)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        # an unknown model is simply not ready (tritonclient's is_model_ready -> False)
        model = self.controller.served(request.name, _version_number(request.version))
        return messages.ModelReadyResponse(ready=model is not None and model.state == "READY")

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return messages.ServerMetadataResponse(
            name="headway", version=headway.__version__, extensions=EXTENSIONS
        )

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        model = self.controller.model(request.name, request.version or None)
        return _parsed(metadata(model), messages.ModelMetadataResponse())

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        described = config(self.controller.model(request.name, request.version or None))
        own = described.pop("headway")
        described["parameters"] = {
            f"headway.{key}": {"string_value": str(value)} for key, value in own.items()
        }
        return _parsed({"config": described}, messages.ModelConfigResponse())

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        answer = statistics(self.controller, request.name or None, request.version or None)
        return _parsed(answer, messages.ModelStatisticsResponse())

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        models = index(self.controller)
        if request.ready:
            models = [m for m in models if m.get("state") == "READY"]
        return _parsed({"models": models}, messages.RepositoryIndexResponse())

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        model = await self.controller.load(request.model_name)
        if model.state != "READY":
            raise InvalidInput(f"model {request.model_name!r} {model.reason}")
        return messages.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        self.controller.model(request.model_name)  # NOT_FOUND for an unknown model
        await self.controller.unload(request.model_name)
        return messages.RepositoryModelUnloadResponse()

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        tracing = self.app.tracing
        if tracing is None:
            return await self._infer(request, context, None)
        clock = self.controller.clock
        traceparent = _metadata(context, "traceparent")
        trace = tracing.start(request.model_name, traceparent, clock.now())
        code = grpc.StatusCode.INTERNAL
        try:
            answer = await self._infer(request, context, trace)
            code = grpc.StatusCode.OK
            return answer
        except HeadwayError as exc:
            code = grpc_status(exc)
            raise
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        finally:
            trace.finish_rpc(clock.now(), code.value[0], code.name)

    async def _infer(self, request: Any, context: Any, trace: Trace | None) -> Any:
        decoded = decode_infer(request)
        if trace is not None:
            trace.mark_decoded(self.controller.clock.now())
        timeout, priority = schedule_policy(decoded.parameters)
        remaining = context.time_remaining()
        if remaining is not None:  # the client's own deadline
            timeout = remaining if timeout is None else min(timeout, remaining)
        prediction = await self.controller.submit(
            request.model_name,
            decoded.inputs,
            version=request.model_version or None,
            outputs=decoded.outputs,
            timeout=timeout,
            priority=priority,
            trace=trace,
        )
        return encode_infer(prediction.model, prediction.version, prediction.outputs, decoded)


async def _authorize(token: AdminToken, context: grpc.aio.ServicerContext) -> None:
    """Abort the call UNAUTHENTICATED, with REST's 401 message, unless it carries the token."""
    headers = {
        key.encode(): value.encode() if isinstance(value, str) else value
        for key, value in context.invocation_metadata() or ()
        if key == "authorization"
    }
    refusal = token.refusal(headers)
    if refusal is not None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, orjson.loads(refusal[1])["error"])


def _metadata(context: grpc.aio.ServicerContext, key: str) -> str | None:
    """The value of `key` in the call's metadata (the first, if sent more than once)."""
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


def _version_number(version: str) -> int | None:
    return int(version) if version.isascii() and version.isdigit() else None


def _parsed(document: dict[str, Any], message: Any) -> Any:
    """A description (the REST answer's JSON) as the protocol's message: same field names."""
    return json_format.ParseDict(document, message, ignore_unknown_fields=True)


class GrpcServer:
    """Serves `InferenceService` on host:port; a companion of the app (`HeadwayApp.companions`)."""

    def __init__(
        self, app: HeadwayApp, *, host: str = "127.0.0.1", port: int = 8001, grace: float = 5.0
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.grace = grace
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                # two servers on one port would split its calls between them silently
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", self.app.max_body_bytes),
                ("grpc.max_send_message_length", -1),
            ]
        )
        server.add_generic_rpc_handlers((self._handlers(),))
        try:
            bound = server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError:
            bound = 0
        if bound == 0:
            raise ConfigError(
                f"cannot listen for gRPC on {self.host}:{self.port} (in use?): "
                "choose another --grpc-port, or 0 to serve no gRPC"
            )
        self.port = bound
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(self.grace)
            self._server = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _handlers(self) -> grpc.GenericRpcHandler:
        service = InferenceService(self.app)
        table = {
            name: grpc.unary_unary_rpc_method_handler(
                self._guarded(name, getattr(service, name)),
                request_deserializer=request.FromString,
                response_serializer=response.SerializeToString,
            )
            for name, (request, response) in messages.methods().items()
        }
        return grpc.method_handlers_generic_handler(messages.SERVICE, table)

    def _guarded(self, name: str, method: Handler) -> Handler:
        """`method`, with Headway's errors as status codes and nothing else escaping."""
        app = self.app
        always = name in _ALWAYS
        token = app.admin_token if name in _ADMIN else None

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                if not (always or app.started):
                    raise Unavailable("the server is starting: models are loading; retry shortly")
                if token is not None:
                    await _authorize(token, context)
                return await method(request, context)
            except HeadwayError as exc:
                await context.abort(grpc_status(exc), exc.message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never crash on one call
                log.error("internal error in %s", name, exc_info=exc)
                await context.abort(
                    grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
                )

        return call
