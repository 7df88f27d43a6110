"""One client connection of Headway's HTTP/1.1 server (`api.http`): parse, limit, answer.

An asyncio protocol over httptools: a whole request becomes one call to
`HeadwayApp.respond`, and its answer one `transport.write` from `reply`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from functools import partial
from typing import TYPE_CHECKING

import httptools

from headway.api.closing import linger, turn_away
from headway.api.errors import Response, error_response, problem
from headway.api.kernel_wait import waited_in_kernel
from headway.api.limits import (
    MAX_BLANK_BYTES,
    MAX_HEADER_BYTES,
    MAX_URL_BYTES,
    UNREAD_PER_CONNECTION,
    BodyDecoder,
    body_decoder,
    headers_too_large,
    uri_too_long,
)
from headway.api.rendering import render, stream_head
from headway.api.sse import EventStream
from headway.api.turns import CATCH_UP_S
from headway.errors import HeadwayError

if TYPE_CHECKING:
    from headway.api.host import ConnectionHost

log = logging.getLogger("headway.http")

# Which part of a request a connection is reading (for the read timeouts).
_BETWEEN, _HEAD, _BODY = 0, 1, 2
#: The schemes of an absolute-form request target (RFC 9112 3.2.2).
_SCHEMES = (b"http", b"https")


class _Slot:
    """One request's place in its connection's answer order (pipelining)."""

    __slots__ = ("chunked", "close", "data", "stream")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.close = False
        #: A streamed answer (`api.sse`): `data` is its head, its events follow as they come.
        self.stream: EventStream | None = None
        self.chunked = False  # its events travel as chunks (else until the connection closes)


class _StreamSink:
    """Where an attached stream's events go: its connection, as the slot's body."""

    __slots__ = ("connection", "slot")

    def __init__(self, connection: HttpConnection, slot: _Slot) -> None:
        self.connection = connection
        self.slot = slot

    def send(self, data: bytes) -> None:
        self.connection.stream_send(self.slot, data)

    def end(self) -> None:
        self.connection.stream_end(self.slot)


class _Refused(Exception):
    """Raised in a parser callback once the request has been refused: stops the parse."""


class HttpConnection(asyncio.Protocol):
    """One client connection: parse requests, hand whole ones to the app, answer in order.

    Pipelined requests are answered in order; a client that does not read its answers stops being
    read (back-pressure). The limits of `api.limits` are checked where their bytes arrive, each
    with an integer comparison: a body over the limit (declared, received or decoded) is 413, a
    long URL 414, large headers 431 (before the parser buffers more than a read past the limit),
    more than a few empty lines between requests 400 (they are no activity: the keep-alive
    timer runs on), a request whose head or body does not arrive in time 408 (`time_out`, from
    the server's sweep), and a connection over the cap, when no idle one can be closed for it
    (`HttpServer.make_room`), is answered 503 and closed. Each refusal answers once, after the
    answers already due, and closes.

    A client that does not read its answers is closed, what it left unread dropped, when none
    of it has been taken for `--write-timeout`, or when it holds more than its share of unread
    answer bytes (UNREAD_PER_CONNECTION largest answers; `HttpServer.shed_unread` for the whole
    server's). Only a connection whose writes are paused (its unsent bytes past the transport's
    high-water mark) or whose answers wait behind an earlier one is counted: the usual answer,
    written whole at once, costs a flag's test.

    A streamed answer (an `api.sse.EventStream` body) is written as its events come, as
    chunks of a chunked body; the answers behind it wait for its end. A client that leaves
    more than `stream_buffer` bytes of it unsent, or takes none of them for `--write-timeout`,
    is cut off, and a stream that sends nothing for `stream_idle_timeout` is ended with an
    error event; either way, and when the client goes away, its request is withdrawn."""

    # slots: more attributes than an instance dict shares its keys for, and the fastest access
    __slots__ = (
        "_accepted", "_arrived", "_blank", "_body", "_counting", "_decoder", "_head_read",
        "_head_span", "_header_bytes", "_headers", "_held", "_length_digits", "_max_body",
        "_max_unread", "_merged", "_no_more", "_paused_reading", "_phase", "_phase_began",
        "_read_size", "_received", "_size", "_streamed_at", "_streaming", "_unsent",
        "_unsent_seen", "_url", "_write_paused", "_write_stamp", "app", "closing", "last_active",
        "loop", "parser", "pending", "server", "transport", "unread",
    )  # fmt: skip

    def __init__(self, server: ConnectionHost[HttpConnection]) -> None:
        self.server = server
        self.app = app = server.app
        self.loop = server.loop
        self._max_body = app.max_body_bytes
        self._length_digits = len(str(app.max_body_bytes))
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.pending: deque[_Slot] = deque()
        self.closing = False
        self.last_active = self._arrived = self._received = time.monotonic()
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._no_more = False  # a request closed the connection: ignore what follows
        self._paused_reading = False
        self._decoder: BodyDecoder | None = None  # the body's Content-Encoding, if any
        self._phase = _BETWEEN  # reading a request's head, its body, or between requests
        self._phase_began = 0.0  # when this phase's first bytes were read
        self._header_bytes = 0  # names and values of the headers parsed so far (if counted)
        self._head_read = 0  # bytes of the reads that a still unfinished head spans
        self._read_size = 0  # bytes of the read being parsed
        self._head_span = 0  # bytes of the reads this head began in and spans (a bound)
        self._counting = False  # whether the head may carry too many header bytes: count them
        self._merged = 0  # bytes a repeated header's merge left out of `_headers` (see on_header)
        self._accepted = True  # nothing read yet: the first bytes may have waited to be accepted
        self._blank = 0  # CR and LF bytes read since the last request began
        # what the client leaves unread (see the class docstring)
        self._max_unread = UNREAD_PER_CONNECTION * app.max_answer_bytes
        self._write_paused = False  # the transport's unsent bytes are past its high-water mark
        self._held = 0  # bytes of answers rendered behind an earlier one still due
        self._unsent = 0  # bytes the transport held unsent when last asked (while paused)
        self.unread = 0  # this connection's share of the server's `unread`
        self._write_stamp = 0.0  # when its unsent bytes last shrank (or began to be watched)
        self._unsent_seen = 0  # its unsent bytes at the last sweep
        self._streaming: _Slot | None = None  # the streamed answer being written, if any
        self._streamed_at = 0.0  # when it last sent an event

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        server = self.server
        server.accept_pending()
        if len(server.connections) >= server.max_connections and not server.make_room():
            self._no_more = self.closing = True  # read nothing
            turn_away(transport, self.loop, server.max_connections)  # type: ignore[arg-type]
            return
        server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        self._cancel_stream()
        self.transport = None
        self._held = self._unsent = 0
        if self.unread:
            self._count_unread()

    def data_received(self, data: bytes) -> None:
        if self._no_more:
            return
        phase = self._phase
        if data[0] <= 13 and phase == _BETWEEN:  # CR or LF where a request line is due?
            data = self._skip_blank(data)
            if not data:  # nothing else: no activity, the keep-alive timer runs on
                return
        self.last_active = now = time.monotonic()
        server = self.server  # `arrived_since` and `keep_up`, their common cases inlined:
        self._arrived = server.turn_floor if server.turn_open else server.arrived_since(now)
        if self._accepted:  # its first bytes: count their wait in the listen queue too
            self._accepted = False
            transport = self.transport
            waited = waited_in_kernel(transport.get_extra_info("socket") if transport else None)
            if waited:
                self._arrived = min(self._arrived, now - waited)
        if now - server.caught_up >= CATCH_UP_S:
            server.keep_up(now)
        if server.poller is not None:
            server.poller.arm()
        self._read_size = size = len(data)
        reading_head = phase == _HEAD
        if reading_head:
            self._head_span += size
            if not self._counting and self._head_span > MAX_HEADER_BYTES:
                self._count_headers()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(problem(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            if not self._no_more:  # not already refused by a callback (`_Refused`)
                self._refuse(problem(400, f"malformed HTTP request: {exc}"))
        else:
            if reading_head and self._phase == _HEAD:  # a head longer than this whole read
                self._head_read += size
                if self._head_read > MAX_URL_BYTES + MAX_HEADER_BYTES:
                    self._refuse(problem(431, headers_too_large(self._head_read)))

    def _skip_blank(self, data: bytes) -> bytes:
        """What follows the empty lines (CR, LF) that `data` begins with, where a request line
        is due; past MAX_BLANK_BYTES of them since the last request, b"" and a 400."""
        rest = data.lstrip(b"\r\n")
        self._blank += len(data) - len(rest)
        if self._blank > MAX_BLANK_BYTES:
            self._refuse(problem(400, f"more than {MAX_BLANK_BYTES} bytes of empty lines where "
                                 "a request line was due"))  # fmt: skip
            return b""
        return rest

    def pause_writing(self) -> None:
        """The client is not reading its answers as fast as they come: stop reading its
        requests, and watch what it leaves unsent (`_count_unsent`, `sweep`)."""
        self._pause_reading()
        self._write_paused = True
        self._write_stamp = time.monotonic()
        self._unsent_seen = 0

    def resume_writing(self) -> None:
        self._write_paused = False
        self._resume_reading()
        if self._unsent:
            self._unsent = 0
            self._count_unread()

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._received = self._arrived  # when its first bytes were read: its clock starts
        self._phase = _HEAD
        self._phase_began = self.last_active
        self._url = b""
        self._headers = {}
        self._body = []
        self._size = self._header_bytes = self._head_read = self._merged = self._blank = 0
        self._head_span = self._read_size  # the whole read: it holds this head's first bytes
        self._counting = self._head_span > MAX_HEADER_BYTES
        self._decoder = None

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_URL_BYTES:
            self._refuse(problem(414, uri_too_long(len(self._url))))
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        # Headers can only pass the limit in a head whose reads hold more bytes than it: the
        # usual head, read whole in one small read, is not counted header by header.
        if self._counting:
            self._header_bytes += len(name) + len(value)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refuse(problem(431, headers_too_large(self._header_bytes)))
                raise _Refused
        name = name.lower()
        previous = self._headers.get(name)
        if previous is None:
            self._headers[name] = value
        else:
            self._headers[name] = previous + b", " + value
            self._merged += len(name) - 2  # its name again, less the ", " the merge added

    def _count_headers(self) -> None:
        """Start counting header bytes in a head that now spans more than the limit: those
        parsed so far, exactly, from what `on_header` kept."""
        self._counting = True
        self._header_bytes = self._merged + sum(len(n) + len(v) for n, v in self._headers.items())

    def on_headers_complete(self) -> None:
        self._phase = _BODY
        self._phase_began = self.last_active
        if self._no_more:
            return
        declared = self._headers.get(b"content-length")
        try:  # a length of fewer digits than the limit's is within it: not asked
            if declared is not None and len(declared) >= self._length_digits:
                self.app.check_length(declared)
            encoding = self._headers.get(b"content-encoding")
            if encoding is not None:
                self._decoder = body_decoder(encoding, self.app.max_body_bytes)
        except HeadwayError as exc:  # answered before the body is read, then closed
            self._refuse(error_response(exc))
            return
        expect = self._headers.get(b"expect")
        if expect is not None and expect.lower() == b"100-continue" and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, chunk: bytes) -> None:
        if self._no_more:
            return
        self._size += len(chunk)
        try:
            if self._size > self._max_body:
                self.app.check_size(self._size)
            if self._decoder is not None:
                chunk = self._decoder.feed(chunk)
        except HeadwayError as exc:  # a body that outgrew the limit, sent or decoded
            self._body = []
            self._refuse(error_response(exc))
            return
        self._body.append(chunk)

    def on_message_complete(self) -> None:
        self._phase = _BETWEEN
        if self._no_more:
            return
        if self._decoder is not None:
            try:
                self._decoder.finish()
            except HeadwayError as exc:
                self._refuse(error_response(exc))
                return
        parser = self.parser
        keep_alive = parser.should_keep_alive() and not self.server.stopping
        # HTTP/1.0 matters to a kept connection alone, which it keeps only when asked to in a
        # Connection header; without one the version is not looked up (a string made per call)
        http10 = (
            keep_alive and b"connection" in self._headers and parser.get_http_version() == "1.0"
        )
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        url = self._url
        if url[0] != 47:  # not "/...": an absolute-form target (or asterisk-form)
            origin = self._origin_form(url)
            if origin is None:
                return
            url = origin
        refusals = self.server.refusals
        if refusals is not None and not self.pending:
            waited = self.last_active - self._received
            # a server that keeps up asks nothing more (`Controller.may_refuse`)
            if refusals.controller.may_refuse(waited) and parser.get_method() == b"POST":
                data = refusals.answer(url, self._headers, body, waited, keep_alive, http10)
                if data is not None:  # overload's shortcut: its answer, rendered once
                    self._refuse_quickly(data, keep_alive)
                    return
        slot = _Slot()
        self.pending.append(slot)
        method = parser.get_method().decode()
        query = url.find(b"?")
        path = (url if query < 0 else url[:query]).decode("latin-1")  # as sent: `api.paths`
        headers = self._headers
        if not keep_alive:
            self._stop_reading()
        self.server.unanswered += 1
        reply = partial(self._reply, slot, keep_alive, http10)
        try:
            self.app.respond(method, path, headers, body, reply, self._received)
        except Exception as exc:  # `respond` never raises; this is a bug, not the client's
            log.error("request handler failed", exc_info=exc)
            reply(problem(500, f"internal error: {type(exc).__name__}: {exc}"))

    def _origin_form(self, url: bytes) -> bytes | None:
        """An absolute-form target (`http://host:port/path?query`) as its path and query: a
        server must accept it, and take its authority for the Host (RFC 9112 3.2.2). None
        once refused (400): an empty authority, or one with userinfo (RFC 9110 4.2.1, 4.2.4).
        Any other target not beginning with "/" is left as it is, and matches no route."""
        scheme, sep, rest = url.partition(b"://")
        if not sep or scheme.lower() not in _SCHEMES:
            return url
        end = len(rest)
        for mark in (b"/", b"?"):
            at = rest.find(mark)
            if 0 <= at < end:
                end = at
        authority = rest[:end]
        if not authority or b"@" in authority:
            self._refuse(problem(400, "an absolute-form request target needs a host and no "
                                 "userinfo (RFC 9110 4.2)"))  # fmt: skip
            return None
        self._headers[b"host"] = authority
        target = rest[end:]
        return target if target[:1] == b"/" else b"/" + target

    # -- answering -------------------------------------------------------------------------
    def _refuse_quickly(self, data: bytes, keep_alive: bool) -> None:
        """An infer request refused before routing (`api.refusals`): its answer's bytes,
        written at once (nothing is pending before it)."""
        transport = self.transport
        if transport is None or self.closing:
            return
        transport.write(data)
        if not keep_alive:
            self._stop_reading()
            self._linger(transport)

    def _reply(self, slot: _Slot, keep_alive: bool, http10: bool, response: Response) -> None:
        """The app's answer to the request in `slot` (ignored if the slot was given up on)."""
        if slot.data is not None:
            return
        self.server.unanswered -= 1
        if type(response[1]) is EventStream:
            self._stream(slot, response, keep_alive and not self.server.stopping, http10)
            return
        self._finish(slot, response, keep_alive and not self.server.stopping, http10)

    def give_up(self) -> None:
        """The server is stopping: answer what is still unanswered with 503, then close."""
        for slot in list(self.pending):
            if slot.data is None:
                self.server.unanswered -= 1
                self._finish(slot, problem(503, "the server is stopping"), False, False)
        self.close()

    def _finish(self, slot: _Slot, response: Response, keep_alive: bool, http10: bool) -> None:
        slot.data = data = render(response, keep_alive, http10)
        slot.close = not keep_alive
        pending = self.pending
        if pending[0] is not slot:  # an earlier answer is still due (pipelining): held till then
            if not self.closing:  # (once closing, it will not be written: not counted)
                self._held += len(data)
                self._count_unread()
            return
        pending.popleft()
        transport = self.transport
        if transport is not None and not self.closing:
            transport.write(data)
            if self._write_paused:  # this write or an earlier one left bytes unsent
                self._count_unsent(transport)  # (which may drop the connection)
            if slot.close and not self.closing:
                self._linger(transport)
        if self._held:  # answers rendered behind this one: due now too
            self._write_held(transport)
        self.last_active = time.monotonic()
        if self.server.poller is not None:  # the client's next request comes soon
            self.server.poller.arm()

    def _refuse(self, response: Response) -> None:
        """Malformed input: answer once, after what is already pending, then close."""
        slot = _Slot()
        self.pending.append(slot)
        self._stop_reading()
        self._finish(slot, response, False, False)

    def _write_held(self, transport: asyncio.Transport | None) -> None:
        """Write the answers rendered behind one just written, up to the next still due (or
        up to a streamed answer, which begins)."""
        pending = self.pending
        while pending and pending[0].data is not None:
            if pending[0].stream is not None:
                self._start_stream(pending[0])
                break
            done = pending.popleft()
            self._held -= len(done.data)  # type: ignore[arg-type]
            if transport is not None and not self.closing:
                transport.write(done.data)  # type: ignore[arg-type]
                if done.close:
                    self._linger(transport)
        if self.closing:  # what is not written any more is not counted any more
            self._held = 0
        elif self._write_paused and transport is not None:
            self._count_unsent(transport)
        else:
            self._count_unread()

    # -- streamed answers (`api.sse`) --------------------------------------------------------
    def _stream(self, slot: _Slot, response: Response, keep_alive: bool, http10: bool) -> None:
        """A streamed answer: its head now (or once the answers before it are written), its
        events as they come. Chunked on a kept connection; else (HTTP/1.0) its body runs to
        the connection's close."""
        status, body, headers = response
        slot.stream = body  # type: ignore[assignment]  # an EventStream (`_reply`)
        slot.chunked = keep_alive and not http10
        slot.close = not slot.chunked
        slot.data = stream_head(status, headers, slot.chunked)
        if self.pending[0] is slot:
            self._start_stream(slot)

    def _start_stream(self, slot: _Slot) -> None:
        stream = slot.stream
        assert stream is not None and slot.data is not None
        self._streaming = slot
        self._streamed_at = time.monotonic()
        transport = self.transport
        if transport is None or self.closing:
            stream.cancel()
            return
        transport.write(slot.data)
        stream.attach(_StreamSink(self, slot))

    def stream_send(self, slot: _Slot, data: bytes) -> None:
        """Events of the streamed answer being written (`_StreamSink`)."""
        transport = self.transport
        if transport is None or self.closing or slot is not self._streaming:
            return
        self._streamed_at = time.monotonic()
        transport.write(b"%x\r\n%s\r\n" % (len(data), data) if slot.chunked else data)
        if self._write_paused:  # the client reads slower than the events come
            unsent = transport.get_write_buffer_size()
            limit = self.server.stream_buffer
            if unsent > limit:
                self.drop(f"it left {unsent} bytes of a streamed answer unread, more than a "
                          f"stream may hold ({limit})")  # fmt: skip
                return
            self._count_unsent(transport)

    def stream_end(self, slot: _Slot) -> None:
        """The streamed answer's last event was sent: end its body, on to the next answer."""
        if slot is not self._streaming:
            return
        self._streaming = None
        pending = self.pending
        if pending and pending[0] is slot:
            pending.popleft()
        transport = self.transport
        if transport is not None and not self.closing:
            if slot.chunked:
                transport.write(b"0\r\n\r\n")
            if slot.close:
                self._linger(transport)
        self._write_held(transport)
        self.last_active = time.monotonic()

    def _cancel_stream(self) -> None:
        """The client is gone or cut off: the streamed answer stops, its request withdrawn."""
        slot = self._streaming
        if slot is not None:
            self._streaming = None
            if slot.stream is not None:
                slot.stream.cancel()
        for waiting in self.pending:  # streamed answers that had not begun
            if waiting.stream is not None:
                waiting.stream.cancel()

    # -- unread answers --------------------------------------------------------------------
    def _count_unsent(self, transport: asyncio.Transport) -> None:
        self._unsent = transport.get_write_buffer_size()
        self._count_unread()

    def _count_unread(self) -> None:
        """Bring the server's count of unread answer bytes up to date with this connection's;
        past the connection's bound it is dropped, past the server's the connections that
        hold the most are (`HttpServer.shed_unread`)."""
        unread = self._held + (self._unsent if self._write_paused else 0)
        server = self.server
        server.unread += unread - self.unread
        self.unread = unread
        if unread > self._max_unread:
            self.drop(f"it left {unread} bytes of answers unread, more than a connection may "
                      f"hold ({self._max_unread}: {UNREAD_PER_CONNECTION}x --max-answer-mb)")  # fmt: skip
        elif server.unread > server.max_unread:
            server.shed_unread()

    def drop(self, why: str) -> None:
        """Close at once, dropping what the client has not read (its answers, unsent)."""
        log.info("closing a connection that does not read its answers: %s", why)
        self.closing = self._no_more = True
        self._cancel_stream()
        self._held = self._unsent = 0
        self._count_unread()
        transport, self.transport = self.transport, None  # nothing more is written, or watched
        if transport is not None:
            transport.abort()

    # -- flow control ----------------------------------------------------------------------
    def _stop_reading(self) -> None:
        self._no_more = True
        self._pause_reading()

    def _pause_reading(self) -> None:
        if not self._paused_reading and self.transport is not None:
            self._paused_reading = True
            with contextlib.suppress(RuntimeError):
                self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._paused_reading and self.transport is not None and not self.closing:
            self._paused_reading = False
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()

    def sweep(self, now: float) -> None:
        """The server's sweep: close the connection once idle past the keep-alive, time out a
        request that is not arriving (`time_out`), and drop a client that takes none of its
        unsent answers for `--write-timeout` (its connection may be closing: a transport
        closes only once what was written to it has been sent). A streamed answer that sent
        nothing for the stream idle timeout is ended with an error event."""
        streaming = self._streaming
        if streaming is not None and now - self._streamed_at > self.server.stream_idle_timeout:
            assert streaming.stream is not None
            streaming.stream.abandon(f"the stream sent nothing for "
                                     f"{self.server.stream_idle_timeout:g} s (--stream-idle-timeout)")  # fmt: skip
        if self._write_paused or self.closing:
            self._watch_writes(now)
        elif self.idle and now - self.last_active > self.server.keep_alive:
            self.close()
        else:
            self.time_out(now)

    def _watch_writes(self, now: float) -> None:
        transport = self.transport
        if transport is None:
            return
        unsent = transport.get_write_buffer_size()
        if not unsent or unsent < self._unsent_seen:  # the client took some
            self._write_stamp = now
        elif now - self._write_stamp > self.server.write_timeout:
            self.drop(f"none of its {unsent} unsent bytes were taken within "
                      f"{self.server.write_timeout:g} s (--write-timeout)")  # fmt: skip
            return
        self._unsent_seen = unsent
        if self._write_paused and unsent != self._unsent:
            self._unsent = unsent
            self._count_unread()

    def time_out(self, now: float) -> None:
        """Close a connection whose request is not arriving in time (408), unless it is not
        being read because its client does not read its answers."""
        if self._phase == _BETWEEN or self._paused_reading or self._no_more:
            return
        server = self.server
        if self._phase == _HEAD:
            if now - self._phase_began > server.header_timeout:
                self._refuse(problem(408, "the request head did not arrive within "
                                     f"{server.header_timeout:g} s (--header-timeout)"))  # fmt: skip
        elif now - self._phase_began > server.body_timeout:
            self._refuse(problem(408, "the request body did not arrive within "
                                 f"{server.body_timeout:g} s of its head (--body-timeout)"))  # fmt: skip

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close after the last answer (`closing.linger`)."""
        self.closing = True
        self._no_more = True
        self._write_stamp = time.monotonic()  # its unsent bytes are watched from now
        if linger(transport, self.loop, self._paused_reading):
            self._paused_reading = False

    @property
    def idle(self) -> bool:
        """Waiting for a request with nothing due: no answer pending or left unsent past the
        high-water mark, no request begun (one whose head is arriving is guarded by its
        header timeout, not the keep-alive)."""
        return (
            not self.pending
            and self._phase == _BETWEEN
            and not self._write_paused
            and not self.closing
        )

    @property
    def proven(self) -> bool:
        """It has sent a request's bytes (blank lines do not count): `closing.reclaim` closes
        the sockets that only hold a place first."""
        return not self._accepted

    @property
    def reclaimable(self) -> bool:
        """Idle with nothing unsent: closing it to make room loses nothing (`closing.reclaim`)."""
        transport = self.transport
        return self.idle and transport is not None and not transport.get_write_buffer_size()

    def close(self) -> None:
        if self.transport is not None and not self.closing:
            self.closing = True
            self._write_stamp = time.monotonic()
            self.transport.close()
