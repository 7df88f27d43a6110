"""What a client may make the HTTP/2 path do, bounded (`api.grpc.floods`, `api.grpc.unary`,
`api.grpc.connections`): each known attack on HTTP/2 servers fed to one connection byte by
byte, and answered GOAWAY, RST_STREAM or a gRPC status at its bound, never growth without end.
"""

from __future__ import annotations

import time

from tests.api.http2_wire import HEADERS, Echo, Peer, Server, Wire, goaway_code, kinds, status_of

from headway.api.grpc import frames as f
from headway.api.grpc.calls import CHUNK_COST, RESOURCE_EXHAUSTED, Limits
from headway.api.grpc.floods import WINDOW_S
from headway.api.grpc.http2 import LINGER_S, Http2Connection

PING = f.frame(f.PING, 0, 0, b"12345678")


def head(peer: Peer, stream: int, end: bool = False) -> bytes:
    """A call's HEADERS alone (its request still to come unless `end`)."""
    flags = f.END_HEADERS | (f.END_STREAM if end else 0)
    return f.frame(f.HEADERS, flags, stream, peer.encoder.encode(HEADERS))


def message(stream: int, payload: bytes, end: bool = True) -> bytes:
    body = b"\x00" + len(payload).to_bytes(4, "big") + payload
    return f.frame(f.DATA, f.END_STREAM if end else 0, stream, body)


def refused(stream: int) -> tuple[int, int, int, bytes]:
    return (f.RST_STREAM, 0, stream, f.REFUSED_STREAM.to_bytes(4, "big"))


def later(peer: Peer, seconds: float) -> None:
    """As if the window of the flood counts had begun `seconds` earlier."""
    peer.connection._window_ends -= seconds


# -- rapid reset (CVE-2023-44487) --------------------------------------------------------------
def test_a_call_the_client_resets_holds_its_slot_until_its_work_ends() -> None:
    peer = Peer(Limits(max_streams=2), hold=True)
    peer.send(peer.request(1, b"a") + peer.request(3, b"b"))
    peer.send(f.rst_stream(1, f.CANCEL) + f.rst_stream(3, f.CANCEL))
    assert peer.server.unanswered == 0 and not peer.connection.streams
    peer.frames()
    peer.send(peer.request(5, b"c"))  # both calls still run: no slot is free
    assert peer.frames() == [refused(5)]
    assert len(peer.handler.calls) == 2
    first, second = peer.handler.calls
    first.answer(b"late")  # its work ends: the answer goes nowhere, its slot is free
    second.fail(13, "late too")
    assert peer.frames() == []
    peer.send(peer.request(7, b"d"))
    assert [c.message for c in peer.handler.calls[2:]] == [b"d"]


def test_streams_opened_and_reset_at_once_get_goaway_enhance_your_calm() -> None:
    peer = Peer()
    peer.frames()
    attack = b"".join(head(peer, s) + f.rst_stream(s, f.CANCEL) for s in range(1, 2001, 2))
    peer.send(attack)  # 1,000 resets: the bound, not past it
    assert not peer.wire.closed
    peer.send(head(peer, 2001) + f.rst_stream(2001, f.CANCEL))
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM
    assert b"streams reset" in peer.wire.written


def test_resets_are_tolerated_while_most_calls_complete_and_counted_anew_each_window() -> None:
    peer = Peer()
    peer.frames()
    stream = 1
    for _ in range(700):  # 1,400 resets beside 2,100 calls answered: a client cancelling a lot
        peer.send(peer.request(stream, b"x") + peer.request(stream + 2, b"y"))
        peer.send(head(peer, stream + 4) + f.rst_stream(stream + 4, f.CANCEL))
        peer.send(peer.request(stream + 6, b"z"))
        peer.send(head(peer, stream + 8) + f.rst_stream(stream + 8, f.CANCEL))
        stream += 10
    assert not peer.wire.closed and len(peer.handler.calls) == 2100
    later(peer, WINDOW_S)  # a new window: the counts restart
    peer.send(
        b"".join(head(peer, s) + f.rst_stream(s, f.CANCEL) for s in range(stream, stream + 1800, 2))
    )
    assert not peer.wire.closed


def test_streams_refused_over_the_limit_count_as_resets() -> None:
    peer = Peer(Limits(max_streams=1, max_resets=10), hold=True)
    peer.send(peer.request(1, b"held"))
    peer.frames()
    peer.send(b"".join(peer.request(s, b"x") for s in range(3, 23, 2)))  # 10 refused
    assert kinds(peer.frames()) == [f.RST_STREAM] * 10 and not peer.wire.closed
    peer.send(peer.request(23, b"x"))
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM


