"""The HTTP/2 path for unary gRPC (`api.grpc.http2`, `api.grpc.frames`), byte by byte.

A connection is fed a client's bytes and what it writes is read back as frames, as a peer
would read them: calls, flow control both ways, limits, and bad input answered with GOAWAY
or RST_STREAM, never an exception.
"""

from __future__ import annotations

import gzip
import time
import zlib

import hpack
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.api.http2_wire import (
    HEADERS,
    PATH,
    Echo,
    Peer,
    Server,
    Wire,
    goaway_code,
    kinds,
    status_of,
)

from headway.api.grpc import frames as f
from headway.api.grpc.calls import Limits
from headway.api.grpc.http2 import Http2Connection


def test_the_preface_is_answered_with_settings_and_a_wider_window_then_acked() -> None:
    peer = Peer()
    frames = peer.frames()
    assert kinds(frames) == [f.SETTINGS, f.WINDOW_UPDATE, f.SETTINGS]
    assert frames[2][1] == f.ACK
    own = dict(f.parse_settings(frames[0][3]))
    assert own[f.MAX_CONCURRENT_STREAMS] == 100 and own[f.ENABLE_PUSH] == 0
    peer.send(f.frame(f.PING, 0, 0, b"12345678"))
    assert peer.frames() == [(f.PING, f.ACK, 0, b"12345678")]


def test_a_unary_call_is_answered_with_headers_message_and_trailers() -> None:
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1, b"hello", [(b"grpc-timeout", b"250m")]))
    (call,) = peer.handler.calls
    assert call.path == PATH.decode() and call.timeout == 0.25
    assert call.metadata(b"te") == b"trailers"
    frames = peer.frames()
    assert kinds(frames) == [f.HEADERS, f.DATA, f.HEADERS]
    assert peer.headers(frames[0][3]) == {
        b":status": b"200",
        b"content-type": b"application/grpc",
        b"grpc-accept-encoding": b"identity,deflate,gzip",
    }
    assert frames[1][3] == b"\x00\x00\x00\x00\x05hello"
    assert frames[2][1] & f.END_STREAM and peer.headers(frames[2][3]) == {b"grpc-status": b"0"}
    assert peer.server.unanswered == 0 and not peer.connection.streams


def test_calls_read_together_reach_the_handler_in_one_read() -> None:
    peer = Peer(hold=True)
    peer.send(b"".join(peer.request(s, b"x%d" % s) for s in range(1, 64, 2)))
    assert [c.message for c in peer.handler.calls] == [b"x%d" % s for s in range(1, 64, 2)]
    assert peer.server.unanswered == 32
    for call in reversed(peer.handler.calls):  # answers may leave in any order
        call.answer(call.message)
    assert peer.server.unanswered == 0
    trailers = [s for kind, fl, s, _ in peer.frames() if kind == f.HEADERS and fl & f.END_STREAM]
    assert trailers == list(range(63, 0, -2))


def test_a_request_split_over_many_reads_and_frames_is_reassembled() -> None:
    peer = Peer()
    block = peer.encoder.encode(HEADERS)
    message = b"m" * 40_000
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    data = f.frame(f.HEADERS, 0, 1, block[:10]) + f.frame(
        f.CONTINUATION, f.END_HEADERS, 1, block[10:]
    )
    pieces = [body[i : i + 16_384] for i in range(0, len(body), 16_384)]
    for i, piece in enumerate(pieces):
        data += f.frame(f.DATA, f.END_STREAM if i == len(pieces) - 1 else 0, 1, piece)
    for i in range(0, len(data), 7):
        peer.send(data[i : i + 7])
    assert [c.message for c in peer.handler.calls] == [message]


def test_decoded_header_blocks_are_cached_until_the_table_changes() -> None:
    decoder = f.HeaderDecoder(65_536)
    encoder = hpack.Encoder()
    first = encoder.encode(HEADERS)  # inserts into the dynamic table
    assert decoder.decode(first) == HEADERS
    assert decoder.generation == 1
    again = encoder.encode(HEADERS)  # only references now: same bytes every time
    assert again == encoder.encode(HEADERS)
    assert decoder.decode(again) == HEADERS
    assert decoder.decode(again) is decoder.decode(again)  # cached
    # a new entry shifts every dynamic index: the same bytes now mean other headers
    changed = encoder.encode([(b"x-new", b"1")])
    assert decoder.decode(changed) == [(b"x-new", b"1")]
    assert decoder.generation == 2
    shifted = encoder.encode(HEADERS)
    assert shifted != again
    assert decoder.decode(shifted) == HEADERS
    stale = decoder.decode(again)  # decoded afresh against the new table, not from cache
    assert stale != HEADERS


