"""Unary gRPC over HTTP/2 (RFC 9113) on an asyncio protocol, on the server's own event loop.

A connection reads frames and keeps the connection's own state (the preface, settings, header
blocks, its receive window); its streams are unary calls (`api.grpc.unary.UnaryCalls`), and a
stream whose request is complete is handed to a `Handler` in the same loop turn, so calls that
arrive together reach the controller together and batch (as the HTTP/1.1 server's requests do,
`api.connection`).

Only what unary calls need: no server push, no priorities (ignored); compressed requests
(gzip, deflate) are read, answers are not compressed. Limits: frame size, concurrent streams
(one more is refused, REFUSED_STREAM), header list size and message size (RESOURCE_EXHAUSTED),
flow control both ways, what a client may hold in memory (`api.grpc.unary`), how often it may
send what costs this side work (`api.grpc.floods`), and times (`sweep`): the preface and a
header block, a request, answers left unread, a connection left idle. A peer that breaks the
protocol gets GOAWAY (connection errors) or RST_STREAM (stream errors), never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Protocol

from headway.api.grpc import frames as f
from headway.api.grpc.calls import Handler, Limits, Stream
from headway.api.grpc.connections import Connections
from headway.api.grpc.floods import WINDOW_S, Floods
from headway.api.grpc.frames import ConnectionFault, StreamFault
from headway.api.grpc.unary import UnaryCalls
from headway.api.kernel_wait import waited_in_kernel

log = logging.getLogger("headway.grpc")

#: Seconds a connection closing waits for the client to take its last bytes (its GOAWAY) and
#: close its side, reading and dropping what it still sends, before the socket is closed
#: (Go's goAwayTimeout): a socket closed with bytes unread is reset, and the reset would
#: throw away the GOAWAY that tells the client why.
LINGER_S = 1.0


class Http2Server(Protocol):
    """What a connection tells its server (`api.grpc.server.GrpcServer`)."""

    connections: Connections[Http2Connection]
    unanswered: int
    buffered: int

    def arrived_since(self, now: float) -> float:
        """The earliest time bytes read `now` may have arrived (`api.turns.ReadTurns`)."""

    def keep_up(self, now: float) -> None:
        """Let the app hear its workers' replies during a long turn of reads."""

    def accept_pending(self) -> None:
        """Accept the connections waiting in the listen queue (`api.accepting`)."""