def test_streams_reset_for_errors_count_as_resets() -> None:
    peer = Peer(Limits(max_resets=10))
    get = [(n, b"GET" if n == b":method" else v) for n, v in HEADERS]
    block = peer.encoder.encode(get)
    peer.send(
        b"".join(
            f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, s, block) for s in range(1, 22, 2)
        )
    )
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM


# -- CONTINUATION flood (CVE-2024-27316) and empty frames (CVE-2019-9518) -------------------------
def test_a_header_block_is_bounded_in_frames() -> None:
    peer = Peer()
    block = peer.encoder.encode(HEADERS)
    pieces = [block[:1], *(block[i : i + 1] for i in range(1, 9))]
    data = f.frame(f.HEADERS, 0, 1, pieces[0])
    data += b"".join(f.frame(f.CONTINUATION, 0, 1, p) for p in pieces[1:])  # 8 CONTINUATIONs
    peer.send(data)
    assert not peer.wire.closed
    peer.send(f.frame(f.CONTINUATION, 0, 1, block[9:10]))
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM
    assert b"CONTINUATION frames" in peer.wire.written


def test_empty_continuation_frames_are_cut_off() -> None:
    peer = Peer()
    peer.send(f.frame(f.HEADERS, 0, 1, peer.encoder.encode(HEADERS)[:3]))
    peer.send(f.frame(f.CONTINUATION, 0, 1) * 100_000)
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM
    assert len(peer.connection._block) <= 10


def test_a_header_block_must_end_within_the_header_timeout() -> None:
    peer = Peer(Limits(header_timeout=10.0))
    peer.send(f.frame(f.HEADERS, 0, 1, peer.encoder.encode(HEADERS)[:3]))
    peer.frames()
    peer.connection.sweep(time.monotonic() + 5)
    assert not peer.wire.closed
    peer.connection.sweep(time.monotonic() + 11)
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM


def test_frames_that_carry_nothing_are_counted_per_window() -> None:
    peer = Peer(hold=True)
    peer.send(head(peer, 1))
    empty = f.frame(f.DATA, 0, 1)
    peer.send(empty * 60 + f.frame(f.PRIORITY, 0, 3, b"\x00\x00\x00\x01\x10") * 40)
    peer.send(f.frame(f.DATA, f.END_STREAM, 1) + peer.request(3, b"x"))  # an END_STREAM is news
    assert len(peer.handler.calls) == 1 and not peer.wire.closed
    later(peer, WINDOW_S)
    peer.send(empty * 100)  # on a stream that ended: ignored, still counted
    assert not peer.wire.closed
    peer.send(f.frame(0xEE, 0, 0))  # an unknown type carries nothing either
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM


# -- PING and SETTINGS floods (CVE-2019-9512, CVE-2019-9515) ------------------------------------
def test_a_ping_flood_gets_goaway_enhance_your_calm() -> None:
    peer = Peer()
    peer.frames()
    peer.send(PING * 1000)
    assert kinds(peer.frames()) == [f.PING] * 1000
    later(peer, WINDOW_S)
    peer.send(PING * 1000)
    assert not peer.wire.closed
    peer.send(PING)
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM


def test_a_settings_flood_gets_goaway_enhance_your_calm() -> None:
    peer = Peer()  # its preface's SETTINGS is the first of the window
    peer.frames()
    peer.send(f.settings({}) * 99)
    assert kinds(peer.frames()) == [f.SETTINGS] * 99
    peer.send(f.settings({}))
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM


def test_acks_for_a_client_that_does_not_read_are_bounded() -> None:
    peer = Peer(Limits(max_pings=10_000))
    peer.connection.pause_writing()  # its socket takes no more
    peer.send(PING * 999)
    peer.connection.resume_writing()  # it read: what was queued has gone
    peer.connection.pause_writing()
    peer.send(PING * 1000)
    assert not peer.wire.closed
    peer.send(PING)
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM


# -- memory ------------------------------------------------------------------------------------
def test_request_bytes_held_for_unfinished_calls_are_bounded_per_connection() -> None:
    limits = Limits(connection_buffer=3000 + 3 * CHUNK_COST, stream_window=2**20)
    peer = Peer(limits, hold=True)
    peer.send(head(peer, 1) + head(peer, 3))
    prefix = b"\x00\x00\x00\x10\x00"  # a message of 4,096 bytes: it never ends here
    peer.send(f.frame(f.DATA, 0, 1, prefix + b"a" * 995) + f.frame(f.DATA, 0, 3, b"b" * 1000))
    assert peer.connection.calls.buffered == 2000 + 2 * CHUNK_COST
    peer.frames()
    peer.send(f.frame(f.DATA, 0, 3, b"b" * 1001))  # one byte past
    frames = peer.frames()
    assert status_of(peer, frames, 3) == str(RESOURCE_EXHAUSTED).encode()
    assert b"requests still arriving" in peer.headers(frames[0][3])[b"grpc-message"]
    assert peer.connection.calls.buffered == 1000 + CHUNK_COST  # stream 3's are dropped
    peer.send(head(peer, 5) + message(5, b"c" * 100))  # room again
    assert [c.message for c in peer.handler.calls] == [b"c" * 100]
    assert peer.connection.calls.buffered == 1000 + CHUNK_COST


