"""OpenTelemetry traces of inferences: optional (`pip install 'headway[tracing]'`), off unless
`OTEL_TRACES_EXPORTER` names an exporter (docs/opentelemetry.md). When off, the transport
checks one attribute per request and nothing else runs.
"""

from __future__ import annotations

import os
import time
from typing import Any

from headway.errors import ConfigError


class Tracing:
    """The tracer of one server, and how its clock's seconds become OpenTelemetry's times."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.tracer = provider.get_tracer("headway")
        self.propagator = TraceContextTextMapPropagator()
        # controller clock (monotonic seconds) -> nanoseconds since the epoch
        self.offset_ns = time.time_ns() - time.monotonic_ns()

    def ns(self, seconds: float) -> int:
        return int(seconds * 1e9) + self.offset_ns

    def start(self, model: str, traceparent: bytes | str | None, received: float) -> Trace:
        """An inference's trace."""
        return self.server_span(f"infer {model}", traceparent, received, {"headway.model": model})

    def server_span(
        self,
        name: str,
        traceparent: bytes | str | None,
        received: float,
        attributes: dict[str, Any],
    ) -> Trace:
        """A request's root span, in the caller's trace when `traceparent` names one."""
        from opentelemetry.trace import SpanKind

        if isinstance(traceparent, bytes):
            traceparent = traceparent.decode("latin-1")
        parent = self.propagator.extract({"traceparent": traceparent} if traceparent else {})
        span = self.tracer.start_span(
            name,
            context=parent,
            kind=SpanKind.SERVER,
            start_time=self.ns(received),
            attributes=attributes,
        )
        return Trace(self, span, received)

    def shutdown(self) -> None:
        self.provider.shutdown()


class Trace:
    """One request's spans: the root, and its children as their times become known.

    The root is a server span, `infer <model>`, a child of the caller's W3C `traceparent` when it
    sends one; its children are `decode`, `queue` (arrival until the batch left for a worker),
    `worker action` (the batch's round trip: `batch.rows`, `worker.id`, `worker.run_s`) and
    `encode`. The queue and worker spans are written when the batch's answer arrives, with the
    times the controller measured."""

    __slots__ = ("answered", "decoded", "received", "root", "tracing")

    def __init__(self, tracing: Tracing, root: Any, received: float) -> None:
        self.tracing = tracing
        self.root = root
        self.received = received
        self.decoded = received
        self.answered: float | None = None

    def span(self, name: str, start: float, end: float, **attributes: Any) -> None:
        """A finished child span, from the controller clock's `start` to `end`."""
        from opentelemetry import trace

        span = self.tracing.tracer.start_span(
            name,
            context=trace.set_span_in_context(self.root),
            start_time=self.tracing.ns(start),
            attributes=attributes or None,
        )
        span.end(end_time=self.tracing.ns(end))

    def mark_decoded(self, now: float) -> None:
        self.decoded = now
        self.span("decode", self.received, now)

    def executed(
        self, arrival: float, sent: float, received: float, ran: float, rows: int, worker: int
    ) -> None:
        """Its batch came back (the controller's times): the queue and worker spans."""
        self.span("queue", max(arrival, self.decoded), sent)
        self.span(
            "worker action", sent, received, **{"batch.rows": rows, "worker.id": worker,
                                                "worker.run_s": ran}
        )  # fmt: skip
        self.answered = received

    def finish(self, now: float, status: int) -> None:
        """The answer is encoded and leaves: the encode span, then the root ends."""
        self.span("encode", self.answered or self.decoded, now)
        self.root.set_attribute("http.response.status_code", status)
        self.end(now, f"HTTP {status}" if status >= 400 else None)

    def finish_rpc(self, now: float, code: int, name: str) -> None:
        """A gRPC answer leaves with status `code` (`name`, e.g. "OK")."""
        self.span("encode", self.answered or self.decoded, now)
        self.root.set_attributes({"rpc.system": "grpc", "rpc.grpc.status_code": code})
        self.end(now, None if code == 0 else name)

    def end(self, now: float, error: str | None = None) -> None:
        """The root ends (with `error` as its status description when the request failed)."""
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self.root.set_status(Status(StatusCode.ERROR, error))
        self.root.end(end_time=self.tracing.ns(now))


def from_environment(exporter: Any = None) -> Tracing | None:
    """Tracing as `OTEL_TRACES_EXPORTER` asks (None: off); `exporter` replaces it (tests)."""
    name = os.environ.get("OTEL_TRACES_EXPORTER", "none").strip().lower()
    if exporter is None and name in ("", "none"):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={name} needs OpenTelemetry: pip install 'headway[tracing]'"
        ) from None
    service = os.environ.get("OTEL_SERVICE_NAME", "headway")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    return Tracing(provider)


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "OTEL_TRACES_EXPORTER=otlp needs pip install opentelemetry-exporter-otlp"
            ) from None
        return OTLPSpanExporter()
    raise ConfigError(f"OTEL_TRACES_EXPORTER={name!r}: Headway knows console, otlp and none")