def test_the_answer_waits_for_the_peers_window_and_splits_by_it() -> None:
    peer = Peer(window=10)
    peer.frames()
    peer.send(peer.request(1, b"abcdefghijklmnopqrstuvwxyz"))  # 31 bytes with its prefix
    frames = peer.frames()
    assert kinds(frames) == [f.HEADERS, f.DATA]
    assert len(frames[1][3]) == 10 and 1 in peer.connection.streams
    peer.send(f.window_update(1, 15))
    assert [(k, len(p)) for k, _, _, p in peer.frames()] == [(f.DATA, 15)]
    peer.send(f.window_update(1, 100))
    frames = peer.frames()
    assert [(k, len(p)) for k, _, _, p in frames[:1]] == [(f.DATA, 6)]
    assert frames[1][0] == f.HEADERS and frames[1][1] & f.END_STREAM
    assert not peer.connection.streams


def test_read_data_is_credited_back_and_data_beyond_the_window_is_refused() -> None:
    limits = Limits(stream_window=100, connection_window=65_535)
    peer = Peer(limits, hold=True)
    peer.frames()
    peer.send(f.frame(f.HEADERS, f.END_HEADERS, 1, peer.encoder.encode(HEADERS)))
    peer.send(f.frame(f.DATA, 0, 1, b"\x00\x00\x00\x00\x78" + b"a" * 50))
    assert peer.frames() == [(f.WINDOW_UPDATE, 0, 1, (55).to_bytes(4, "big"))]
    peer.send(f.frame(f.DATA, 0, 1, b"a" * 101))  # past the stream's window
    assert peer.frames() == [(f.RST_STREAM, 0, 1, f.FLOW_CONTROL_ERROR.to_bytes(4, "big"))]
    assert not peer.connection.streams


def test_a_settings_change_of_the_initial_window_moves_open_streams() -> None:
    peer = Peer(window=5, hold=True)
    peer.send(peer.request(1, b"0123456789"))
    peer.send(f.settings({f.INITIAL_WINDOW_SIZE: 100}))
    peer.frames()
    peer.handler.calls[0].answer(b"0123456789")
    assert kinds(peer.frames()) == [f.HEADERS, f.DATA, f.HEADERS]


def test_streams_beyond_the_limit_are_refused() -> None:
    peer = Peer(Limits(max_streams=2), hold=True)
    peer.frames()
    peer.send(b"".join(peer.request(s, b"x") for s in (1, 3, 5)))
    assert len(peer.handler.calls) == 2
    assert peer.frames() == [(f.RST_STREAM, 0, 5, f.REFUSED_STREAM.to_bytes(4, "big"))]


def test_a_message_over_the_limit_ends_the_call_resource_exhausted() -> None:
    peer = Peer(Limits(max_message=10))
    peer.frames()
    peer.send(f.frame(f.HEADERS, f.END_HEADERS, 1, peer.encoder.encode(HEADERS)))
    peer.send(f.frame(f.DATA, 0, 1, b"\x00\x00\x00\x00\x20" + b"a" * 11))
    frames = peer.frames()
    assert status_of(peer, frames, 1) == b"8"
    message = peer.headers(frames[0][3])[b"grpc-message"]
    assert b"exceeds the limit of 10 bytes" in message
    assert frames[-1] == (f.RST_STREAM, 0, 1, b"\x00\x00\x00\x00")
    peer.send(f.frame(f.DATA, f.END_STREAM, 1, b"a" * 21))  # the rest: ignored
    assert peer.handler.calls == [] and not peer.wire.closed
    peer.send(peer.request(3, b"fits"))
    assert [c.message for c in peer.handler.calls] == [b"fits"]


def test_a_header_list_over_the_limit_ends_the_call_resource_exhausted() -> None:
    peer = Peer(Limits(max_header_list=400))
    peer.frames()
    peer.send(peer.request(1, b"x", [(b"x-big", b"v" * 300)]))
    assert status_of(peer, peer.frames(), 1) == b"8" and peer.handler.calls == []