def test_one_byte_frames_count_what_they_hold() -> None:
    peer = Peer(Limits(connection_buffer=100 * (1 + CHUNK_COST)), hold=True)
    peer.send(head(peer, 1))
    peer.send(f.frame(f.DATA, 0, 1, b"\x00") * 100)
    assert not peer.handler.calls and 1 in peer.connection.streams
    peer.send(f.frame(f.DATA, 0, 1, b"\x00"))
    assert 1 not in peer.connection.streams and peer.connection.calls.buffered == 0


def test_request_bytes_held_are_bounded_for_the_whole_server() -> None:
    limits = Limits(server_buffer=2000 + CHUNK_COST)
    server = Server()
    one, two = Peer(limits, hold=True, server=server), Peer(limits, hold=True, server=server)
    one.send(head(one, 1) + f.frame(f.DATA, 0, 1, b"\x00\x00\x00\x10\x00" + b"a" * 1995))
    assert server.buffered == 2000 + CHUNK_COST  # the server's all
    two.frames()
    two.send(head(two, 1) + f.frame(f.DATA, 0, 1, b"\x00\x00\x00\x00\x10" + b"b"))
    assert status_of(two, two.frames(), 1) == str(RESOURCE_EXHAUSTED).encode()
    two.send(head(two, 3) + message(3, b"whole"))  # a request that ends is never held
    assert [c.message for c in two.handler.calls] == [b"whole"]
    one.send(f.rst_stream(1, f.CANCEL))  # the client gives up: its bytes are dropped
    assert server.buffered == 0
    two.send(
        head(two, 5)
        + f.frame(f.DATA, 0, 5, b"\x00\x00\x00\x00\x04ab")
        + f.frame(f.DATA, f.END_STREAM, 5, b"cd")
    )
    assert [c.message for c in two.handler.calls] == [b"whole", b"abcd"]
    assert server.buffered == 0


def test_answers_waiting_for_the_clients_window_are_bounded_per_connection() -> None:
    peer = Peer(Limits(answer_buffer=100), window=10, hold=True)
    peer.send(peer.request(1, b"a" * 60) + peer.request(3, b"b" * 60))
    first, second = peer.handler.calls
    first.answer(b"a" * 60)  # 65 bytes: 10 go, 55 wait
    peer.frames()
    second.answer(b"b" * 60)  # 65 more would wait: past 100
    assert status_of(peer, peer.frames(), 3) == str(RESOURCE_EXHAUSTED).encode()
    peer.send(f.window_update(1, 100))
    assert kinds(peer.frames()) == [f.DATA, f.HEADERS]
    assert peer.connection.calls.unsent == 0


# -- clients that stop reading -----------------------------------------------------------------
def test_a_client_that_stops_reading_is_dropped_after_the_write_timeout() -> None:
    peer = Peer(Limits(write_timeout=60.0))
    now = time.monotonic()
    peer.connection.pause_writing()
    peer.connection.sweep(now)
    peer.connection.resume_writing()  # it read again
    peer.connection.sweep(now + 30)
    peer.connection.pause_writing()
    peer.connection.sweep(now + 40)
    peer.connection.sweep(now + 99)
    assert not peer.wire.closed
    peer.connection.sweep(now + 101)
    assert peer.wire.aborted


def test_a_connection_closing_lingers_for_its_goaway_then_is_dropped() -> None:
    peer = Peer()
    peer.frames()
    peer.send(f.frame(f.PUSH_PROMISE, 0, 1, b"\x00\x00\x00\x02"))  # GOAWAY, then this side's EOF
    assert peer.wire.closed and not peer.wire.aborted
    assert len(peer.server.connections) == 0  # no longer counted against the cap
    assert list(peer.server.connections) == [peer.connection]  # but swept
    peer.send(PING * 10)  # read and dropped
    assert kinds(peer.frames()) == [f.GOAWAY]
    now = time.monotonic()
    peer.connection.sweep(now)
    peer.connection.sweep(now + LINGER_S / 2)
    assert not peer.wire.aborted
    peer.connection.sweep(now + LINGER_S + 0.01)  # the client has not closed its side
    assert peer.wire.aborted


