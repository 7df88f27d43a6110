"""`ModelStreamInfer`, Triton's decoupled mode: inference requests in on one stream, zero or
more responses to each, the last of each carrying `triton_final_response: true`.

Each request message is decoded and admitted in the loop turn that read it, as a unary
`ModelInfer` is, and answered by its receiver (`StreamReply`): a model's parts as they come
(`triton_final_response: false`), and the end flagged final: a model that answers at once
sends its answer so, and after the parts of a streaming model an empty response carries the
flag when the request asked for one (`triton_enable_empty_final_response`, tritonclient's
`enable_empty_final_response=True`), as Triton sends it. A request that fails (unparsable, invalid, refused, or
failing in the model) gets one response with `error_message` naming the cause, as Triton sends
it, and the stream goes on: tritonclient's stream callback receives it as an
`InferenceServerException`. The call itself ends with a status: OK once the client has sent its
last request and every request is answered, or an error for the whole stream (no token, the
server starting, its deadline or its idle time passed). A client that resets the stream or
goes away has its requests withdrawn (`Controller.withdraw`): a generative model frees their
sequences at its next step.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from headway.api.errors import INTERNAL_REASON
from headway.api.grpc import messages
from headway.api.grpc.calls import UNAVAILABLE
from headway.api.grpc.codec import encode_infer
from headway.api.grpc.context import CallContext
from headway.errors import HeadwayError

if TYPE_CHECKING:
    from headway.api.app import HeadwayApp
    from headway.api.grpc.bidi import StreamCall
    from headway.api.grpc.service import InferenceService
    from headway.api.oip import InferRequest
    from headway.control.request import Prediction, Tensors, Ticket

log = logging.getLogger("headway.grpc")

_UNAUTHENTICATED = 16
#: The response parameter that tells a decoupled client a request's responses are over.
FINAL = "triton_final_response"
#: The request parameter that asks for an empty final response after a stream's parts.
EMPTY_FINAL = "triton_enable_empty_final_response"
#: The parameter of an error response that names the error's reason (`headway.errors`).
REASON = "reason"


class InferStream:
    """One `ModelStreamInfer` call's requests and their replies (an `api.grpc.bidi.Session`)."""

    __slots__ = ("_closing", "app", "call", "context", "flights", "limit", "service")

    def __init__(self, app: HeadwayApp, service: InferenceService, call: StreamCall) -> None:
        self.app = app
        self.service = service
        self.call = call
        self.limit = app.max_answer_bytes
        self.context = CallContext(call)
        #: Requests in flight, each holding a slot of the connection (`StreamCall.take`).
        self.flights: set[StreamReply] = set()
        self._closing = False  # the client has sent its last request
        token = app.inference_token
        if token is not None:
            sent = call.metadata(b"authorization")
            if not token.allows(sent):
                call.finish(_UNAUTHENTICATED, token.message(sent))
                return
        if not app.started:
            call.finish(UNAVAILABLE, "the server is starting: models are loading; retry shortly")

    def message(self, data: bytes) -> None:
        try:
            request = messages.ModelInferRequest.FromString(data)
        except DecodeError as exc:
            self.error("", f"cannot parse the ModelStreamInfer request message: {exc}")
            return
        if not self.call.take():
            self.error(request.id, "too many requests in flight on this connection: at most "
                       "100 calls and stream requests at once; wait for responses")  # fmt: skip
            return
        reply = StreamReply(self, request)
        self.flights.add(reply)
        try:
            _, reply.ticket = self.service.submit_infer(
                request, self.context, reply.bind, stream=True
            )
        except HeadwayError as exc:
            reply.fail(exc)
        except Exception as exc:  # never crash on one request
            log.error("internal error in ModelStreamInfer", exc_info=exc)
            reply.fail(exc)

    def error(self, request_id: str, message: str, reason: str | None = None) -> None:
        """A response that reports a request's error, with its reason where it has one (the
        `reason` parameter: tritonclient reads only `error_message`); the stream goes on."""
        response = messages.ModelStreamInferResponse(error_message=message)
        answer = response.infer_response
        answer.id = request_id
        answer.parameters[FINAL].bool_param = True
        if reason:
            answer.parameters[REASON].string_param = reason
        self.call.send(response.SerializeToString())

    def ended(self, reply: StreamReply) -> None:
        """A request's last response was sent: its slot is free."""
        if reply in self.flights:
            self.flights.discard(reply)
            self.call.release()
            if self._closing and not self.flights:
                self.call.finish()

    def half_closed(self) -> None:
        self._closing = True
        if not self.flights:
            self.call.finish()

    def cancelled(self) -> None:
        flights, self.flights = self.flights, set()
        controller = self.app.controller
        for reply in flights:
            reply.gone = True
            if reply.ticket is not None:
                controller.withdraw(reply.ticket)
            self.call.release()


class StreamReply:
    """The receiver of one request on a stream: each part a response, the last flagged final,
    an error a response with `error_message`."""

    __slots__ = ("decoded", "gone", "request", "stream", "ticket", "version")

    def __init__(self, stream: InferStream, request: Any) -> None:
        self.stream = stream
        self.request = request
        self.decoded: InferRequest | None = None
        self.ticket: Ticket | None = None
        self.gone = False  # withdrawn: what comes later is dropped
        self.version = 0  # the version that answers (its parts carry no version)

    def bind(self, decoded: InferRequest) -> StreamReply:
        """The request as decoded (`InferenceService.submit_infer`'s receiver factory)."""
        self.decoded = decoded
        request = self.request
        model = self.stream.app.controller.model(request.model_name, request.model_version or None)
        self.version = model.config.version
        return self

    def part(self, outputs: Tensors) -> None:
        if not self.gone:
            self._send(outputs, final=False)

    def done(self, prediction: Prediction) -> None:
        if self.gone:
            return
        self.gone = True
        # the last part, flagged final; after parts, an empty final response only where the
        # request asked for one (`triton_enable_empty_final_response`), as Triton does
        if prediction.outputs or self._empty_final():
            self._send(prediction.outputs, final=True, version=prediction.version)
        self.stream.ended(self)

    def _empty_final(self) -> bool:
        asked = self.request.parameters.get(EMPTY_FINAL)
        return asked is not None and asked.bool_param

    def fail(self, error: Exception) -> None:
        if self.gone:
            return
        self.gone = True
        if isinstance(error, HeadwayError):
            message, reason = error.message, error.reason
        else:
            message = f"internal error: {type(error).__name__}: {error}"
            reason = INTERNAL_REASON
        self.stream.error(self.request.id, message, reason)
        self.stream.ended(self)

    def _send(self, outputs: Tensors, *, final: bool, version: int | None = None) -> None:
        request, decoded = self.request, self.decoded
        assert decoded is not None
        version = self.version if version is None else version
        try:
            if outputs:
                answer = encode_infer(
                    request.model_name, version, outputs, decoded, self.stream.limit
                )
            else:  # an empty final response
                answer = messages.ModelInferResponse(
                    model_name=request.model_name, model_version=str(version), id=request.id
                )
        except HeadwayError as exc:
            self.stream.error(request.id, exc.message, exc.reason)
            if not final:  # the request cannot be answered: withdraw it
                self._give_up()
            return
        answer.parameters[FINAL].bool_param = final
        response = messages.ModelStreamInferResponse(infer_response=answer)
        self.stream.call.send(response.SerializeToString())

    def _give_up(self) -> None:
        self.gone = True
        if self.ticket is not None:
            self.stream.app.controller.withdraw(self.ticket)
        self.stream.ended(self)