def test_call_level_problems_are_statuses_not_resets() -> None:
    peer = Peer()
    peer.frames()
    peer.send(peer.request(1, b"x", [(b"grpc-timeout", b"soon")]))
    assert status_of(peer, peer.frames(), 1) == b"3"
    peer.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 3, peer.encoder.encode(HEADERS)))
    assert status_of(peer, peer.frames(), 3) == b"3"  # no message at all
    block = peer.encoder.encode(HEADERS)
    peer.send(
        f.frame(f.HEADERS, f.END_HEADERS, 5, block)
        + f.frame(f.DATA, f.END_STREAM, 5, b"\x01\x00\x00\x00\x01z")
    )
    assert status_of(peer, peer.frames(), 5) == b"3"  # compressed, no grpc-encoding
    other = [(n, b"application/json" if n == b"content-type" else v) for n, v in HEADERS]
    peer.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 7, peer.encoder.encode(other)))
    assert status_of(peer, peer.frames(), 7) == b"3"
    stream = [(n, b"/inference.GRPCInferenceService/ModelWatch" if n == b":path" else v)
              for n, v in HEADERS]  # fmt: skip
    peer.send(f.frame(f.HEADERS, f.END_HEADERS, 9, peer.encoder.encode(stream)))
    frames = peer.frames()  # at once, though the request has not ended
    assert status_of(peer, frames, 9) == b"12"
    assert frames[-1] == (f.RST_STREAM, 0, 9, b"\x00\x00\x00\x00")
    assert peer.handler.calls == [] and not peer.wire.closed and peer.server.unanswered == 0


def test_a_get_is_a_malformed_request_reset() -> None:
    peer = Peer()
    peer.frames()
    get = [(n, b"GET" if n == b":method" else v) for n, v in HEADERS]
    peer.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 1, peer.encoder.encode(get)))
    assert peer.frames() == [(f.RST_STREAM, 0, 1, f.PROTOCOL_ERROR.to_bytes(4, "big"))]


def test_a_call_reset_by_the_client_is_not_answered() -> None:
    peer = Peer(hold=True)
    peer.send(peer.request(1, b"x"))
    peer.frames()
    peer.send(f.rst_stream(1, f.CANCEL))
    assert peer.server.unanswered == 0
    peer.handler.calls[0].answer(b"late")
    assert peer.frames() == []


def test_bad_input_closes_the_connection_with_goaway_naming_it() -> None:
    cases = {
        "bad hpack": f.frame(f.HEADERS, f.END_HEADERS, 1, b"\xff\xff\xff\xff"),
        "even stream": f.frame(f.HEADERS, f.END_HEADERS, 2, hpack.Encoder().encode(HEADERS)),
        "interrupted block": f.frame(f.HEADERS, 0, 1, b"\x82") + f.frame(f.PING, 0, 0, b"12345678"),
        "frame too large": f.frame(f.DATA, 0, 1, b"a" * 16_385),
        "data on idle": f.frame(f.DATA, 0, 9, b"a"),
        "push": f.frame(f.PUSH_PROMISE, 0, 1, b"\x00\x00\x00\x02"),
        "ping size": f.frame(f.PING, 0, 0, b"1"),
        "window 0": f.window_update(0, 0),
        "settings size": f.frame(f.SETTINGS, 0, 0, b"\x00\x04\x00"),
    }
    codes = {}
    for name, data in cases.items():
        peer = Peer()
        peer.send(data)
        codes[name] = goaway_code(peer)
    assert codes == {
        "bad hpack": f.COMPRESSION_ERROR,
        "even stream": f.PROTOCOL_ERROR,
        "interrupted block": f.PROTOCOL_ERROR,
        "frame too large": f.FRAME_SIZE_ERROR,
        "data on idle": f.PROTOCOL_ERROR,
        "push": f.PROTOCOL_ERROR,
        "ping size": f.FRAME_SIZE_ERROR,
        "window 0": f.PROTOCOL_ERROR,
        "settings size": f.FRAME_SIZE_ERROR,
    }


def test_a_wrong_preface_is_refused() -> None:
    server, wire = Server(), Wire()
    connection = Http2Connection(Echo(), Limits(), server)
    connection.connection_made(wire)  # type: ignore[arg-type]
    connection.data_received(b"POST /v2/models HTTP/1.1\r\n")
    data = bytes(wire.written)
    length, *_ = f.frame_head(data, 0)  # its SETTINGS, then the GOAWAY
    _, kind, _, _ = f.frame_head(data, 9 + length + 13)  # after SETTINGS, WINDOW_UPDATE
    assert wire.closed and kind == f.GOAWAY
    assert b"not an HTTP/2 preface" in data


def test_a_connection_without_its_preface_in_time_is_closed() -> None:
    server, wire = Server(), Wire()
    connection = Http2Connection(Echo(), Limits(header_timeout=10.0), server)
    connection.connection_made(wire)  # type: ignore[arg-type]
    connection.sweep(time.monotonic() + 5)
    assert not wire.closed
    connection.sweep(time.monotonic() + 11)
    assert wire.closed


def test_a_request_that_does_not_arrive_in_time_ends_deadline_exceeded() -> None:
    peer = Peer(Limits(body_timeout=60.0))
    peer.frames()
    peer.send(f.frame(f.HEADERS, f.END_HEADERS, 1, peer.encoder.encode(HEADERS)))
    peer.connection.sweep(time.monotonic() + 61)
    assert status_of(peer, peer.frames(), 1) == b"4" and not peer.connection.streams


