"""The Open Inference Protocol's infer route: one request's body to the controller, and its
prediction back to the connection.

A request's JSON head is read first (its `parameters`: its deadline), so that one that waited
too long to be read is refused before its tensors are decoded (`Controller.screen`, unless the
HTTP server screened it on its way in); then it is decoded and submitted with a receiver that
encodes the answer and replies the moment the prediction is known: no task, no callback queue
between the worker's answer and the write.

With `Accept: text/event-stream` the answer is server-sent events (`api.streamed`): each part
of a model that answers in parts is one `data:` event holding the protocol's JSON answer with
that part's outputs, and an error after the first part a last event
`data: {"error": ..., "reason": ...}` (`api.errors.error_json`).
"""

from __future__ import annotations

from typing import Any

from headway.api import oip
from headway.api.errors import JSON, Reply, Response, error_json, failure, http_status
from headway.api.parameters import NO_POLICY, schedule_policy, streamed_request
from headway.api.sse import event
from headway.api.streamed import StreamedReply
from headway.api.tracing import Trace, Tracing
from headway.control.admission.overload import NOTICEABLE_WAIT_S
from headway.control.controller import Controller
from headway.control.request import InferenceRequest, Prediction, Tensors
from headway.errors import HeadwayError, InvalidInput


class InferRoute:
    """`POST /v2/models/{name}[/versions/{version}]/infer` over a `Controller`."""

    def __init__(self, controller: Controller, max_answer: int = oip.NO_LIMIT) -> None:
        self.controller = controller
        #: The largest answer, in bytes (`--max-answer-mb`): larger is 400.
        self.max_answer = max_answer
        #: OpenTelemetry traces of inferences (`api.tracing`); None: off.
        self.tracing: Tracing | None = None
        #: The last infer body whose JSON head was parsed, its header length and the head.
        self._parsed: tuple[bytes, int | None, dict[str, Any]] | None = None
        #: The last infer body the HTTP server screened on its way in (`parsed`): not again.
        self._screened: bytes | None = None
        #: A request read sooner than this is not screened here: only a deadline shorter than
        #: one row's run plus its wait could be late, and admission refuses any such (the
        #: connection's quick refusal skips it alike). A policy that does not reject early
        #: asks it of every request.
        early = controller.policy.early_reject
        self._late_after = NOTICEABLE_WAIT_S if early else 0.0

    def head(self, body: bytes, length: int | None) -> dict[str, Any]:
        """`oip.infer_head` of an infer body, parsed once per body (see `parsed`)."""
        parsed = self._parsed
        if parsed is not None and parsed[0] is body and parsed[1] == length:
            return parsed[2]
        head = oip.infer_head(body, length)
        self._parsed = body, length, head
        return head

    def parsed(self, body: bytes, head: dict[str, Any]) -> None:
        """The transport's quick refusal (`api.refusals`) read this JSON body's `head` before
        routing it, as `oip.infer_head` would have, and screened it: the route uses the head,
        not a second parse, and does not screen it again."""
        self._parsed = body, None, head
        self._screened = body

    def infer(
        self,
        name: str,
        version: str | None,
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None,
        reply: Reply,
        trace: Trace | None = None,
    ) -> None:
        """Admit the request or raise a HeadwayError; `reply` is called once with its answer.
        `received`: when its first bytes were read (the controller's clock), None: now."""
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
        head = None if length == 0 else self.head(body, length)
        parameters = head.get("parameters") if head else None
        timeout, priority = schedule_policy(parameters) if parameters else NO_POLICY
        # its own wait since its bytes were read (not the loop's worst lag, which refused
        # everyone after one stall)
        if received is not None and body is not self._screened:
            now = controller.clock.now()
            waited = now - received
            if waited >= self._late_after and waited > 0.0:
                refusal = controller.screen(
                    InferenceRequest(
                        name, version=version, timeout=timeout, priority=priority, arrival=received
                    )
                )
                if refusal is not None:
                    raise refusal.refuse(name, waited)
        self._screened = None
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
        accept = headers.get(b"accept")
        if accept is not None and b"text/event-stream" in accept:
            self._stream(name, version, timeout, priority, received, request, reply)
            return
        controller.submit(
            InferenceRequest(
                name,
                version=version,
                timeout=timeout,
                priority=priority,
                arrival=received,
                inputs=request.inputs,
                outputs=request.outputs,
                trace=trace,
            ),
            EncodedReply(reply, request, name, self.max_answer),
        )

    def _stream(
        self,
        name: str,
        version: str | None,
        timeout: float | None,
        priority: int | None,
        received: float | None,
        request: oip.InferRequest,
        reply: Reply,
    ) -> None:
        """Admit a request whose answer streams (`Accept: text/event-stream`)."""
        if request.all_binary or request.binary_outputs:
            raise InvalidInput("an event stream carries JSON outputs: ask for binary outputs "
                               "without 'Accept: text/event-stream'")  # fmt: skip
        admitted = streamed_request(
            name, version, request.parameters or {},
            timeout=timeout, priority=priority, arrival=received,
            inputs=request.inputs, outputs=request.outputs,
        )  # fmt: skip
        controller = self.controller
        events = InferEvents(name, request, self.max_answer)
        events.version = controller.model(name, version).config.version
        receiver = StreamedReply(controller, reply, events)
        ticket = controller.submit(admitted, receiver)
        receiver.submitted(ticket)

    def traced(
        self,
        name: str,
        version: str | None,
        headers: dict[bytes, bytes],
        body: bytes,
        received: float | None,
        reply: Reply,
    ) -> None:
        """`infer` inside a trace (`api.tracing`): its spans end when its answer leaves."""
        assert self.tracing is not None
        clock = self.controller.clock
        trace = self.tracing.start(
            name, headers.get(b"traceparent"), clock.now() if received is None else received
        )

        def answered(response: Response) -> None:
            trace.finish(clock.now(), response[0])
            reply(response)

        try:
            self.infer(name, version, headers, body, received, answered, trace)
        except HeadwayError as exc:
            trace.finish(clock.now(), http_status(exc))
            raise