class Http2Connection(asyncio.Protocol):
    """One client connection; `server` tracks connections and calls in flight."""

    def __init__(self, handler: Handler, limits: Limits, server: Http2Server) -> None:
        self.handler = handler
        self.limits = limits
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.decoder = f.HeaderDecoder(4 * limits.max_header_list)
        #: Closed (or closing): nothing more is read or written.
        self.closed = False
        self.opened = self._arrived = time.monotonic()
        self.floods = Floods()
        self._window_ends = self.opened + WINDOW_S  # the floods' window
        self.calls = UnaryCalls(self, handler, limits, server)
        self.streams: dict[int, Stream] = self.calls.streams
        self._buffer = b""
        self._preface = False  # the client's preface has arrived
        self._settled = False  # and its first SETTINGS
        self._paused = False
        self._queued = 0  # control frames written since the client stopped reading
        self._block: list[bytes] = []  # a header block awaiting CONTINUATION
        self._block_stream = self._block_flags = self._block_size = 0
        self._block_at = 0.0  # when its first frame may have arrived
        self._recv_window = self._recv_unacked = 0
        self._busy_at = self.opened  # when a sweep last found a call open, or a new one
        self._seen_opened = 0  # how many streams had been opened by then
        self._stuck_at = 0.0  # when a sweep first found the client not reading (0: it reads)

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.server.accept_pending()
        limits = self.limits
        own = f.settings({
            f.ENABLE_PUSH: 0,
            f.MAX_CONCURRENT_STREAMS: limits.max_streams,
            f.INITIAL_WINDOW_SIZE: limits.stream_window,
            f.MAX_HEADER_LIST_SIZE: limits.max_header_list,
        })  # fmt: skip
        connections = self.server.connections
        full = len(connections) >= limits.max_connections
        if full and not connections.evict_idle(self.opened):
            self.write(own)  # a client reads the server's SETTINGS first (RFC 9113 3.4)
            self.abort(f.REFUSED_STREAM, f"too many connections: this server serves at most "
                       f"{limits.max_connections} at once (--max-connections); retry shortly")  # fmt: skip
            return
        connections.add(self)
        self._recv_window = limits.connection_window
        grow = limits.connection_window - f.DEFAULT_WINDOW
        self.write(own + (f.window_update(0, grow) if grow > 0 else b""))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self.calls.lost()
        self.transport = None

    def pause_writing(self) -> None:
        """The client is not reading its answers: stop reading its calls."""
        if self.transport is not None and not self._paused:
            self._paused = True
            with contextlib.suppress(RuntimeError):
                self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._queued = 0
        if self.transport is not None and self._paused:
            self._paused = False
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        now = time.monotonic()
        if now >= self._window_ends:
            self._window_ends = now + WINDOW_S
            self.floods.restart(self.calls.opened)
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
                    if not length:
                        self._empty(kind, flags)
                    self._frame(kind, flags, stream, payload)
                except StreamFault as exc:
                    if exc.stream == 0:
                        raise ConnectionFault(exc.code, exc.message) from None
                    self._control(f.rst_stream(exc.stream, exc.code))
                    self.calls.forget(exc.stream)
                    self._reset_counted()
                if self.closed:
                    return
            self._buffer = data[at:] if at < end else b""
            if self._recv_unacked >= self.limits.connection_window // 2:
                self.write(f.window_update(0, self._recv_unacked))
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
            size = len(payload)
            self._recv_window -= size
            if self._recv_window < 0:
                raise ConnectionFault(f.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
            self._recv_unacked += size
            self.calls.data(flags, stream, payload)
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
            self.floods.pings += 1
            if self.floods.pings > self.limits.max_pings:
                raise self._calm(f"more than {self.limits.max_pings} PINGs")
            if not flags & f.ACK:
                self._control(f.frame(f.PING, f.ACK, 0, payload))
        elif kind == f.RST_STREAM:
            if stream == 0 or len(payload) != 4:
                raise ConnectionFault(f.PROTOCOL_ERROR, "RST_STREAM must be 4 bytes on a stream")
            if stream > self.calls.last_stream:
                raise ConnectionFault(f.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream}")
            self.calls.forget(stream)
            self._reset_counted()
        elif kind == f.GOAWAY:
            if stream != 0 or len(payload) < 8:
                raise ConnectionFault(f.PROTOCOL_ERROR, "GOAWAY must be 8+ bytes on stream 0")
            self.calls.going_away = True
            if not self.streams:
                self.close()
        elif kind == f.PUSH_PROMISE:
            raise ConnectionFault(f.PROTOCOL_ERROR, "a client cannot push")
        else:  # PRIORITY and extension frames are ignored, as the protocol asks; counted
            if kind == f.PRIORITY and len(payload) != 5:
                raise StreamFault(stream, f.FRAME_SIZE_ERROR, "PRIORITY must be 5 bytes")
            self._carries_nothing()

    # -- floods (`api.grpc.floods`) --------------------------------------------------------
    def _calm(self, what: str) -> ConnectionFault:
        return ConnectionFault(f.ENHANCE_YOUR_CALM, f"{what} within {WINDOW_S:g} s")

    def _reset_counted(self) -> None:
        """A stream was reset: past the bound, and half the streams opened, that is a flood."""
        floods = self.floods
        floods.resets += 1
        if floods.resets > self.limits.max_resets:
            opened = self.calls.opened - floods.opened
            if 2 * floods.resets > opened:
                raise self._calm(f"{floods.resets} streams reset of {opened} opened")

    def _empty(self, kind: int, flags: int) -> None:
        """An empty frame: one that ends nothing carries nothing."""
        if kind == f.CONTINUATION or (kind <= f.HEADERS and not flags & f.END_STREAM):
            self._carries_nothing()

    def _carries_nothing(self) -> None:
        self.floods.empty += 1
        if self.floods.empty > self.limits.max_empty:
            raise self._calm(f"more than {self.limits.max_empty} frames that carry nothing")

    def _control(self, data: bytes) -> None:
        """Write an ack or a reset; a client that does not read may not make them pile up."""
        self.write(data)
        if self._paused:
            self._queued += 1
            if self._queued > self.limits.max_queued_control:
                raise ConnectionFault(f.ENHANCE_YOUR_CALM, f"more than "
                                      f"{self.limits.max_queued_control} acks and resets "
                                      "queued while the client reads nothing")  # fmt: skip

    def _settings(self, flags: int, stream: int, payload: bytes) -> None:
        if stream != 0:
            raise ConnectionFault(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        self.floods.settings += 1
        if self.floods.settings > self.limits.max_settings:
            raise self._calm(f"more than {self.limits.max_settings} SETTINGS")
        if flags & f.ACK:
            if payload:
                raise ConnectionFault(f.FRAME_SIZE_ERROR, "SETTINGS ack with a payload")
            return
        for key, value in f.parse_settings(payload):
            if key == f.INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise ConnectionFault(f.FLOW_CONTROL_ERROR, "initial window too large")
                self.calls.initial_window(value)
            elif key == f.MAX_FRAME_SIZE:
                if not f.DEFAULT_FRAME_SIZE <= value <= 2**24 - 1:
                    raise ConnectionFault(f.PROTOCOL_ERROR, f"bad MAX_FRAME_SIZE {value}")
                self.calls.max_frame = value
            elif key == f.ENABLE_PUSH and value > 1:
                raise ConnectionFault(f.PROTOCOL_ERROR, f"bad ENABLE_PUSH {value}")
        self._control(f.SETTINGS_ACK)
        self.calls.flush()

    def _window_update(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionFault(f.FRAME_SIZE_ERROR, "WINDOW_UPDATE must be 4 bytes")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream == 0:
            if increment == 0:
                raise ConnectionFault(f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.calls.send_window += increment
            if self.calls.send_window > f.MAX_WINDOW:
                raise ConnectionFault(f.FLOW_CONTROL_ERROR, "connection window overflow")
            self.calls.flush()
            return
        self.calls.window_update(stream, increment)

    def _begin_block(self, stream: int, flags: int, block: bytes) -> None:
        if flags & f.END_HEADERS:  # always decoded: the table must stay in step
            self.calls.headers(stream, flags, self.decoder.decode(block), self._arrived)
            return
        self._block = [block]
        self._block_stream, self._block_flags, self._block_size = stream, flags, len(block)
        self._block_at = self._arrived

    def _continue_block(self, flags: int, fragment: bytes) -> None:
        limits = self.limits
        if len(self._block) > limits.max_continuations:
            raise ConnectionFault(f.ENHANCE_YOUR_CALM, "header block in more than "
                                  f"{limits.max_continuations} CONTINUATION frames")  # fmt: skip
        if self._block_size + len(fragment) > 4 * limits.max_header_list:
            raise ConnectionFault(f.ENHANCE_YOUR_CALM, "header block too large")
        self._block.append(fragment)
        self._block_size += len(fragment)
        if flags & f.END_HEADERS:
            headers = self.decoder.decode(b"".join(self._block))
            self._block = []
            self.calls.headers(self._block_stream, self._block_flags, headers, self._arrived)

    # -- ending ----------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """Open, with no call open on it (nor a reset call's work running)."""
        return not (self.closed or self.streams or self.calls.orphans)

    @property
    def last_active(self) -> float:
        """When it last had a call open, as far as the sweeps tell (or was opened); one
        that opened a stream since the last sweep is as recent as can be."""
        return self._busy_at if self.calls.opened == self._seen_opened else math.inf

    def go_away(self) -> None:
        """Take no new calls, finish those in flight, then close (a graceful stop)."""
        if not self.closed and not self.calls.going_away:
            self.calls.going_away = True
            self.write(f.goaway(self.calls.last_stream, f.NO_ERROR))
            if not self.streams:
                self.close()

    def abort(self, code: int, message: str) -> None:
        """A connection error: GOAWAY naming it, then close."""
        log.info("gRPC connection closed: %s", message)
        self.write(f.goaway(self.calls.last_stream, code, message))
        self.close()

    def close(self) -> None:
        """Stop writing once what is written has gone (`LINGER_S`)."""
        transport = self.transport
        if transport is not None and not self.closed:
            self.closed = True
            self.server.connections.closing(self)
            if transport.can_write_eof():
                transport.write_eof()  # reading goes on, dropped: the client closes, or `sweep`
            else:
                transport.close()

    def drop(self) -> None:
        """Close the socket now, whatever is still unsent."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def sweep(self, now: float) -> None:
        """Drop a connection whose client has not read for the write timeout; close one
        without its preface or with a header block unfinished after the header timeout, one
        whose answers waited for window without progress for the write timeout, and one idle
        for the idle timeout; refuse a stream whose request did not arrive in time."""
        limits = self.limits
        transport = self.transport
        if transport is None:
            return
        if self.closed or self._paused:  # closing, or its answers are not taken
            if not self._stuck_at:
                self._stuck_at = now
            elif now - self._stuck_at > (LINGER_S if self.closed else limits.write_timeout):
                if not self.closed:
                    log.info("gRPC connection dropped: the client read nothing for %g s "
                             "(--write-timeout)", limits.write_timeout)  # fmt: skip
                self.drop()
            return
        self._stuck_at = 0.0
        if not self._settled:
            if now - self.opened > limits.header_timeout:
                self.abort(f.PROTOCOL_ERROR, "no HTTP/2 preface in time")
            return
        if self._block and now - self._block_at > limits.header_timeout:
            self.abort(f.ENHANCE_YOUR_CALM, f"a header block unfinished after "
                       f"{limits.header_timeout:g} s (--header-timeout)")  # fmt: skip
            return
        calls = self.calls
        if calls.stalled(now, limits.write_timeout):
            self.abort(f.ENHANCE_YOUR_CALM, f"an answer waited for the client's flow-control "
                       f"window for {limits.write_timeout:g} s (--write-timeout)")  # fmt: skip
            return
        calls.sweep(now)
        if self.streams or calls.orphans or calls.opened != self._seen_opened:
            self._busy_at, self._seen_opened = now, calls.opened
        elif now - self.last_active > limits.idle_timeout:
            log.info("gRPC connection idle for %g s closed (--grpc-idle-timeout)",
                     limits.idle_timeout)  # fmt: skip
            self.go_away()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)
