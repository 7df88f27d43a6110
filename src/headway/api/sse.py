"""Server-sent events: an answer whose body is sent in parts as a model makes them.

A route that streams replies at once with a `Response` whose body is an `EventStream` (the
status and headers are sent before the first part), then sends each event as its part is
made and ends the stream with a final event. The server that carries it (`api.connection`,
`api.asgi`) attaches itself (`attach`): events sent before then wait in the stream.
`EventStream` is an empty `bytes`, so a stream travels as any answer's body through the code
that passes answers on (CORS headers, tracing) without it knowing; only the servers look for it
(and, being empty, it is false: test it with `is None`, never for truth).

What a stream may make the server hold is bounded (`api.connection`, docs/security.md): the
bytes a client leaves unread, the time it takes none of them, and the time a stream sends
nothing. A client that goes away or is cut off cancels the stream (`cancel`): the route's
`on_cancel` withdraws its request, so a generative model frees the sequence at its next step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from headway.api.errors import Headers

#: The headers of every event stream: no cache may keep or merge it, and a proxy (nginx's
#: `X-Accel-Buffering`) should pass each event on as it comes rather than buffer the answer.
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def event(data: bytes, name: bytes | None = None) -> bytes:
    """One event: `data` (one line: JSON never holds a raw newline) and its `name`, if any."""
    if name is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


class Sink(Protocol):
    """Where a stream's events go once attached (the connection that carries it)."""

    def send(self, data: bytes) -> None: ...

    def end(self) -> None: ...


class EventStream(bytes):
    """The body of a streamed answer (see the module docstring).

    `on_cancel` is called once if the client goes away (or is cut off) before the stream
    ends; `error_event(message)` renders the final event that ends a stream in error, in the
    route's API's own shape (`abandon`)."""

    def __new__(cls, *args: object, **kwargs: object) -> EventStream:
        return super().__new__(cls)

    def __init__(
        self,
        on_cancel: Callable[[], None] | None = None,
        error_event: Callable[[str], bytes] | None = None,
    ) -> None:
        self.on_cancel = on_cancel
        self.error_event = error_event
        self.sink: Sink | None = None
        self.waiting: list[bytes] = []  # events sent before a server attached
        self.ended = False  # the route sent its last event (or the stream was cancelled)
        self.cancelled = False

    def attach(self, sink: Sink) -> None:
        """The server that carries the stream: what waited is sent now."""
        self.sink = sink
        waiting, self.waiting = self.waiting, []
        for data in waiting:
            sink.send(data)
        if self.ended and not self.cancelled:
            sink.end()

    def send(self, data: bytes) -> None:
        """One event (or several, joined); dropped once the stream has ended."""
        if self.ended:
            return
        if self.sink is None:
            self.waiting.append(data)
        else:
            self.sink.send(data)

    def end(self, data: bytes = b"") -> None:
        """The last event(s): the stream is over."""
        if self.ended:
            return
        if data:
            self.send(data)
        self.ended = True
        if self.sink is not None:
            self.sink.end()

    def abandon(self, message: str) -> None:
        """End the stream from the server's side, in error (an idle stream, a server
        stopping): a final error event naming `message`, and the request withdrawn."""
        if self.ended:
            return
        if self.error_event is not None:
            self.send(self.error_event(message))
        self.end()
        self._withdraw()

    def cancel(self) -> None:
        """The client went away, or was cut off: nothing more is sent, the request is
        withdrawn."""
        if self.cancelled:
            return
        was_ended = self.ended
        self.cancelled = self.ended = True
        self.waiting = []
        if not was_ended:
            self._withdraw()

    def _withdraw(self) -> None:
        on_cancel, self.on_cancel = self.on_cancel, None
        if on_cancel is not None:
            on_cancel()

    def __repr__(self) -> str:
        return f"EventStream(ended={self.ended}, cancelled={self.cancelled})"
