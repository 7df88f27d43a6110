"""Unary gRPC over HTTP/2 (RFC 9113) on an asyncio protocol, on the server's own event loop.

A connection reads frames, turns each stream whose request is complete into a `Call` and
hands it to a `Handler` in the same loop turn, so calls that arrive together reach the
controller together and batch (as the HTTP/1.1 server's requests do, `api.connection`).
A call answers once: HEADERS, the response message as DATA within the peer's windows, and
trailers (`grpc-status`, `grpc-message`).

Only what unary calls need: no server push, no priorities (ignored); compressed requests
(gzip, deflate) are read, answers are not compressed. Limits: frame size, concurrent streams
(one more is refused, REFUSED_STREAM), header list size and message size (RESOURCE_EXHAUSTED),
flow control both ways, and read times (`sweep`). A peer that breaks the protocol gets
GOAWAY (connection errors) or RST_STREAM (stream errors), never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from urllib.parse import quote

from headway.api.grpc import frames as f
from headway.api.grpc.calls import (
    DEADLINE_EXCEEDED,
    INVALID_ARGUMENT,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    Call,
    Handler,
    Http2Server,
    Limits,
    Stream,
    parse_timeout,
)
from headway.api.grpc.frames import ConnectionFault, StreamFault
from headway.api.kernel_wait import waited_in_kernel
from headway.api.limits import decode_body
from headway.errors import HeadwayError, PayloadTooLarge

log = logging.getLogger("headway.grpc")

#: Compressed requests are read; answers are not compressed (a server may always answer so).
_ACCEPT = (b"grpc-accept-encoding", b"identity,deflate,gzip")
_OK_HEADERS = f.encode(((b":status", b"200"), (b"content-type", b"application/grpc"), _ACCEPT))
_OK_TRAILERS = f.encode(((b"grpc-status", b"0"),))


class Http2Connection(asyncio.Protocol):
    """One client connection; `server` tracks connections and calls in flight."""

    def __init__(self, handler: Handler, limits: Limits, server: Http2Server) -> None:
        self.handler = handler
        self.limits = limits
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.decoder = f.HeaderDecoder(4 * limits.max_header_list)
        self.streams: dict[int, Stream] = {}
        self._waiting: dict[int, Stream] = {}  # answers waiting for flow-control window
        self.last_stream = 0
        self.opened = self._arrived = time.monotonic()
        self._buffer = b""
        self._preface = False  # the client's preface has arrived
        self._settled = False  # and its first SETTINGS
        self._closed = False
        self._going_away = False
        self._paused = False
        self._block: list[bytes] = []  # a header block awaiting CONTINUATION
        self._block_stream = self._block_flags = self._block_size = 0
        self._recv_window = self._recv_unacked = 0
        self._send_window = f.DEFAULT_WINDOW
        self._stream_send_window = f.DEFAULT_WINDOW
        self._max_frame = f.DEFAULT_FRAME_SIZE

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        limits = self.limits
        if len(self.server.connections) >= limits.max_connections:
            self.abort(f.REFUSED_STREAM, f"too many connections: this server serves at most "
                       f"{limits.max_connections} at once (--max-connections); retry shortly")  # fmt: skip
            return
        self.server.connections.add(self)
        own = {
            f.ENABLE_PUSH: 0,
            f.MAX_CONCURRENT_STREAMS: limits.max_streams,
            f.INITIAL_WINDOW_SIZE: limits.stream_window,
            f.MAX_HEADER_LIST_SIZE: limits.max_header_list,
        }
        self._recv_window = limits.connection_window
        grow = limits.connection_window - f.DEFAULT_WINDOW
        self._write(f.settings(own) + (f.window_update(0, grow) if grow > 0 else b""))

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.server.connections.discard(self)
        for stream in self.streams.values():
            if not stream.answered and stream.ended:
                self.server.unanswered -= 1
            stream.answered = True  # an answer still to come goes nowhere
        self.streams.clear()
        self._waiting.clear()
        self.transport = None

    def pause_writing(self) -> None:
        """The client is not reading its answers: stop reading its calls."""
        if self.transport is not None and not self._paused:
            self._paused = True
            with contextlib.suppress(RuntimeError):
                self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and self._paused:
            self._paused = False
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        now = time.monotonic()
        server = self.server
        self._arrived = server.arrived_since(now)  # when the calls opened in this read began
        if not self._preface:  # its first bytes: count their wait in the listen queue too
            transport = self.transport
            waited = waited_in_kernel(transport.get_extra_info("socket") if transport else None)
            if waited:
                self._arrived = min(self._arrived, now - waited)
        server.keep_up(now)
        if self._buffer:
            data = self._buffer + data
        try:
            at = 0
            if not self._preface:
                if len(data) < len(f.PREFACE):
                    if not f.PREFACE.startswith(data):
                        raise ConnectionFault(f.PROTOCOL_ERROR, "not an HTTP/2 preface")
                    self._buffer = data
                    return
                if not data.startswith(f.PREFACE):
                    raise ConnectionFault(f.PROTOCOL_ERROR, "not an HTTP/2 preface")
                self._preface = True
                at = len(f.PREFACE)
            end = len(data)
            max_frame = f.DEFAULT_FRAME_SIZE
            while end - at >= 9:
                length, kind, flags, stream = f.frame_head(data, at)
                if length > max_frame:
                    raise ConnectionFault(
                        f.FRAME_SIZE_ERROR, f"frame of {length} bytes exceeds {max_frame}"
                    )
                if end - at - 9 < length:
                    break
                payload = data[at + 9 : at + 9 + length]
                at += 9 + length
                try:
                    self._frame(kind, flags, stream, payload)
                except StreamFault as exc:
                    if exc.stream == 0:
                        raise ConnectionFault(exc.code, exc.message) from None
                    self._reset(exc.stream, exc.code)
                if self._closed:
                    return
            self._buffer = data[at:] if at < end else b""
            if self._recv_unacked >= self.limits.connection_window // 2:
                self._write(f.window_update(0, self._recv_unacked))
                self._recv_window += self._recv_unacked
                self._recv_unacked = 0
        except ConnectionFault as exc:
            self.abort(exc.code, exc.message)
        except Exception as exc:  # a bug, not the client's: this connection only
            log.error("gRPC connection failed", exc_info=exc)
            self.abort(f.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")

    # -- frames ----------------------------------------------------------------------------
    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if self._block and kind != f.CONTINUATION:
            raise ConnectionFault(f.PROTOCOL_ERROR, "header block interrupted by another frame")
        if not self._settled:
            if kind != f.SETTINGS or flags & f.ACK:
                raise ConnectionFault(f.PROTOCOL_ERROR, "the preface must end with SETTINGS")
            self._settled = True
        if kind == f.DATA:
            self._data(flags, stream, payload)
        elif kind == f.HEADERS:
            if stream == 0:
                raise ConnectionFault(f.PROTOCOL_ERROR, "HEADERS on stream 0")
            block = f.unpadded(payload, flags, stream, priority=True)
            self._begin_block(stream, flags, block)
        elif kind == f.CONTINUATION:
            if not self._block or stream != self._block_stream:
                raise ConnectionFault(f.PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
            self._continue_block(flags, payload)
        elif kind == f.WINDOW_UPDATE:
            self._window_update(stream, payload)
        elif kind == f.SETTINGS:
            self._settings(flags, stream, payload)
        elif kind == f.PING:
            if stream != 0 or len(payload) != 8:
                raise ConnectionFault(f.FRAME_SIZE_ERROR, "PING must be 8 bytes on stream 0")
            if not flags & f.ACK:
                self._write(f.frame(f.PING, f.ACK, 0, payload))
        elif kind == f.RST_STREAM:
            if stream == 0 or len(payload) != 4:
                raise ConnectionFault(f.PROTOCOL_ERROR, "RST_STREAM must be 4 bytes on a stream")
            if stream > self.last_stream:
                raise ConnectionFault(f.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream}")
            self._forget(stream)
        elif kind == f.GOAWAY:
            self._going_away = True
            if not self.streams:
                self.close()
        elif kind == f.PUSH_PROMISE:
            raise ConnectionFault(f.PROTOCOL_ERROR, "a client cannot push")
        elif kind == f.PRIORITY and len(payload) != 5:
            raise StreamFault(stream, f.FRAME_SIZE_ERROR, "PRIORITY must be 5 bytes")
        # other kinds (PRIORITY, extensions) are ignored, as the protocol asks

    def _settings(self, flags: int, stream: int, payload: bytes) -> None:
        if stream != 0:
            raise ConnectionFault(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise ConnectionFault(f.FRAME_SIZE_ERROR, "SETTINGS ack with a payload")
            return
        for key, value in f.parse_settings(payload):
            if key == f.INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise ConnectionFault(f.FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self._stream_send_window
                self._stream_send_window = value
                for open_stream in self.streams.values():
                    open_stream.send_window += delta
            elif key == f.MAX_FRAME_SIZE:
                if not f.DEFAULT_FRAME_SIZE <= value <= 2**24 - 1:
                    raise ConnectionFault(f.PROTOCOL_ERROR, f"bad MAX_FRAME_SIZE {value}")
                self._max_frame = value
            elif key == f.ENABLE_PUSH and value > 1:
                raise ConnectionFault(f.PROTOCOL_ERROR, f"bad ENABLE_PUSH {value}")
        self._write(f.SETTINGS_ACK)
        self._flush()

    def _window_update(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionFault(f.FRAME_SIZE_ERROR, "WINDOW_UPDATE must be 4 bytes")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream == 0:
            if increment == 0:
                raise ConnectionFault(f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > f.MAX_WINDOW:
                raise ConnectionFault(f.FLOW_CONTROL_ERROR, "connection window overflow")
            self._flush()
            return
        target = self.streams.get(stream)
        if target is None:
            if stream > self.last_stream:
                raise ConnectionFault(f.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream}")
            return
        if increment == 0:
            raise StreamFault(stream, f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
        target.send_window += increment
        if target.send_window > f.MAX_WINDOW:
            raise StreamFault(stream, f.FLOW_CONTROL_ERROR, "stream window overflow")
        self._flush()

    def _begin_block(self, stream: int, flags: int, block: bytes) -> None:
        if flags & f.END_HEADERS:
            self._headers(stream, flags, block)
            return
        self._block = [block]
        self._block_stream, self._block_flags, self._block_size = stream, flags, len(block)

    def _continue_block(self, flags: int, fragment: bytes) -> None:
        self._block.append(fragment)
        self._block_size += len(fragment)
        if self._block_size > 4 * self.limits.max_header_list:
            raise ConnectionFault(f.ENHANCE_YOUR_CALM, "header block too large")
        if flags & f.END_HEADERS:
            block = b"".join(self._block)
            self._block = []
            self._headers(self._block_stream, self._block_flags, block)

    def _headers(self, stream_id: int, flags: int, block: bytes) -> None:
        headers = self.decoder.decode(block)  # always: the table must stay in step
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client: they end its request
            if stream.ended or not flags & f.END_STREAM:
                raise StreamFault(stream_id, f.PROTOCOL_ERROR, "HEADERS after the request")
            stream.ended = True
            self._complete(stream)
            return
        if stream_id <= self.last_stream:
            return  # a stream this side already reset
        if stream_id % 2 == 0:
            raise ConnectionFault(f.PROTOCOL_ERROR, f"client stream {stream_id} is even")
        self.last_stream = stream_id
        if self._going_away or len(self.streams) >= self.limits.max_streams:
            raise StreamFault(stream_id, f.REFUSED_STREAM, "too many streams")
        stream = self.streams[stream_id] = Stream(
            stream_id, self._stream_send_window, self._arrived
        )
        stream.headers = headers
        stream.ended = bool(flags & f.END_STREAM)
        self._check_head(stream)
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

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        size = len(payload)
        self._recv_window -= size
        if self._recv_window < 0:
            raise ConnectionFault(f.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        self._recv_unacked += size
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id == 0 or stream_id > self.last_stream:
                raise ConnectionFault(f.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # on a stream this side has finished with: ignored, credited
        if stream.ended:
            raise StreamFault(stream_id, f.STREAM_CLOSED, "DATA after END_STREAM")
        stream.unacked += size
        if stream.unacked > self.limits.stream_window:
            raise StreamFault(stream_id, f.FLOW_CONTROL_ERROR, "DATA beyond the stream window")
        body = f.unpadded(payload, flags, stream_id)
        if not stream.answered:
            stream.size += len(body)
            if stream.size > self.limits.max_message + 5:
                self._refuse(stream, RESOURCE_EXHAUSTED, f"request message of {stream.size}+ "
                             f"bytes exceeds the limit of {self.limits.max_message} bytes")  # fmt: skip
                return
            stream.chunks.append(body)
        if flags & f.END_STREAM:
            stream.ended = True
            self._complete(stream)
        elif stream.unacked >= self.limits.stream_window // 2:
            self._write(f.window_update(stream_id, stream.unacked))
            stream.unacked = 0

    def _complete(self, stream: Stream) -> None:
        """The request is whole: check its one message and hand the call over."""
        if stream.answered:
            self._forget(stream.id)
            return
        self.server.unanswered += 1
        chunks = stream.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        stream.chunks = []
        if len(data) < 5 or int.from_bytes(data[1:5], "big") != len(data) - 5:
            self.fail(stream, INVALID_ARGUMENT, "a unary call carries exactly one message")
            return
        message = data[5:]
        if data[0]:  # compressed, as its grpc-encoding says
            encoding = stream.encoding
            if encoding not in (b"gzip", b"deflate"):
                unknown = encoding not in (None, b"identity")
                self.fail(stream, UNIMPLEMENTED if unknown else INVALID_ARGUMENT,
                          f"compressed messages are read as gzip or deflate, not {encoding!r}")  # fmt: skip
                return
            try:
                message = decode_body(encoding, message, self.limits.max_message)
            except HeadwayError as exc:
                code = RESOURCE_EXHAUSTED if isinstance(exc, PayloadTooLarge) else INVALID_ARGUMENT
                self.fail(stream, code, exc.message)
                return
        self.handler.call(Call(self, stream, message))

    # -- answering -------------------------------------------------------------------------
    def answer(self, stream: Stream, message: bytes) -> None:
        if stream.answered:
            return
        self._answered(stream)
        if self._closed or stream.id not in self.streams:
            return
        size = len(message) + 5
        body = b"\x00" + (size - 5).to_bytes(4, "big") + message
        window = min(self._send_window, stream.send_window)
        if size <= window and size <= self._max_frame:  # the common case: one write
            self._send_window -= size
            stream.send_window -= size
            self._write(
                b"".join((
                    f.headers_head(stream.id, len(_OK_HEADERS), False), _OK_HEADERS,
                    f.data_head(stream.id, size), body,
                    f.headers_head(stream.id, len(_OK_TRAILERS), True), _OK_TRAILERS,
                ))
            )  # fmt: skip
            self._done(stream)
            return
        self._write(f.headers_head(stream.id, len(_OK_HEADERS), False) + _OK_HEADERS)
        stream.out = memoryview(body)
        self._waiting[stream.id] = stream
        stream.trailers = f.headers_head(stream.id, len(_OK_TRAILERS), True) + _OK_TRAILERS
        self._flush()

    def fail(self, stream: Stream, code: int, message: str) -> None:
        if stream.answered:
            return
        self._answered(stream)
        self._refuse(stream, code, message)

    def _answered(self, stream: Stream) -> None:
        stream.answered = True
        if stream.ended:
            self.server.unanswered -= 1

    def _refuse(self, stream: Stream, code: int, message: str) -> None:
        """A trailers-only answer; the rest of the request, if any, is not wanted."""
        stream.answered = True
        if self._closed or stream.id not in self.streams:
            return
        text = quote(message[:2048], safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
        block = f.encode((
            (b":status", b"200"), (b"content-type", b"application/grpc"), _ACCEPT,
            (b"grpc-status", str(code).encode()), (b"grpc-message", text.encode()),
        ))  # fmt: skip
        self._write(f.headers_head(stream.id, len(block), True) + block)
        if not stream.ended:  # answered before the request ended: stop its sending
            self._write(f.rst_stream(stream.id, f.NO_ERROR))
        self.streams.pop(stream.id, None)
        self._maybe_close()

    def _flush(self) -> None:
        """Send answer DATA that waited for window, as far as the windows now allow."""
        if not self._waiting:
            return
        for stream in list(self._waiting.values()):
            if stream.id not in self.streams:  # reset meanwhile
                del self._waiting[stream.id]
                continue
            while stream.out:
                if self._send_window <= 0:
                    return
                room = min(self._send_window, stream.send_window, self._max_frame)
                if room <= 0:
                    break
                piece, stream.out = stream.out[:room], stream.out[room:]
                self._send_window -= len(piece)
                stream.send_window -= len(piece)
                self._write(f.data_head(stream.id, len(piece)) + piece)
            if stream.out:
                continue
            self._write(stream.trailers)
            stream.trailers = b""
            del self._waiting[stream.id]
            self._done(stream)

    def _done(self, stream: Stream) -> None:
        if not stream.ended:
            self._write(f.rst_stream(stream.id, f.NO_ERROR))
        self.streams.pop(stream.id, None)
        self._maybe_close()

    def _reset(self, stream_id: int, code: int) -> None:
        self._write(f.rst_stream(stream_id, code))
        self._forget(stream_id)

    def _forget(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is not None and stream.ended and not stream.answered:
            stream.answered = True  # its answer, when it comes, goes nowhere
            self.server.unanswered -= 1
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self._going_away and not self.streams:
            self.close()

    # -- ending ----------------------------------------------------------------------------
    def go_away(self) -> None:
        """Take no new calls, finish those in flight, then close (a graceful stop)."""
        if not self._closed and not self._going_away:
            self._going_away = True
            self._write(f.goaway(self.last_stream, f.NO_ERROR))
            self._maybe_close()

    def abort(self, code: int, message: str) -> None:
        """A connection error: GOAWAY naming it, then close."""
        log.info("gRPC connection closed: %s", message)
        self._write(f.goaway(self.last_stream, code, message))
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self._closed = True
            self.transport.close()

    def sweep(self, now: float) -> None:
        """Close a connection without its preface in time; refuse a stream whose request
        did not arrive in time."""
        limits = self.limits
        if not self._settled:
            if now - self.opened > limits.header_timeout:
                self.abort(f.PROTOCOL_ERROR, "no HTTP/2 preface in time")
            return
        for stream in list(self.streams.values()):
            late = now - stream.opened > limits.body_timeout
            if late and not stream.ended and not stream.answered:
                self._refuse(stream, DEADLINE_EXCEEDED, "the request did not arrive within "
                             f"{limits.body_timeout:g} s (--body-timeout)")  # fmt: skip

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self._closed:
            self.transport.write(data)