def test_going_away_finishes_calls_in_flight_then_closes() -> None:
    peer = Peer(hold=True)
    peer.send(peer.request(1, b"x"))
    peer.connection.go_away()
    peer.send(peer.request(3, b"y"))  # after GOAWAY: refused
    frames = peer.frames()
    assert (f.RST_STREAM, 0, 3, f.REFUSED_STREAM.to_bytes(4, "big")) in frames
    assert not peer.wire.closed
    peer.handler.calls[0].answer(b"x")
    assert peer.wire.closed


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_after_the_preface_never_raise(data: bytes) -> None:
    peer = Peer()
    peer.send(data)
    peer.send(peer.request(1, b"x"))
    assert peer.server.unanswered >= 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([f.HEADERS, f.CONTINUATION, f.SETTINGS, f.DATA]))
def test_any_frame_payload_is_a_status_a_reset_or_a_goaway_never_an_exception(
    payload: bytes, kind: int
) -> None:
    peer = Peer()
    peer.frames()
    flags = f.END_HEADERS if kind == f.HEADERS else 0
    peer.send(f.frame(kind, flags, 1 if kind != f.SETTINGS else 0, payload))
    if not peer.wire.closed:
        peer.send(peer.request(3, b"x"))
        assert peer.wire.closed or [c.message for c in peer.handler.calls] == [b"x"]


def test_answer_blocks_are_constant_bytes_any_fresh_decoder_reads() -> None:
    headers = ((b":status", b"200"), (b"content-type", b"application/grpc"))
    first = f.encode(headers)
    f.encode(((b"grpc-status", b"13"), (b"grpc-message", b"boom")))
    assert f.encode(headers) == first  # no table state between answers
    assert hpack.Decoder().decode(first, raw=True) == list(headers)


def test_padding_priority_and_client_trailers_are_read() -> None:
    peer = Peer()
    block = peer.encoder.encode(HEADERS)
    padded = bytes([3]) + b"\x00\x00\x00\x01\x10" + block + b"\x00" * 3  # pad, priority
    body = b"\x00\x00\x00\x00\x02hi"
    peer.send(
        f.frame(f.HEADERS, f.END_HEADERS | f.PADDED | f.PRIORITY_FLAG, 1, padded)
        + f.frame(f.DATA, f.PADDED, 1, bytes([2]) + body + b"\x00\x00")
        + f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 1, peer.encoder.encode([(b"x", b"y")]))
    )
    assert [c.message for c in peer.handler.calls] == [b"hi"]


def test_compressed_requests_are_read_within_the_message_limit() -> None:
    peer = Peer(Limits(max_message=1000))
    peer.frames()

    def compressed(stream: int, encoding: bytes, message: bytes) -> bytes:
        block = peer.encoder.encode([*HEADERS, (b"grpc-encoding", encoding)])
        body = b"\x01" + len(message).to_bytes(4, "big") + message
        return f.frame(f.HEADERS, f.END_HEADERS, stream, block) + f.frame(
            f.DATA, f.END_STREAM, stream, body
        )

    peer.send(compressed(1, b"gzip", gzip.compress(b"hello")))
    peer.send(compressed(3, b"deflate", zlib.compress(b"world")))
    assert [c.message for c in peer.handler.calls] == [b"hello", b"world"]
    peer.frames()
    peer.send(compressed(5, b"gzip", gzip.compress(b"a" * 5000)))  # 5,000 bytes decoded
    frames = peer.frames()
    assert status_of(peer, frames, 5) == b"8"
    assert b"exceeds the limit of 1000 bytes" in peer.headers(frames[0][3])[b"grpc-message"]
    peer.send(compressed(7, b"snappy", b"x"))
    assert status_of(peer, peer.frames(), 7) == b"12"
    peer.send(compressed(9, b"gzip", b"not gzip"))
    assert status_of(peer, peer.frames(), 9) == b"3"
    assert len(peer.handler.calls) == 2 and peer.server.unanswered == 0


def test_a_call_counts_its_deadline_from_when_its_bytes_may_have_arrived() -> None:
    peer = Peer(hold=True)
    peer.server.floor = time.monotonic() - 0.5  # the loop was busy: they waited to be read
    reads = peer.server.turns
    peer.send(peer.request(1, b"x", [(b"grpc-timeout", b"2S")]))
    (call,) = peer.handler.calls
    assert call.received == peer.server.floor and call.timeout == 2.0
    assert peer.server.turns == reads + 1  # each read lets the app keep up
