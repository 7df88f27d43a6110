"""A bidirectional-streaming gRPC call (Triton's decoupled `ModelStreamInfer`) as the HTTP/2
path hands it over: request messages as they arrive, response messages as they are sent.

The connection (`api.grpc.unary.UnaryCalls`) splits the stream's DATA into messages, each
checked against the message limit and handed to the call's `Session` in the loop turn that
read it; the session answers through its `StreamCall`: response messages (HEADERS before the
first), then one status. What a streaming call can make this side hold is bounded as a unary
call's is: a request still arriving counts against the request buffers, answers waiting for the
client's window against the answer buffer, and every request in flight takes one of the
connection's `max_streams` slots (`take`), so a connection never runs more work at once over
one stream than over a hundred unary calls. A client that resets the stream, or whose
connection is lost, cancels it (`Session.cancelled`): its requests are withdrawn at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from headway.api.grpc.frames import first_value

if TYPE_CHECKING:
    from headway.api.grpc.frames import Headers


class Session(Protocol):
    """What reads a streaming call's requests (the handler's, `Handler.open`)."""

    def message(self, data: bytes) -> None:
        """One whole request message (decompressed)."""

    def half_closed(self) -> None:
        """The client sent its last request: end the call once its answers are sent."""

    def cancelled(self) -> None:
        """The call is gone (reset, timed out, or its connection lost): nothing more is sent;
        withdraw what is in flight."""


class CallStream(Protocol):
    """What a streaming call reads of its HTTP/2 stream (`api.grpc.calls.Stream`)."""

    path: str
    headers: Headers
    timeout: float | None
    opened: float
    answered: bool


class StreamAnswers(Protocol):
    """What a streaming call needs of its connection's streams (`UnaryCalls`)."""

    def send(self, stream: Any, message: bytes) -> None: ...

    def finish(self, stream: Any, code: int, message: str) -> None: ...

    def take(self) -> bool: ...

    def release(self) -> None: ...


class StreamCall:
    """One streaming call, as its session sees it: its metadata, and a way to answer."""

    __slots__ = ("_calls", "_stream", "headers", "path", "received", "timeout")

    def __init__(self, calls: StreamAnswers, stream: CallStream) -> None:
        self._calls = calls
        self._stream = stream
        self.path = stream.path
        self.headers: Headers = stream.headers
        self.timeout = stream.timeout  # seconds for the whole call, from `grpc-timeout`
        self.received = stream.opened

    def metadata(self, key: bytes) -> bytes | None:
        """The first value of header `key` (lower-case), or None."""
        return first_value(self.headers, key)

    @property
    def open(self) -> bool:
        """Whether responses may still be sent."""
        return not self._stream.answered

    def send(self, message: bytes) -> None:
        """One response message (ignored once the call has ended)."""
        self._calls.send(self._stream, message)

    def finish(self, code: int = 0, message: str = "") -> None:
        """End the call with its status, after the responses already sent."""
        self._calls.finish(self._stream, code, message)

    def take(self) -> bool:
        """Take a slot of the connection for one request in flight; False when none is left
        (`Limits.max_streams`): refuse that request."""
        return self._calls.take()

    def release(self) -> None:
        """A request in flight has ended: its slot is free."""
        self._calls.release()
