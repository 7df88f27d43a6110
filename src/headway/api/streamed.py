"""The receiver of a request answered as server-sent events, whatever the API's shape.

Each streaming route (the OIP infer route with `Accept: text/event-stream`, Triton's
`generate_stream`, OpenAI's `stream: true`) submits its request with `stream=True` and this
receiver: the answer's head is sent with the first part (or the whole answer of a model that
answers at once), so an error before it, a refusal or a request dropped before its first part
could arrive in time, is still a plain error answer with its status, in the API's own shape.
After the head, parts are events, and an error ends the stream with an error event naming the
cause. A client that goes away withdraws the request (`Controller.withdraw`).

The route's `Events` renders its API's shapes; this module knows none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from headway.api.errors import INTERNAL_REASON, JSON, Reply, Response
from headway.api.sse import SSE_HEADERS, EventStream
from headway.errors import HeadwayError

if TYPE_CHECKING:
    from headway.control.request import Prediction, Tensors, Ticket


class Events(Protocol):
    """One API's shapes of a streamed answer."""

    def part(self, outputs: Tensors) -> bytes:
        """The event(s) of one part."""

    def end(self, outputs: Tensors) -> bytes:
        """The last event(s): `outputs` is the whole answer of a model that answered at once
        (sent as one more part), or empty after the parts."""

    def error(self, message: str, reason: str) -> bytes:
        """The event that ends a stream in error."""

    def refusal(self, error: Exception) -> Response:
        """The answer to a request that failed before its stream began."""


class Gathering(Protocol):
    """One API's shape of an answer to a streaming model asked for whole."""

    def gather(self, outputs: Tensors) -> None:
        """Keep one part (or a model's whole answer) for the answer."""

    def whole(self) -> bytes:
        """The answer: every part gathered, as one JSON document."""

    def refusal(self, error: Exception) -> Response:
        """The answer to a request that failed."""


class Withdraw(Protocol):
    def withdraw(self, ticket: Ticket) -> bool: ...


class StreamedReply:
    """A `Receiver` that answers with an event stream (see the module docstring)."""

    __slots__ = ("_gone", "controller", "events", "reply", "stream", "ticket")

    def __init__(self, controller: Withdraw, reply: Reply, events: Events) -> None:
        self.controller = controller
        self.reply = reply
        self.events = events
        self.stream: EventStream | None = None
        self.ticket: Ticket | None = None
        self._gone = False  # the client went away before the ticket was known

    def submitted(self, ticket: Ticket) -> None:
        """The request's ticket, once `Controller.submit` returned it."""
        self.ticket = ticket
        if self._gone:
            self.controller.withdraw(ticket)

    def part(self, outputs: Tensors) -> None:
        stream = self.stream  # (an EventStream is an empty bytes: never tested for truth)
        if stream is None:
            stream = self._begin()
        stream.send(self.events.part(outputs))

    def done(self, prediction: Prediction) -> None:
        stream = self.stream
        if stream is None:
            stream = self._begin()
        stream.end(self.events.end(prediction.outputs))

    def fail(self, error: Exception) -> None:
        stream = self.stream
        if stream is None:
            self.stream = EventStream()  # nothing more is sent
            self.stream.ended = True
            self.reply(self.events.refusal(error))
            return
        if isinstance(error, HeadwayError):
            stream.end(self.events.error(error.message, error.reason))
        else:
            stream.end(
                self.events.error(f"internal error: {type(error).__name__}", INTERNAL_REASON)
            )

    def _begin(self) -> EventStream:
        self.stream = stream = EventStream(on_cancel=self._withdraw, error_event=self._ended)
        self.reply((200, stream, SSE_HEADERS))
        return stream

    def _ended(self, message: str) -> bytes:
        return self.events.error(message, "stream_idle")

    def _withdraw(self) -> None:
        if self.ticket is None:
            self._gone = True
        else:
            self.controller.withdraw(self.ticket)


class GatheredReply:
    """A `Receiver` for a text route answered whole (`/generate`, a completion without
    `stream`): the parts gathered in the API's shape, answered once at the end."""

    __slots__ = ("events", "reply")

    def __init__(self, reply: Reply, events: Gathering) -> None:
        self.reply = reply
        self.events = events

    def part(self, outputs: Tensors) -> None:
        self.events.gather(outputs)

    def done(self, prediction: Prediction) -> None:
        if prediction.outputs:
            self.events.gather(prediction.outputs)
        self.reply((200, self.events.whole(), JSON))

    def fail(self, error: Exception) -> None:
        self.reply(self.events.refusal(error))
