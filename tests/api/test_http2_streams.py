"""A streaming call (`ModelStreamInfer`) on the own HTTP/2 path (`api.grpc.bidi`): request
messages split and joined across DATA frames, responses then one status, the slots its
requests take, and every way it ends (half-close, reset, a lost connection, its deadline, an
idle stream, a message over the limit, a client that stops reading)."""

from __future__ import annotations

from tests.api.http2_wire import HEADERS, STREAM_PATH, Peer, status_of

from headway.api.grpc import frames as f
from headway.api.grpc.calls import DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, Limits

STREAM_HEADERS = [(n, STREAM_PATH if n == b":path" else v) for n, v in HEADERS]


def open_stream(
    peer: Peer, stream: int = 1, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    block = peer.encoder.encode(STREAM_HEADERS + (extra or []))
    peer.send(f.frame(f.HEADERS, f.END_HEADERS, stream, block))


def framed(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def data(stream: int, payload: bytes, end: bool = False) -> bytes:
    return f.frame(f.DATA, f.END_STREAM if end else 0, stream, payload)


def responses(frames: list[tuple[int, int, int, bytes]], stream: int = 1) -> list[bytes]:
    """The response messages in the DATA of `stream`."""
    joined = b"".join(p for kind, _, s, p in frames if kind == f.DATA and s == stream)
    out, at = [], 0
    while at < len(joined):
        length = int.from_bytes(joined[at + 1 : at + 5], "big")
        out.append(joined[at + 5 : at + 5 + length])
        at += 5 + length
    return out


def test_messages_split_and_joined_across_frames_each_reach_the_session_at_once() -> None:
    peer = Peer()
    peer.frames()
    open_stream(peer)
    session = peer.handler.sessions[0]
    first, second, third = framed(b"a" * 10), framed(b"b"), framed(b"c" * 3)
    peer.send(data(1, first[:3]))  # not even its length yet
    peer.send(data(1, first[3:8]))
    assert session.messages == []
    peer.send(data(1, first[8:] + second + third[:4]))
    assert session.messages == [b"a" * 10, b"b"]
    peer.send(data(1, third[4:]))
    assert session.messages == [b"a" * 10, b"b", b"c" * 3]
    frames = peer.frames()
    heads = [flags for kind, flags, s, _ in frames if kind == f.HEADERS and s == 1]
    assert heads == [f.END_HEADERS]  # the response headers, once; no status yet
    assert responses(frames) == [b"a" * 10, b"a" * 10, b"b", b"b", b"c" * 3, b"c" * 3]
    assert peer.server.buffered == 0 and peer.connection.calls.buffered == 0
    peer.send(data(1, b"", end=True))  # the client's last request: the call ends OK
    frames = peer.frames()
    assert status_of(peer, frames, 1) == b"0" and frames[-1][1] & f.END_STREAM
    assert not peer.connection.streams and peer.server.unanswered == 0


def test_a_call_ends_only_once_its_requests_in_flight_are_answered() -> None:
    peer = Peer(hold=True)
    open_stream(peer)
    session = peer.handler.sessions[0]
    peer.send(data(1, framed(b"x") + framed(b"y"), end=True))
    peer.frames()
    assert peer.connection.streams and peer.server.unanswered == 1
    session.answer_held()
    frames = peer.frames()
    assert responses(frames) == [b"x", b"y"] and status_of(peer, frames, 1) == b"0"
    assert peer.connection.calls.room == Limits().max_streams


def test_requests_in_flight_take_the_connections_call_slots() -> None:
    peer = Peer(Limits(max_streams=3), hold=True)
    open_stream(peer)
    session = peer.handler.sessions[0]
    peer.send(data(1, framed(b"1") + framed(b"2") + framed(b"3")))
    assert session.held == [b"1", b"2"] and session.refused == 1  # the stream holds a slot
    peer.frames()
    peer.send(peer.request(3, b"unary"))  # no slot left for a call either
    assert peer.frames() == [(f.RST_STREAM, 0, 3, f.REFUSED_STREAM.to_bytes(4, "big"))]
    session.answer_held()
    peer.send(peer.request(5, b"unary"))
    assert [c.message for c in peer.handler.calls] == [b"unary"]


def test_a_reset_cancels_the_stream_and_frees_its_slots_at_once() -> None:
    peer = Peer(Limits(max_streams=3), hold=True)
    open_stream(peer)
    session = peer.handler.sessions[0]
    peer.send(data(1, framed(b"1") + framed(b"2")))
    peer.send(f.rst_stream(1, f.CANCEL))
    assert session.cancelled_ and peer.server.unanswered == 0
    assert peer.connection.calls.room == 3 and not peer.connection.streams
    peer.frames()
    open_stream(peer, 3)
    peer.send(data(3, framed(b"3")))
    assert peer.handler.sessions[1].held == [b"3"]


def test_a_lost_connection_cancels_its_streams() -> None:
    peer = Peer(hold=True)
    open_stream(peer)
    peer.send(data(1, framed(b"1")))
    peer.connection.connection_lost(None)
    assert peer.handler.sessions[0].cancelled_ and peer.server.unanswered == 0


def test_a_message_over_the_limit_ends_the_stream_before_it_arrives() -> None:
    peer = Peer(Limits(max_message=100), hold=True)
    open_stream(peer)
    peer.frames()
    peer.send(data(1, b"\x00" + (101).to_bytes(4, "big") + b"x" * 10))
    frames = peer.frames()
    assert status_of(peer, frames, 1) == str(RESOURCE_EXHAUSTED).encode()
    assert peer.handler.sessions[0].cancelled_ and peer.server.unanswered == 0
    assert frames[-1] == (f.RST_STREAM, 0, 1, b"\x00\x00\x00\x00")  # stop sending


def test_a_message_still_arriving_counts_against_the_request_buffers() -> None:
    limits = Limits(connection_buffer=1000)
    peer = Peer(limits, hold=True)
    open_stream(peer)
    peer.frames()
    head = b"\x00" + (5000).to_bytes(4, "big")
    peer.send(data(1, head + b"x" * 500))
    assert peer.server.buffered > 500
    peer.send(data(1, b"x" * 600))
    assert status_of(peer, peer.frames(), 1) == str(RESOURCE_EXHAUSTED).encode()
    assert peer.server.buffered == 0 and peer.handler.sessions[0].cancelled_


def test_an_idle_stream_and_one_past_its_deadline_end_deadline_exceeded() -> None:
    peer = Peer(Limits(stream_idle_timeout=30.0), hold=True)
    open_stream(peer, 1)
    open_stream(peer, 3, [(b"grpc-timeout", b"5S")])
    peer.send(data(1, framed(b"busy")))
    peer.frames()
    stream1, stream3 = (peer.connection.streams[i] for i in (1, 3))
    peer.connection.calls.sweep(stream3.opened + 6)
    assert status_of(peer, peer.frames(), 3) == str(DEADLINE_EXCEEDED).encode()
    assert peer.handler.sessions[1].cancelled_ and 1 in peer.connection.streams
    peer.connection.calls.sweep(stream1.active + 29)
    assert 1 in peer.connection.streams
    peer.connection.calls.sweep(stream1.active + 31)
    assert status_of(peer, peer.frames(), 1) == str(DEADLINE_EXCEEDED).encode()
    assert peer.handler.sessions[0].cancelled_ and peer.server.unanswered == 0


def test_responses_beyond_the_window_wait_and_the_status_follows_them() -> None:
    peer = Peer(window=8)
    open_stream(peer)
    peer.frames()
    peer.send(data(1, framed(b"abcdef"), end=True))  # two responses of 11 bytes each
    frames = peer.frames()
    assert sum(len(p) for kind, _, _, p in frames if kind == f.DATA) == 8
    assert status_of(peer, frames, 1) == b""  # the status waits behind them
    peer.send(f.frame(f.WINDOW_UPDATE, 0, 1, (100).to_bytes(4, "big")))
    frames = peer.frames()
    assert status_of(peer, frames, 1) == b"0"
    assert peer.connection.calls.unsent == 0 and not peer.connection.streams


def test_responses_a_client_leaves_waiting_past_the_answer_buffer_reset_the_stream() -> None:
    peer = Peer(Limits(answer_buffer=50), window=1, hold=True)
    open_stream(peer)
    session = peer.handler.sessions[0]
    peer.send(data(1, framed(b"a" * 20) + framed(b"b" * 20) + framed(b"c" * 20)))
    peer.frames()
    session.answer_held()
    assert peer.frames()[-1] == (f.RST_STREAM, 0, 1, f.ENHANCE_YOUR_CALM.to_bytes(4, "big"))
    assert session.cancelled_ and peer.connection.calls.unsent == 0
    assert not peer.connection.streams and peer.server.unanswered == 0
