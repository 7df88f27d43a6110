"""A unary gRPC call as the HTTP/2 path (`api.grpc.http2`) hands it over: its stream's state,
the call's view of it, what a connection accepts, and whom it tells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from headway.api.grpc.frames import Headers, first_value
from headway.api.limits import STREAM_IDLE_TIMEOUT_S, WRITE_TIMEOUT_S

if TYPE_CHECKING:
    from headway.api.grpc.bidi import Session, StreamCall

# gRPC status codes (the numbers of grpc.StatusCode) this module answers itself.
INVALID_ARGUMENT, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED = 3, 4, 8
UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 12, 13, 14
#: The trailing metadata that names a failed call's reason beside its status (REST's `reason`,
#: `headway.errors`), so a program tells refusals apart without reading `grpc-message`.
REASON_KEY = "headway-reason"

_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}


#: What a request chunk held in memory costs beyond its bytes (the object, its list slot), so
#: that a request sent in 1-byte DATA frames counts as what it holds.
CHUNK_COST = 64


@dataclass(frozen=True)
class Limits:
    """What one connection accepts; the defaults follow grpc-core's, nginx's, nghttp2's."""

    max_message: int = 64 * 2**20
    #: Calls open at once; a call the client reset counts until its work ends (Go's fix for
    #: CVE-2023-44487), so resets cannot run more work than this at once.
    max_streams: int = 100
    #: Connections served at once: one more first closes the connection idle longest, or is
    #: answered GOAWAY and closed if none is idle.
    max_connections: int = 4096
    max_header_list: int = 16 * 1024
    #: Seconds for a new connection's preface, and a header block; and for a stream's request
    #: once opened.
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    #: Seconds a client may leave answers unread: its socket not taking bytes, or an answer
    #: waiting for its flow-control window without progress (nginx's send_timeout).
    write_timeout: float = WRITE_TIMEOUT_S
    #: Seconds a connection with no call open is kept (nginx's http2_idle_timeout); PINGs do
    #: not keep it (as Go's IdleTimeout).
    idle_timeout: float = 180.0
    #: Seconds a streaming call may pass with no request in flight and none arriving, and
    #: with nothing sent (Envoy's stream_idle_timeout): then it ends DEADLINE_EXCEEDED.
    stream_idle_timeout: float = STREAM_IDLE_TIMEOUT_S
    #: Receive windows this side grants (streams, and the connection as a whole).
    stream_window: int = 1 * 2**20
    connection_window: int = 16 * 2**20
    #: Request bytes held for calls still arriving, on one connection and on the server as a
    #: whole; a call whose DATA would pass either ends RESOURCE_EXHAUSTED (the window this
    #: side credits as it reads does not bound them).
    connection_buffer: int = 128 * 2**20
    server_buffer: int = 1024 * 2**20
    #: Answer bytes waiting for the client's flow-control window on one connection; an answer
    #: beyond it ends RESOURCE_EXHAUSTED.
    answer_buffer: int = 256 * 2**20
    #: Per connection within each `floods.WINDOW_S`; past one: GOAWAY ENHANCE_YOUR_CALM.
    #: Resets count once more than half the streams opened in the window are reset (nghttp2
    #: allows a burst of 1000 resets; Envoy closes at half the streams reset early).
    max_resets: int = 1000
    max_pings: int = 1000
    max_settings: int = 100
    #: Frames that carry nothing (Envoy allows one in a row).
    max_empty: int = 100
    #: CONTINUATION frames one header block may take (nghttp2's, since CVE-2024-27316).
    max_continuations: int = 8
    #: Control frames (PING and SETTINGS acks, resets) written while the client does not read
    #: (nghttp2's max_outbound_ack).
    max_queued_control: int = 1000


class Answers(Protocol):
    """Where a call's answer goes (`api.grpc.unary.UnaryCalls`, its connection's streams)."""

    def answer(self, stream: Stream, message: bytes) -> None: ...

    def fail(self, stream: Stream, code: int, message: str, reason: str | None = None) -> None: ...


class Call:
    """One unary call: its method path, metadata, request message and deadline."""

    __slots__ = ("_connection", "_stream", "headers", "message", "path", "received", "timeout")

    def __init__(self, connection: Answers, stream: Stream, message: bytes) -> None:
        self._connection = connection
        self._stream = stream
        self.path = stream.path
        self.headers = stream.headers
        self.message = message
        self.timeout = stream.timeout  # seconds from `received`, from `grpc-timeout`
        self.received = stream.opened

    def metadata(self, key: bytes) -> bytes | None:
        """The first value of header `key` (lower-case), or None."""
        return first_value(self.headers, key)

    def answer(self, message: bytes) -> None:
        """Send the response message with status OK (ignored once the stream is gone)."""
        self._connection.answer(self._stream, message)

    def fail(self, code: int, message: str, reason: str | None = None) -> None:
        """End the call with a non-OK status and its message (trailers only), and the error's
        `reason` where it has one (`status.REASON_KEY`)."""
        self._connection.fail(self._stream, code, message, reason)


class Handler(Protocol):
    def accepts(self, path: str) -> bool:
        """Whether `path` names a method served (asked when a call's headers arrive)."""

    def streams(self, path: str) -> bool:
        """Whether the method `path` names streams both ways (`api.grpc.bidi`)."""

    def call(self, call: Call) -> None:
        """A whole call, to be answered (`Call.answer`, `Call.fail`) now or later."""

    def open(self, call: StreamCall) -> Session:
        """A streaming call whose headers arrived: what reads its request messages."""


class Stream:
    """One stream's state: the request read so far, the answer still to send."""

    __slots__ = (
        "active", "answered", "chunks", "encoding", "ended", "handed", "headers", "held", "id",
        "left", "need", "opened", "orphan", "out", "path", "send_window", "session", "size",
        "stalled", "started", "timeout", "trailers", "unacked",
    )  # fmt: skip

    def __init__(self, stream_id: int, send_window: int, opened: float) -> None:
        self.id = stream_id
        self.headers: Headers = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.unacked = 0  # DATA bytes read and not yet credited back
        self.send_window = send_window
        self.ended = False  # the peer has sent its last frame
        self.handed = False  # its call was handed over (counted in the server's `unanswered`)
        self.answered = False
        self.opened = opened
        self.timeout: float | None = None
        self.path = ""
        self.encoding: bytes | None = None  # grpc-encoding
        self.out: bytes | bytearray | memoryview = b""  # answer DATA waiting for window
        self.trailers = b""
        self.held = 0  # what its chunks count against the request buffers (`CHUNK_COST`)
        self.orphan = False  # reset after it was handed over, its work still running
        #: A streaming call's reader of request messages (`api.grpc.bidi`); None: unary.
        self.session: Session | None = None
        self.need = 0  # a streaming call's next message, prefix included, once its size is known
        self.started = False  # its response headers were sent (a streaming call's)
        self.active = opened  # when it last received or sent a message (a streaming call)
        #: Set once its answer waits for window: len(out) when a sweep last looked, and
        #: since when it was so.
        self.left: int
        self.stalled: float


def parse_timeout(value: bytes) -> float | None:
    """`grpc-timeout` (at most 8 digits and a unit) in seconds; None if malformed."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit
