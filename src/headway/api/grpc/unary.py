"""A connection's HTTP/2 streams as gRPC calls: requests read, calls handed over, answers.

`Http2Connection` (`api.grpc.http2`) reads frames and keeps the connection's own state (the
preface, settings, header blocks, its receive window); each stream's frames come here. A
stream's headers are checked as a gRPC call's, its DATA gathered into the one request message
(within the stream's window), and the whole call handed to the `Handler`. A call answers once:
HEADERS, the response message as DATA within the peer's windows, and trailers (`grpc-status`,
`grpc-message`); answers that wait for window are sent as WINDOW_UPDATEs arrive (`flush`).

What a client can make this side hold is bounded (`Limits`): calls open at once, a call the
client reset counting until its work ends (an orphan); request bytes held for calls still
arriving, per connection and for the server (a chunk that ends its request is handed over at
once, never held: a small call passes while others fill the bound); answer bytes waiting for
the client's window.

A method that streams both ways (`Handler.streams`: `ModelStreamInfer`) is opened as soon as
its headers arrive: its DATA is split into messages, each handed to its session as it
completes, and its answers are response messages then one status (`api.grpc.bidi`).
"""

from __future__ import annotations

import time
from typing import Protocol
from urllib.parse import quote

from headway.api.grpc import frames as f
from headway.api.grpc.bidi import StreamCall
from headway.api.grpc.calls import (
    CHUNK_COST,
    DEADLINE_EXCEEDED,
    INVALID_ARGUMENT,
    REASON_KEY,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    Call,
    Handler,
    Limits,
    Stream,
    parse_timeout,
)
from headway.api.grpc.frames import ConnectionFault, Headers, StreamFault
from headway.api.limits import decode_body
from headway.errors import HeadwayError, PayloadTooLarge

#: Compressed requests are read; answers are not compressed (a server may always answer so).
_ACCEPT = (b"grpc-accept-encoding", b"identity,deflate,gzip")
_OK_HEADERS = f.encode(((b":status", b"200"), (b"content-type", b"application/grpc"), _ACCEPT))
_OK_TRAILERS = f.encode(((b"grpc-status", b"0"),))


class Connection(Protocol):
    """What the calls need of their connection (`Http2Connection`)."""

    #: Closed (or closing): nothing more is written.
    closed: bool

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class ServerCounts(Protocol):
    """What the server counts over its connections."""

    #: Calls handed over and not answered yet (for a graceful stop).
    unanswered: int
    #: Request bytes held for calls still arriving (`Limits.server_buffer`).
    buffered: int


