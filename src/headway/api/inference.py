"""The Open Inference Protocol's infer route: one request's body to the controller, and its
prediction back to the connection.

A request's JSON head is read first (its `parameters`: its deadline), so that one that waited
too long to be read is refused before its tensors are decoded (`Controller.refuse_late`); then
it is decoded and submitted with a `then` that encodes the answer and replies the moment the
prediction is known: no task, no callback queue between the worker's answer and the write.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from headway.api import oip
from headway.api.errors import JSON, Reply, Response, failure, http_status, problem
from headway.api.parameters import NO_POLICY, schedule_policy
from headway.api.tracing import Trace, Tracing
from headway.control.controller import Controller
from headway.control.overload import NOTICEABLE_WAIT_S
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
        #: A request read sooner than this is not asked `Controller.refuse_late`: only a
        #: deadline shorter than one row's run plus its wait could be late, and admission
        #: refuses any such (the connection's quick refusal skips it alike). A policy that
        #: does not reject early asks it of every request.
        early = controller.scheduler.policy.early_reject
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
        routing it, as `oip.infer_head` would have: the route uses it, not a second parse."""
        self._parsed = body, None, head

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
            then=partial(_reply_encoded, reply, request, name, self.max_answer),
            trace=trace,
        )

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


def _reply_encoded(
    reply: Reply,
    request: oip.InferRequest,
    name: str,
    limit: int,
    prediction: asyncio.Future[Any],
) -> None:
    """The prediction (or its error) is known: encode it (within `limit` bytes) and reply."""
    try:
        result = prediction.result()
        payload, header_length = oip.encode_infer(
            result.model, result.version, result.outputs, request, limit
        )
    except asyncio.CancelledError:
        reply(problem(503, "the server is stopping"))
        return
    except Exception as exc:
        reply(failure(exc, "POST", f"/v2/models/{name}/infer"))
        return
    if header_length is None:
        reply((200, payload, JSON))
        return
    binary = [
        (b"content-type", b"application/octet-stream"),
        (b"inference-header-content-length", str(header_length).encode()),
    ]
    reply((200, payload, binary))