def test_an_answer_stuck_at_a_zero_window_closes_the_connection() -> None:
    peer = Peer(Limits(write_timeout=60.0), window=10)
    peer.send(peer.request(1, b"a" * 100))
    now = time.monotonic()
    peer.connection.sweep(now)
    peer.connection.sweep(now + 50)
    peer.send(f.window_update(1, 10))  # progress
    peer.connection.sweep(now + 70)
    peer.connection.sweep(now + 129)
    assert not peer.wire.closed
    peer.connection.sweep(now + 131)
    assert goaway_code(peer) == f.ENHANCE_YOUR_CALM


# -- idle connections --------------------------------------------------------------------------
def test_an_idle_connection_gets_goaway_no_error_and_pings_do_not_keep_it() -> None:
    peer = Peer(Limits(idle_timeout=180.0), hold=True)
    now = time.monotonic()
    peer.send(peer.request(1, b"x"))
    peer.connection.sweep(now + 100)  # a call is open: not idle
    peer.handler.calls[0].answer(b"x")
    peer.send(PING)
    peer.connection.sweep(now + 279)
    assert not peer.wire.closed
    peer.send(PING)
    peer.connection.sweep(now + 281)
    assert goaway_code(peer) == f.NO_ERROR


def test_at_the_cap_the_connection_idle_longest_gives_way() -> None:
    limits = Limits(max_connections=2)
    server = Server()
    oldest, busy = Peer(limits, server=server), Peer(limits, hold=True, server=server)
    busy.send(busy.request(1, b"x"))
    newer = Peer(limits, hold=True, server=server)
    assert goaway_code(oldest) == f.NO_ERROR  # made room
    assert not busy.wire.closed and not newer.wire.closed
    server.connections.discard(oldest.connection)  # its transport has closed
    server.connections._ranked_at -= 1  # the next ranking is due
    newer.send(newer.request(1, b"y"))  # now both are busy
    wire = Wire()
    refused = Http2Connection(Echo(), limits, server)
    refused.connection_made(wire)  # type: ignore[arg-type]
    assert wire.closed and b"too many connections" in wire.written
    assert f.frame_head(wire.written, 0)[1] == f.SETTINGS  # before the GOAWAY (RFC 9113 3.4)
    assert set(server.connections) == {busy.connection, newer.connection, refused}
    assert len(server.connections) == 2  # the refused one is closing


# -- RFC 9113 --------------------------------------------------------------------------------
def test_settings_that_push_an_open_streams_window_past_the_maximum_are_refused() -> None:
    peer = Peer(hold=True)
    peer.send(peer.request(1, b"x"))
    peer.send(f.window_update(1, f.MAX_WINDOW - f.DEFAULT_WINDOW))  # at the maximum
    assert not peer.wire.closed
    peer.send(f.settings({f.INITIAL_WINDOW_SIZE: f.DEFAULT_WINDOW + 1}))
    assert goaway_code(peer) == f.FLOW_CONTROL_ERROR


def test_a_request_on_a_used_stream_id_is_a_protocol_error() -> None:
    peer = Peer()
    peer.send(peer.request(1, b"x") + peer.request(3, b"y"))
    assert len(peer.handler.calls) == 2
    peer.send(peer.request(1, b"again"))
    assert goaway_code(peer) == f.PROTOCOL_ERROR
    assert b"RFC 9113 5.1.1" in peer.wire.written


def test_trailers_on_a_stream_this_side_reset_are_ignored() -> None:
    peer = Peer(Limits(max_message=10))
    peer.send(head(peer, 1) + f.frame(f.DATA, 0, 1, b"\x00\x00\x00\x00\x20" + b"a" * 11))
    assert status_of(peer, peer.frames(), 1) == str(RESOURCE_EXHAUSTED).encode()
    trailers = peer.encoder.encode([(b"x-done", b"1")])
    peer.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 1, trailers))
    assert not peer.wire.closed
    peer.send(peer.request(3, b"fits"))
    assert [c.message for c in peer.handler.calls] == [b"fits"]


def test_a_malformed_request_reset_before_it_was_handed_over_holds_no_slot() -> None:
    peer = Peer(Limits(max_streams=1), hold=True)
    get = [(n, b"GET" if n == b":method" else v) for n, v in HEADERS]
    peer.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 1, peer.encoder.encode(get)))
    assert peer.frames()[-1] == (f.RST_STREAM, 0, 1, f.PROTOCOL_ERROR.to_bytes(4, "big"))
    assert peer.server.unanswered == 0 and peer.connection.calls.orphans == 0
    peer.send(peer.request(3, b"x"))
    assert [c.message for c in peer.handler.calls] == [b"x"] and peer.server.unanswered == 1
