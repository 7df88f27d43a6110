"""`GrpcClient`: the protocol's inference calls over gRPC (`inference.GRPCInferenceService`),
numpy in and out, with `Client`'s deadlines and retries (UNAVAILABLE, DEADLINE_EXCEEDED and
RESOURCE_EXHAUSTED are gRPC's 503s and 429). Blocking; for the apps API use `Client` (REST only)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format

from headway.api.grpc import messages
from headway.api.grpc.calls import REASON_KEY
from headway.client.calls import named_inputs
from headway.client.codec import Answer
from headway.client.credentials import Verify, bearer, grpc_credentials
from headway.client.retry import Retry
from headway.datatypes import decode_bytes_tensor, encode_bytes_tensor, numpy_dtype, oip_datatype
from headway.errors import (
    HeadwayError,
    InvalidInput,
    ModelError,
    ModelNotFound,
    Overloaded,
    Unauthorized,
    Unavailable,
    error_for_reason,
)

_ERRORS: dict[grpc.StatusCode, type[HeadwayError]] = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthorized,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidInput,
    grpc.StatusCode.NOT_FOUND: ModelNotFound,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Overloaded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    grpc.StatusCode.INTERNAL: ModelError,
}
#: Retried as REST's 503 and 429 are; DEADLINE_EXCEEDED is also the server's "cannot be met
#: now" (a busy worker), and a retry never outlives the call's own deadline.
_RETRIED = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
)


class GrpcClient:
    """A server's gRPC port (`host:port`, Headway's `--grpc-port`); a context manager.

    `tls`: the port serves TLS (`headway serve --tls-cert`); `verify` then says which
    certificates it may show (True: the public authorities; a PEM file of authorities).
    `inference_token` (or, without one, the admin token `token`), as `Client`'s: sent with
    every call as its `authorization` metadata."""

    def __init__(
        self,
        address: str = "127.0.0.1:8001",
        *,
        timeout: float = 30.0,
        retry: Retry | None = None,
        on_retry: Callable[[str], None] | None = None,
        tls: bool = False,
        verify: Verify = True,
        token: str | None = None,
        inference_token: str | None = None,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.retry = retry or Retry()
        self.on_retry = on_retry or (lambda line: None)
        options = [("grpc.max_receive_message_length", -1)]
        self._channel = (
            grpc.secure_channel(address, grpc_credentials(verify), options=options)
            if tls
            else grpc.insecure_channel(address, options=options)
        )
        self._metadata = tuple(bearer(inference_token or token).items()) or None
        self._methods = {
            name: self._channel.unary_unary(
                f"/{messages.SERVICE}/{name}",
                request_serializer=request.SerializeToString,
                response_deserializer=response.FromString,
            )
            for name, (request, response) in messages.methods().items()
        }
        self._requests = {name: request for name, (request, _) in messages.methods().items()}

    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray] | np.ndarray,
        *,
        version: str | int | None = None,
        outputs: Sequence[str] | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        request_id: str | None = None,
    ) -> Answer:
        """As `Client.infer`: `timeout` (seconds) is the deadline across retries, sent as the
        call's gRPC deadline."""
        request = messages.ModelInferRequest(model_name=model, model_version=str(version or ""))
        if request_id is not None:
            request.id = request_id
        if priority is not None:
            request.parameters["priority"].int64_param = priority
        for name, value in named_inputs(inputs).items():
            array = np.asarray(value)
            datatype = oip_datatype(array.dtype)
            request.inputs.add(name=name, datatype=datatype, shape=array.shape)
            request.raw_input_contents.append(
                encode_bytes_tensor(array)
                if datatype == "BYTES"
                else np.ascontiguousarray(array, dtype=numpy_dtype(datatype)).tobytes()
            )
        for name in outputs or ():
            request.outputs.add(name=name)
        response = self._call("ModelInfer", request, timeout)
        decoded: dict[str, np.ndarray] = {}
        for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
            shape = tuple(tensor.shape)
            decoded[tensor.name] = (
                decode_bytes_tensor(raw, shape)
                if tensor.datatype == "BYTES"
                else np.frombuffer(raw, numpy_dtype(tensor.datatype)).reshape(shape)
            )
        return Answer(response.model_name, response.model_version, decoded, response.id or None)

    def live(self) -> bool:
        return bool(self._call("ServerLive", None).live)

    def ready(self, model: str | None = None, version: str | int | None = None) -> bool:
        if model is None:
            return bool(self._call("ServerReady", None).ready)
        request = self._requests["ModelReady"](name=model, version=str(version or ""))
        return bool(self._call("ModelReady", request).ready)

    def metadata(self, model: str | None = None, version: str | int | None = None) -> Any:
        if model is None:
            return _json(self._call("ServerMetadata", None))
        request = self._requests["ModelMetadata"](name=model, version=str(version or ""))
        return _json(self._call("ModelMetadata", request))

    def statistics(self, model: str | None = None, version: str | int | None = None) -> Any:
        request = self._requests["ModelStatistics"](name=model or "", version=str(version or ""))
        return _json(self._call("ModelStatistics", request))

    def _call(self, method: str, request: Any, deadline: float | None = None) -> Any:
        if request is None:
            request = self._requests[method]()
        started = time.monotonic()
        for attempt in range(1, self.retry.attempts + 1):
            left = None if deadline is None else deadline - (time.monotonic() - started)
            if left is not None and left <= 0:
                raise Unavailable(f"{method}: its deadline passed")
            try:
                return self._methods[method](
                    request,
                    timeout=self.timeout if left is None else left,
                    metadata=self._metadata,
                )
            except grpc.RpcError as error:
                code = error.code()
                message = error.details() or str(code)
                wait = self.retry.wait(attempt)
                out_of_time = left is not None and wait >= left
                if code not in _RETRIED or attempt == self.retry.attempts or out_of_time:
                    tries = f" after {attempt} tries" if attempt > 1 else ""
                    kind = _ERRORS.get(code, HeadwayError)
                    raise error_for_reason(
                        _reason(error), f"{method}{tries}: {message}", kind
                    ) from None
                self.on_retry(f"{code.name} {message}; retrying in {wait:g} s")
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _reason(error: grpc.RpcError) -> str | None:
    """The reason a failed call's trailing metadata names (`headway-reason`), if any."""
    if isinstance(error, grpc.Call):  # as a call's errors are
        for key, value in error.trailing_metadata() or ():
            if key == REASON_KEY:
                return str(value)
    return None


def _json(message: Any) -> Any:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)
