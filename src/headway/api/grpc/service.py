"""`inference.GRPCInferenceService`'s RPCs over one `HeadwayApp`, transport aside.

They serve the same app as REST: one controller, one repository, the same descriptions
(`api.descriptions`, `api.statistics`) turned into the protocol's messages. A `context` is
what the transport (`api.grpc.server`) says of the call: its deadline, its metadata, and a
way to end it with a status.

An inference's deadline is the sooner of gRPC's own deadline and the `timeout` (µs) or
`slo_ms` parameter, else the model's SLO. Errors travel as status codes (`status`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import grpc
from google.protobuf import json_format

import headway
from headway.api.app import EXTENSIONS, HeadwayApp
from headway.api.auth import BearerToken
from headway.api.descriptions import config, index, metadata, unready
from headway.api.grpc import messages
from headway.api.grpc.codec import decode_infer, encode_infer
from headway.api.grpc.status import grpc_status
from headway.api.oip import InferRequest
from headway.api.parameters import (
    NO_POLICY,
    model_parameters,
    schedule_policy,
    stream_targets,
)
from headway.api.statistics import statistics
from headway.api.tracing import Trace
from headway.control.request import (
    FutureReceiver,
    InferenceRequest,
    Prediction,
    Receiver,
    Ticket,
)
from headway.errors import HeadwayError, InvalidInput

#: RPCs that answer while the server is starting (everything else is UNAVAILABLE until then),
#: and without a token on a server with an inference token: the health probes, as over REST.
ALWAYS = {"ServerLive", "ServerReady"}
#: RPCs that change what the server serves: with an admin token they need it, as over REST
#: (`api.auth`), in the call's metadata as `authorization: Bearer <token>`.
ADMIN = {"RepositoryModelLoad", "RepositoryModelUnload"}


class Context(Protocol):
    """What an RPC may ask of its call (`context.CallContext`; the part of grpcio's
    `ServicerContext` that the RPCs use, so they read as a grpcio servicer's)."""

    def time_remaining(self) -> float | None: ...
    def invocation_metadata(self) -> Any: ...
    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn: ...


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
        traceparent = metadata_value(context, "traceparent")
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
        future: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        decoded, _ = self.submit_infer(
            request, context, lambda decoded: FutureReceiver(future), trace=trace
        )
        prediction = await future
        return encode_infer(
            prediction.model,
            prediction.version,
            prediction.outputs,
            decoded,
            self.app.max_answer_bytes,
        )

    def submit_infer(
        self,
        request: Any,
        context: Context,
        receiver: Callable[[InferRequest], Receiver],
        *,
        trace: Trace | None = None,
        arrival: float | None = None,
        stream: bool = False,
    ) -> tuple[InferRequest, Ticket]:
        """Decode and admit an inference now (a HeadwayError if it cannot be); its answer goes
        to `receiver(decoded)` (`Controller.submit`), and its ticket withdraws it.
        `arrival`: when its bytes arrived, on the controller's clock (None: now). `stream`:
        the answer's parts go to the receiver as they are made (`ModelStreamInfer`)."""
        decoded = decode_infer(request)
        if trace is not None:
            trace.mark_decoded(self.controller.clock.now())
        parameters = decoded.parameters
        timeout, priority = schedule_policy(parameters) if parameters else NO_POLICY
        remaining = context.time_remaining()
        if remaining is not None:  # the client's own deadline
            timeout = remaining if timeout is None else min(timeout, remaining)
        ttft = tpot = None
        if stream and parameters:
            ttft, tpot = stream_targets(parameters)
        ticket = self.controller.submit(
            InferenceRequest(
                request.model_name,
                version=request.model_version or None,
                timeout=timeout,
                priority=priority,
                arrival=arrival,
                inputs=decoded.inputs,
                outputs=decoded.outputs,
                trace=trace,
                stream=stream,
                ttft=ttft,
                tpot=tpot,
                parameters=model_parameters(parameters) if parameters else None,
            ),
            receiver(decoded),
        )
        return decoded, ticket


async def authorize(token: BearerToken, context: Context) -> None:
    """Abort the call UNAUTHENTICATED, with REST's 401 message, unless it carries the token."""
    value = metadata_value(context, "authorization")
    sent = None if value is None else value.encode("latin-1")
    if not token.allows(sent):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, token.message(sent))


def metadata_value(context: Context, key: str) -> str | None:
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