class EncodedReply:
    """The receiver of one infer request: its prediction (or its error) encoded and replied."""

    __slots__ = ("decoded", "limit", "name", "reply")

    def __init__(self, reply: Reply, decoded: oip.InferRequest, name: str, limit: int) -> None:
        self.reply = reply
        self.decoded = decoded
        self.name = name
        #: The largest answer, in bytes (`--max-answer-mb`): larger is 400.
        self.limit = limit

    def part(self, outputs: Tensors) -> None:
        raise NotImplementedError("the infer route answers whole: nothing streams to it")

    def done(self, prediction: Prediction) -> None:
        try:
            payload, header_length = oip.encode_infer(
                prediction.model, prediction.version, prediction.outputs, self.decoded, self.limit
            )
        except Exception as exc:
            self.fail(exc)
            return
        if header_length is None:
            self.reply((200, payload, JSON))
            return
        binary = [
            (b"content-type", b"application/octet-stream"),
            (b"inference-header-content-length", str(header_length).encode()),
        ]
        self.reply((200, payload, binary))

    def fail(self, error: Exception) -> None:
        self.reply(failure(error, "POST", f"/v2/models/{self.name}/infer"))


class InferEvents:
    """The infer route's events (`api.streamed.Events`): each part the protocol's JSON answer."""

    __slots__ = ("decoded", "limit", "name", "version")

    def __init__(self, name: str, decoded: oip.InferRequest, limit: int) -> None:
        self.name = name
        self.decoded = decoded
        self.limit = limit
        self.version = 0

    def part(self, outputs: Tensors) -> bytes:
        payload, _ = oip.encode_infer(self.name, self.version, outputs, self.decoded, self.limit)
        return event(payload)

    def end(self, outputs: Tensors) -> bytes:
        return self.part(outputs) if outputs else b""

    def error(self, message: str, reason: str) -> bytes:
        return event(error_json(message, reason))

    def refusal(self, error: Exception) -> Response:
        return failure(error, "POST", f"/v2/models/{self.name}/infer")
