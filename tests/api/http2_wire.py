"""A gRPC client's side of the HTTP/2 connection tests (`test_http2`, `test_http2_bounds`,
`test_http2_fuzz`, `test_grpc_dispatch`): the request headers of a ModelInfer call, the
connection's transport (`Wire`) and its server, a handler (`Echo`) and a client (`Peer`)."""

from __future__ import annotations

from typing import Any

import hpack

from headway.api.grpc import frames as f
from headway.api.grpc.bidi import StreamCall
from headway.api.grpc.calls import Call, Limits
from headway.api.grpc.connections import Connections
from headway.api.grpc.http2 import Http2Connection

PATH = b"/inference.GRPCInferenceService/ModelInfer"
STREAM_PATH = b"/inference.GRPCInferenceService/ModelStreamInfer"
HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", PATH),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]


class Wire:
    """The connection's transport: what it writes, and whether it closed (its writing side:
    `write_eof`, or all of it), or was aborted (dropped with what it had not sent)."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def get_extra_info(self, name: str) -> None:
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Server:
    def __init__(self) -> None:
        self.connections: Connections[Http2Connection] = Connections()
        self.unanswered = 0
        self.buffered = 0
        self.turns = 0
        self.floor: float | None = None  # when bytes read now may have arrived

    def accept_pending(self) -> None:
        pass  # nothing listens

    def arrived_since(self, now: float) -> float:
        return now if self.floor is None else self.floor

    def keep_up(self, now: float) -> None:
        self.turns += 1


class Echo:
    """Answers each call with its own message, unless told to hold the calls; a streaming
    call (`STREAM_PATH`) is an `EchoStream`."""

    def __init__(self, hold: bool = False) -> None:
        self.calls: list[Call] = []
        self.hold = hold
        self.sessions: list[EchoStream] = []

    def accepts(self, path: str) -> bool:
        return path in (PATH.decode(), STREAM_PATH.decode())

    def streams(self, path: str) -> bool:
        return path == STREAM_PATH.decode()

    def call(self, call: Call) -> None:
        self.calls.append(call)
        if not self.hold:
            call.answer(call.message)

    def open(self, call: StreamCall) -> EchoStream:
        session = EchoStream(call, self.hold)
        self.sessions.append(session)
        return session


class EchoStream:
    """A streaming call that answers each request message with itself twice (two parts),
    taking a slot per request; held ones wait for `answer_held`."""

    def __init__(self, call: StreamCall, hold: bool) -> None:
        self.call = call
        self.hold = hold
        self.messages: list[bytes] = []
        self.held: list[bytes] = []
        self.refused = 0
        self.closed = self.cancelled_ = False

    def message(self, data: bytes) -> None:
        self.messages.append(data)
        if not self.call.take():
            self.refused += 1
            self.call.send(b"refused:" + data)
            return
        if self.hold:
            self.held.append(data)
            return
        self.call.send(data)
        self.call.send(data)
        self.call.release()

    def answer_held(self) -> None:
        for data in self.held:
            self.call.send(data)
            self.call.release()
        self.held = []
        if self.closed:
            self.call.finish()

    def half_closed(self) -> None:
        self.closed = True
        if not self.held:
            self.call.finish()

    def cancelled(self) -> None:
        self.cancelled_ = True
        for _ in self.held:
            self.call.release()
        self.held = []


class Peer:
    """A client: its own HPACK state, frames to send, the server's frames read back."""

    def __init__(
        self,
        limits: Limits | None = None,
        hold: bool = False,
        window: int = 0,
        server: Server | None = None,
    ) -> None:
        self.server = server or Server()
        self.handler = Echo(hold)
        self.wire = Wire()
        self.connection = Http2Connection(self.handler, limits or Limits(), self.server)
        self.connection.connection_made(self.wire)  # type: ignore[arg-type]
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.read = 0
        own = {f.INITIAL_WINDOW_SIZE: window} if window else {}
        self.send(f.PREFACE + f.settings(own))

    def send(self, data: bytes) -> None:
        self.connection.data_received(data)

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        """The frames written since the last look: (type, flags, stream, payload)."""
        data, out = bytes(self.wire.written), []
        at = self.read
        while len(data) - at >= 9:
            length, kind, flags, stream = f.frame_head(data, at)
            out.append((kind, flags, stream, data[at + 9 : at + 9 + length]))
            at += 9 + length
        self.read = at
        return out

    def headers(self, payload: bytes) -> dict[bytes, bytes]:
        return dict(self.decoder.decode(payload, raw=True))

    def request(self, stream: int, message: bytes, extra: list[Any] | None = None) -> bytes:
        block = self.encoder.encode(HEADERS + (extra or []))
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        return f.frame(f.HEADERS, f.END_HEADERS, stream, block) + f.frame(
            f.DATA, f.END_STREAM, stream, body
        )


def status_of(peer: Peer, frames: list[tuple[int, int, int, bytes]], stream: int) -> bytes:
    heads = [p for kind, _, s, p in frames if kind == f.HEADERS and s == stream]
    return peer.headers(heads[-1]).get(b"grpc-status", b"")


def kinds(frames: list[tuple[int, int, int, bytes]]) -> list[int]:
    return [kind for kind, *_ in frames]


def goaway_code(peer: Peer) -> int:
    frames = peer.frames()
    assert frames[-1][0] == f.GOAWAY and peer.wire.closed
    return int.from_bytes(frames[-1][3][4:8], "big")


def trailers(wire: Wire) -> dict[int, dict[bytes, bytes]]:
    """Each stream's status block (the headers with its `grpc-status`) from what the server
    wrote."""
    data, at, decoder, out = bytes(wire.written), 0, hpack.Decoder(), {}
    while len(data) - at >= 9:
        length, kind, _, stream = f.frame_head(data, at)
        if kind == f.HEADERS:
            headers = dict(decoder.decode(data[at + 9 : at + 9 + length], raw=True))
            if b"grpc-status" in headers:
                out[stream] = headers
        at += 9 + length
    return out


def statuses(wire: Wire) -> dict[int, tuple[bytes, bytes]]:
    """Each stream's (grpc-status, grpc-message) from what the server wrote."""
    return {
        stream: (headers[b"grpc-status"], headers.get(b"grpc-message", b""))
        for stream, headers in trailers(wire).items()
    }