class UnaryCalls:
    """One connection's streams (see the module docstring)."""

    def __init__(
        self,
        connection: Connection,
        handler: Handler,
        limits: Limits,
        server: ServerCounts,
    ) -> None:
        self.connection = connection
        self.handler = handler
        self.limits = limits
        self.server = server
        self.streams: dict[int, Stream] = {}
        self._waiting: dict[int, Stream] = {}  # answers waiting for flow-control window
        #: The highest stream id the client has opened; how many streams it opened.
        self.last_stream = 0
        self.opened = 0
        #: Calls the client reset after they were handed over, whose work has not ended, and
        #: the streams that may be open beside them.
        self.orphans = 0
        self.room = limits.max_streams
        #: Request bytes held for streams still arriving; answer bytes waiting for window.
        self.buffered = 0
        self.unsent = 0
        #: No new stream is taken; the connection closes once the last one is done.
        self.going_away = False
        #: The connection's send window, the window a new stream starts with, the largest frame.
        self.send_window = f.DEFAULT_WINDOW
        self.stream_send_window = f.DEFAULT_WINDOW
        self.max_frame = f.DEFAULT_FRAME_SIZE

    # -- requests ---------------------------------------------------------------------------
    def headers(self, stream_id: int, flags: int, headers: Headers, arrived: float) -> None:
        """A whole header block on `stream_id` (its bytes `arrived` then at the earliest)."""
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client: they end its request
            if stream.ended or not flags & f.END_STREAM:
                raise StreamFault(stream_id, f.PROTOCOL_ERROR, "HEADERS after the request")
            stream.ended = True
            self._complete(stream)
            return
        if stream_id <= self.last_stream:
            if any(name[:1] == b":" for name, _ in headers):  # a request's head
                raise ConnectionFault(f.PROTOCOL_ERROR, f"HEADERS open stream {stream_id}, not "
                                      f"above stream {self.last_stream} (RFC 9113 5.1.1)")  # fmt: skip
            return  # trailers on a stream this side already reset: ignored (RFC 9113 5.1)
        if stream_id % 2 == 0:
            raise ConnectionFault(f.PROTOCOL_ERROR, f"client stream {stream_id} is even")
        self.last_stream = stream_id
        self.opened += 1
        if self.going_away or len(self.streams) >= self.room:
            raise StreamFault(stream_id, f.REFUSED_STREAM, "too many streams")
        stream = self.streams[stream_id] = Stream(stream_id, self.stream_send_window, arrived)
        stream.headers = headers
        stream.ended = bool(flags & f.END_STREAM)
        self._check_head(stream)
        if not stream.answered and self.handler.streams(stream.path):
            self.server.unanswered += 1
            stream.handed = True
            stream.session = self.handler.open(StreamCall(self, stream))
        if stream.ended:
            self._complete(stream)

    def _check_head(self, stream: Stream) -> None:
        size = 0
        method = content_type = None
        for name, value in stream.headers:
            size += len(name) + len(value) + 32
            if name == b":path":
                stream.path = value.decode("latin-1")
            elif name == b":method":
                method = value
            elif name == b"content-type":
                content_type = value
            elif name == b"grpc-encoding":
                stream.encoding = value
            elif name == b"grpc-timeout":
                stream.timeout = parse_timeout(value)
                if stream.timeout is None:
                    self._refuse(stream, INVALID_ARGUMENT, f"bad grpc-timeout {value!r}")
                    return
        if size > self.limits.max_header_list:
            self._refuse(stream, RESOURCE_EXHAUSTED, f"header list of {size} bytes exceeds "
                         f"the limit of {self.limits.max_header_list}")  # fmt: skip
        elif method != b"POST":
            raise StreamFault(stream.id, f.PROTOCOL_ERROR, "gRPC calls are POST")
        elif not stream.path:
            raise StreamFault(stream.id, f.PROTOCOL_ERROR, "no :path")
        elif content_type is None or not content_type.startswith(b"application/grpc"):
            self._refuse(stream, INVALID_ARGUMENT, f"content-type {content_type!r} is not gRPC")
        elif not self.handler.accepts(stream.path):  # at once: a stream may never end
            self._refuse(stream, UNIMPLEMENTED, f"unknown method {stream.path}")

    def _full_message(self) -> str:
        limits = self.limits
        if self.buffered > limits.connection_buffer:
            return (f"this connection holds {self.buffered} bytes of requests still arriving, "
                    f"its limit of {limits.connection_buffer}: send fewer large calls at once")  # fmt: skip
        return (f"the server holds {self.server.buffered} bytes of requests still arriving, "
                f"its limit of {limits.server_buffer} (--grpc-max-buffered-mb); retry shortly")  # fmt: skip

    def data(self, flags: int, stream_id: int, payload: bytes) -> None:
        """A DATA frame on `stream_id` (the connection's window has counted it)."""
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id == 0 or stream_id > self.last_stream:
                raise ConnectionFault(f.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # on a stream this side has finished with: ignored, credited
        if stream.ended:
            raise StreamFault(stream_id, f.STREAM_CLOSED, "DATA after END_STREAM")
        stream.unacked += len(payload)
        if stream.unacked > self.limits.stream_window:
            raise StreamFault(stream_id, f.FLOW_CONTROL_ERROR, "DATA beyond the stream window")
        body = f.unpadded(payload, flags, stream_id)
        end = flags & f.END_STREAM
        if stream.session is not None:
            if not stream.answered and body:
                self._stream_data(stream, body)
        elif not stream.answered:
            size = len(body)
            stream.size += size
            if stream.size > self.limits.max_message + 5:
                self._refuse(stream, RESOURCE_EXHAUSTED, f"request message of {stream.size}+ "
                             f"bytes exceeds the limit of {self.limits.max_message} bytes")  # fmt: skip
                return
            if not end and size:  # held until the request ends
                cost = size + CHUNK_COST
                stream.held += cost
                self.buffered += cost
                self.server.buffered += cost
                if self._over():
                    self._refuse(stream, RESOURCE_EXHAUSTED, self._full_message())
                    return
            stream.chunks.append(body)
        if end:
            stream.ended = True
            self._complete(stream)
        elif stream.unacked >= self.limits.stream_window // 2:
            self.connection.write(f.window_update(stream_id, stream.unacked))
            stream.unacked = 0

    def _stream_data(self, stream: Stream, body: bytes) -> None:
        """DATA of a streaming call: each message it completes to the session, at once; the
        start of one still arriving held (and counted as a unary request's chunks are)."""
        stream.active = time.monotonic()
        chunks = stream.chunks
        chunks.append(body)
        stream.size += len(body)
        if stream.need and stream.size < stream.need:  # a message still arriving
            self._hold(stream)
            return
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        at, end = 0, len(data)
        limit = self.limits.max_message
        session = stream.session
        assert session is not None
        while end - at >= 5:
            length = int.from_bytes(data[at + 1 : at + 5], "big")
            if length > limit:
                self._cancel(stream, RESOURCE_EXHAUSTED, f"request message of {length} bytes "
                             f"exceeds the limit of {limit} bytes")  # fmt: skip
                return
            if end - at - 5 < length:
                break
            message = data[at + 5 : at + 5 + length]
            if data[at]:
                decoded = self._decompress(stream, message)
                if decoded is None:
                    return
                message = decoded
            at += 5 + length
            session.message(message)
            if stream.answered:  # the session ended the call
                return
        rest = data[at:] if at else data
        stream.chunks = [rest] if rest else []
        stream.size = len(rest)
        stream.need = 5 + int.from_bytes(rest[1:5], "big") if len(rest) >= 5 else 0
        self._hold(stream)

    def _hold(self, stream: Stream) -> None:
        """Count what a streaming call holds of a message still arriving."""
        cost = stream.size + CHUNK_COST * len(stream.chunks) if stream.chunks else 0
        grown = cost - stream.held
        stream.held = cost
        self.buffered += grown
        self.server.buffered += grown
        if grown > 0 and self._over():
            self._cancel(stream, RESOURCE_EXHAUSTED, self._full_message())

    def _decompress(self, stream: Stream, message: bytes) -> bytes | None:
        """A compressed message as its grpc-encoding says; None once the call has failed."""
        encoding = stream.encoding
        if encoding not in (b"gzip", b"deflate"):
            unknown = encoding not in (None, b"identity")
            self._fail_any(stream, UNIMPLEMENTED if unknown else INVALID_ARGUMENT,
                           f"compressed messages are read as gzip or deflate, not {encoding!r}")  # fmt: skip
            return None
        try:
            return decode_body(encoding, message, self.limits.max_message)
        except HeadwayError as exc:
            code = RESOURCE_EXHAUSTED if isinstance(exc, PayloadTooLarge) else INVALID_ARGUMENT
            self._fail_any(stream, code, exc.message)
            return None

    def _fail_any(self, stream: Stream, code: int, message: str) -> None:
        if stream.session is not None:
            self._cancel(stream, code, message)
        else:
            self.fail(stream, code, message)

    def _over(self) -> bool:
        limits = self.limits
        return (
            self.buffered > limits.connection_buffer or self.server.buffered > limits.server_buffer
        )

    def _release(self, stream: Stream) -> None:
        """The stream's chunks are no longer held (handed over as one message, or dropped)."""
        held = stream.held
        if held:
            stream.held = 0
            self.buffered -= held
            self.server.buffered -= held
        stream.chunks = []

    def _complete(self, stream: Stream) -> None:
        """The request is whole: check its one message and hand the call over (a streaming
        call's last request has come: its session is told)."""
        if stream.answered:
            self.forget(stream.id)
            return
        if stream.session is not None:
            if stream.chunks:
                self._cancel(stream, INVALID_ARGUMENT, "the stream ended inside a message")
            else:
                stream.session.half_closed()
            return
        self.server.unanswered += 1
        stream.handed = True
        chunks = stream.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        stream.chunks = []
        if stream.held:
            self._release(stream)
        if len(data) < 5 or int.from_bytes(data[1:5], "big") != len(data) - 5:
            self.fail(stream, INVALID_ARGUMENT, "a unary call carries exactly one message")
            return
        message = data[5:]
        if data[0]:  # compressed, as its grpc-encoding says
            decoded = self._decompress(stream, message)
            if decoded is None:
                return
            message = decoded
        self.handler.call(Call(self, stream, message))

    # -- windows ----------------------------------------------------------------------------
    def initial_window(self, value: int) -> None:
        """The peer's SETTINGS changed the window streams start with: open ones move too."""
        delta = value - self.stream_send_window
        self.stream_send_window = value
        for stream in self.streams.values():
            stream.send_window += delta
            if stream.send_window > f.MAX_WINDOW:  # RFC 9113 6.9.2
                raise ConnectionFault(f.FLOW_CONTROL_ERROR, f"INITIAL_WINDOW_SIZE {value} takes "
                                      f"stream {stream.id}'s window past 2^31-1")  # fmt: skip

    def window_update(self, stream_id: int, increment: int) -> None:
        """WINDOW_UPDATE on a stream."""
        target = self.streams.get(stream_id)
        if target is None:
            if stream_id > self.last_stream:
                raise ConnectionFault(f.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
            return
        if increment == 0:
            raise StreamFault(stream_id, f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
        target.send_window += increment
        if target.send_window > f.MAX_WINDOW:
            raise StreamFault(stream_id, f.FLOW_CONTROL_ERROR, "stream window overflow")
        self.flush()

    # -- answering -------------------------------------------------------------------------
    def answer(self, stream: Stream, message: bytes) -> None:
        if stream.answered:
            self._orphan_ended(stream)
            return
        self._answered(stream)
        if self.connection.closed or stream.id not in self.streams:
            return
        size = len(message) + 5
        body = b"\x00" + (size - 5).to_bytes(4, "big") + message
        window = min(self.send_window, stream.send_window)
        if size <= window and size <= self.max_frame:  # the common case: one write
            self.send_window -= size
            stream.send_window -= size
            self.connection.write(
                b"".join((
                    f.headers_head(stream.id, len(_OK_HEADERS), False), _OK_HEADERS,
                    f.data_head(stream.id, size), body,
                    f.headers_head(stream.id, len(_OK_TRAILERS), True), _OK_TRAILERS,
                ))
            )  # fmt: skip
            self._done(stream)
            return
        limit = self.limits.answer_buffer
        if self.unsent + size > limit:
            self._refuse(stream, RESOURCE_EXHAUSTED, f"the answer of {size} bytes would wait for "
                         f"the client's flow-control window behind {self.unsent} bytes, past the "
                         f"limit of {limit}: read answers sooner, or grant wider windows")  # fmt: skip
            return
        self.connection.write(f.headers_head(stream.id, len(_OK_HEADERS), False) + _OK_HEADERS)
        stream.out = memoryview(body)
        stream.left, stream.stalled = -1, 0.0  # see `stalled`
        self.unsent += size
        self._waiting[stream.id] = stream
        stream.trailers = f.headers_head(stream.id, len(_OK_TRAILERS), True) + _OK_TRAILERS
        self.flush()

    # -- a streaming call's answers (`api.grpc.bidi.StreamCall`) ---------------------------
    def send(self, stream: Stream, message: bytes) -> None:
        """One response message of a streaming call, HEADERS first if none were sent."""
        if stream.answered or self.connection.closed or stream.id not in self.streams:
            return
        stream.active = time.monotonic()
        write = self.connection.write
        if not stream.started:
            stream.started = True
            write(f.headers_head(stream.id, len(_OK_HEADERS), False) + _OK_HEADERS)
        size = len(message) + 5
        prefix = b"\x00" + (size - 5).to_bytes(4, "big")
        out = stream.out
        if not out:
            if size <= min(self.send_window, stream.send_window) and size <= self.max_frame:
                self.send_window -= size
                stream.send_window -= size
                write(f.data_head(stream.id, size) + prefix + message)
                return
            stream.left, stream.stalled = -1, 0.0  # see `stalled`
        limit = self.limits.answer_buffer
        if self.unsent + size > limit:
            self._cancel(stream, RESOURCE_EXHAUSTED, f"a response of {size} bytes would wait for "
                         f"the client's flow-control window behind {self.unsent} bytes, past the "
                         f"limit of {limit}: read responses sooner, or grant wider windows")  # fmt: skip
            return
        if not isinstance(out, bytearray):
            out = stream.out = bytearray(out)
        out += prefix
        out += message
        self.unsent += size
        self._waiting[stream.id] = stream
        self.flush()

    def finish(self, stream: Stream, code: int, message: str) -> None:
        """End a streaming call with its status, after the responses waiting for window."""
        if stream.answered:
            return
        self._answered(stream)
        if not stream.started:
            self._refuse(stream, code, message)
            return
        if self.connection.closed or stream.id not in self.streams:
            return
        block = _status(code, message)
        trailers = f.headers_head(stream.id, len(block), True) + block
        if stream.out:
            stream.trailers = trailers  # written once the responses before it are (`flush`)
            return
        self.connection.write(trailers)
        self._done(stream)

    def _cancel(self, stream: Stream, code: int, message: str) -> None:
        """End a streaming call from this side: what is in flight is withdrawn first."""
        if stream.answered:
            return
        session = stream.session
        if stream.out:  # responses wait for a window that may not come: reset, not a status
            self._answered(stream)
            self.unsent -= len(stream.out)
            stream.out = b""
            self._waiting.pop(stream.id, None)
            self._release(stream)
            # RST_STREAM codes as gRPC maps them to statuses (ENHANCE_YOUR_CALM: exhausted)
            reset = f.ENHANCE_YOUR_CALM if code == RESOURCE_EXHAUSTED else f.CANCEL
            self.connection.write(f.rst_stream(stream.id, reset))
            self.streams.pop(stream.id, None)
            self._maybe_close()
        else:
            self.finish(stream, code, message)
        if session is not None:
            session.cancelled()

    def take(self) -> bool:
        """A slot for one request in flight on a streaming call (`StreamCall.take`)."""
        if len(self.streams) >= self.room:
            return False
        self.room -= 1
        return True

    def release(self) -> None:
        self.room += 1

    def fail(self, stream: Stream, code: int, message: str, reason: str | None = None) -> None:
        if stream.answered:
            self._orphan_ended(stream)
            return
        self._answered(stream)
        self._refuse(stream, code, message, reason)

    def _orphan_ended(self, stream: Stream) -> None:
        """The work of a call the client reset has ended: its slot is free."""
        if stream.orphan:
            stream.orphan = False
            self.orphans -= 1
            self.room += 1

    def _answered(self, stream: Stream) -> None:
        stream.answered = True
        if stream.handed:
            self.server.unanswered -= 1

    def _refuse(self, stream: Stream, code: int, message: str, reason: str | None = None) -> None:
        """A trailers-only answer; the rest of the request, if any, is not wanted."""
        stream.answered = True
        self._release(stream)
        if self.connection.closed or stream.id not in self.streams:
            return
        block = _status(code, message, reason, head=True)
        self.connection.write(f.headers_head(stream.id, len(block), True) + block)
        if not stream.ended:  # answered before the request ended: stop its sending
            self.connection.write(f.rst_stream(stream.id, f.NO_ERROR))
        self.streams.pop(stream.id, None)
        self._maybe_close()

    def flush(self) -> None:
        """Send answer DATA that waited for window, as far as the windows now allow."""
        if not self._waiting:
            return
        write = self.connection.write
        for stream in list(self._waiting.values()):
            if stream.id not in self.streams:  # reset meanwhile
                del self._waiting[stream.id]
                continue
            while stream.out:
                if self.send_window <= 0:
                    return
                room = min(self.send_window, stream.send_window, self.max_frame)
                if room <= 0:
                    break
                out = stream.out
                if isinstance(out, bytearray):  # a streaming call's: taken from its front
                    piece: bytes | memoryview = bytes(out[:room])
                    del out[:room]
                else:
                    piece, stream.out = out[:room], out[room:]
                self.send_window -= len(piece)
                stream.send_window -= len(piece)
                self.unsent -= len(piece)
                write(f.data_head(stream.id, len(piece)) + piece)
            if stream.out:
                continue
            if not stream.trailers:  # a streaming call still open: more may come
                del self._waiting[stream.id]
                continue
            write(stream.trailers)
            stream.trailers = b""
            del self._waiting[stream.id]
            self._done(stream)

    # -- ending -----------------------------------------------------------------------------
    def _done(self, stream: Stream) -> None:
        if not stream.ended:
            self.connection.write(f.rst_stream(stream.id, f.NO_ERROR))
        self.streams.pop(stream.id, None)
        self._maybe_close()

    def forget(self, stream_id: int) -> None:
        """The stream is reset (by either side): what it holds is dropped, and a call handed
        over goes on counting against `max_streams` until its work ends."""
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            self._release(stream)
            if stream.session is not None:
                if not stream.answered:  # its requests in flight are withdrawn: no orphan
                    stream.answered = True
                    self.server.unanswered -= 1
                    stream.session.cancelled()
            elif stream.handed and not stream.answered:
                stream.answered = True  # its answer, when it comes, goes nowhere
                stream.orphan = True
                self.orphans += 1
                self.room -= 1
                self.server.unanswered -= 1
            if stream.out:
                self.unsent -= len(stream.out)
                stream.out = b""
                self._waiting.pop(stream_id, None)
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self.going_away and not self.streams:
            self.connection.close()

    def stalled(self, now: float, timeout: float) -> bool:
        """Whether an answer has waited for window `timeout` seconds without progress (each
        sweep notes how much of each is left, and since when)."""
        for stream in self._waiting.values():
            left = len(stream.out)
            if left != stream.left:
                stream.left, stream.stalled = left, now
            elif now - stream.stalled > timeout:
                return True
        return False

    def sweep(self, now: float) -> None:
        """Refuse a stream whose request did not arrive within the body timeout; end a
        streaming call past its own deadline, or idle for the stream idle timeout."""
        limits = self.limits
        for stream in list(self.streams.values()):
            if stream.session is not None:
                if stream.answered:
                    continue
                if stream.timeout is not None and now - stream.opened > stream.timeout:
                    self._cancel(stream, DEADLINE_EXCEEDED, f"the stream's deadline of "
                                 f"{stream.timeout:g} s (grpc-timeout) passed")  # fmt: skip
                elif now - stream.active > limits.stream_idle_timeout:
                    self._cancel(stream, DEADLINE_EXCEEDED, "nothing was sent or received on "
                                 f"the stream for {limits.stream_idle_timeout:g} s "
                                 "(--stream-idle-timeout)")  # fmt: skip
                continue
            late = now - stream.opened > limits.body_timeout
            if late and not stream.ended and not stream.answered:
                self._refuse(stream, DEADLINE_EXCEEDED, "the request did not arrive within "
                             f"{limits.body_timeout:g} s (--body-timeout)")  # fmt: skip

    def lost(self) -> None:
        """The connection is gone: an answer still to come goes nowhere."""
        streams = list(self.streams.values())
        self.streams.clear()
        for stream in streams:
            if stream.handed and not stream.answered:
                self.server.unanswered -= 1
                if stream.session is not None:
                    stream.answered = True
                    stream.session.cancelled()
            stream.answered = True
            self._release(stream)
        self._waiting.clear()
        self.unsent = 0


def _status(code: int, message: str, reason: str | None = None, *, head: bool = False) -> bytes:
    """The header block of a call's status (trailers), with the error's `reason` as trailing
    metadata where it has one, and the response headers too when `head` (a trailers-only
    answer)."""
    fields = [(b"grpc-status", str(code).encode())]
    if message:
        text = quote(message[:2048], safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
        fields.append((b"grpc-message", text.encode()))
    if reason:
        fields.append((REASON_KEY.encode(), reason.encode()))
    if head:
        return f.encode(((b":status", b"200"), (b"content-type", b"application/grpc"), _ACCEPT,
                         *fields))  # fmt: skip
    return f.encode(tuple(fields))
