"""A property-based fuzz of the HTTP/2 frame and HPACK layer (`api.grpc.http2`, `unary`,
`frames`): after a valid preface, sequences of arbitrary and of mutated frames, header blocks of
valid and of random HPACK bytes, fed to one connection in pieces of any size, with calls
answered, failed or held, sweeps at later times and a client that stops reading between.

Whatever comes, nothing escapes and no bug is hit (no INTERNAL_ERROR), the server writes whole
frames, its SETTINGS first and nothing after a GOAWAY; each call is answered, reset or cut off
by the GOAWAY; and what the connection holds stays within its bounds. Small bounds, so that the
examples reach them; seeded (derandomized), a few seconds in all.
"""

from __future__ import annotations

from typing import Any

import hpack
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.api.http2_wire import HEADERS, Peer

from headway.api.grpc import frames as f
from headway.api.grpc.calls import Limits

LIMITS = Limits(
    max_message=200,
    max_streams=4,
    max_header_list=400,
    stream_window=300,
    connection_window=65_535,
    connection_buffer=600,
    server_buffer=800,
    answer_buffer=300,
    max_resets=12,
    max_pings=12,
    max_settings=8,
    max_empty=8,
    max_continuations=3,
    max_queued_control=6,
)
FUZZ = settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: A stream: the next new one, the last one opened, an older one, or any id at all.
STREAMS = st.one_of(
    st.sampled_from(["new", "new", "last", "last", "old"]),
    st.sampled_from([0, 1, 2, 3, 5, 7, 2**31 - 1]),
)
KINDS = st.sampled_from([*range(10), 0x0B, 0xFF])
FLAGS = st.sampled_from([0, f.END_STREAM, f.END_HEADERS, f.END_STREAM | f.END_HEADERS,
                         f.PADDED, f.PRIORITY_FLAG, 0xFF])  # fmt: skip
NAMES = st.sampled_from([b":method", b":path", b":scheme", b":authority", b":status",
                         b"content-type", b"grpc-timeout", b"grpc-encoding", b"te", b"x-any",
                         b"Upper", b""])  # fmt: skip
VALUES = st.one_of(st.sampled_from([b"POST", b"GET", b"application/grpc", b"gzip", b"1S",
                                    b"soon", b"/inference.GRPCInferenceService/ModelInfer"]),
                   st.binary(max_size=40))  # fmt: skip
HEADER_LISTS = st.one_of(
    st.just(HEADERS),
    st.lists(st.tuples(NAMES, VALUES), max_size=8),
    st.lists(st.tuples(NAMES, VALUES), max_size=4).map(lambda extra: HEADERS + extra),
)
MESSAGES = st.binary(max_size=260)

FRAMES = st.one_of(
    st.tuples(st.just("frame"), KINDS, FLAGS, STREAMS, st.binary(max_size=48)),
    st.tuples(st.just("hpack"), STREAMS, FLAGS, st.binary(max_size=48)),  # random HPACK bytes
    st.tuples(st.just("headers"), STREAMS, FLAGS, HEADER_LISTS, st.integers(1, 6)),
    st.tuples(st.just("data"), STREAMS, FLAGS, MESSAGES),
    st.tuples(st.just("request"), STREAMS, MESSAGES),
    st.tuples(st.just("rst"), STREAMS, st.integers(0, 15)),
    st.tuples(st.just("window"), STREAMS, st.sampled_from([0, 1, 100, 2**31 - 1])),
    st.tuples(
        st.just("settings"),
        st.lists(st.tuples(st.integers(0, 8), st.sampled_from([0, 1, 5, 16_384, 2**31]))),
        st.booleans(),
    ),
    st.tuples(st.just("ping"), st.booleans()),
)
#: Calls as a client makes them, whole or their head alone, so that streams open.
CALLS = st.one_of(
    st.tuples(st.just("request"), st.just("new"), MESSAGES),
    st.tuples(st.just("headers"), st.just("new"), st.sampled_from([0, f.END_STREAM]),
              st.just(HEADERS), st.integers(1, 3)),
    st.tuples(st.just("data"), st.just("last"), st.sampled_from([0, f.END_STREAM]), MESSAGES),
)  # fmt: skip
ACTIONS = st.one_of(
    FRAMES,
    CALLS,
    CALLS,
    st.tuples(st.just("many"), st.one_of(FRAMES, CALLS), st.integers(2, 16)),  # to the bounds
    st.tuples(st.just("answer"), st.integers(0, 7), st.binary(max_size=300)),
    st.tuples(st.just("fail"), st.integers(0, 7)),
    st.tuples(st.just("sweep"), st.sampled_from([1.0, 11.0, 61.0, 200.0])),
    st.tuples(st.just("pause"), st.booleans()),
)


def message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def stream_id(peer: Peer, choice: int | str) -> int:
    last = peer.connection.calls.last_stream
    if choice == "new":
        return last + 2 if last else 1
    if choice == "last":
        return last or 1
    if choice == "old":
        return max(1, last - 2)
    assert isinstance(choice, int)
    return choice


def encode(peer: Peer, action: tuple[Any, ...]) -> bytes:
    """The bytes a frame action sends (the peer's HPACK encoder kept in step)."""
    name = action[0]
    if name == "data" and action[1] == "last" and not peer.connection.calls.last_stream:
        return encode(peer, ("headers", 1, 0, HEADERS, 1)) + encode(peer, ("data", 1, *action[2:]))
    if name in ("frame", "hpack", "headers", "data", "request", "rst", "window"):
        index = 3 if name == "frame" else 1
        action = (*action[:index], stream_id(peer, action[index]), *action[index + 1 :])
    if name == "frame":
        _, kind, flags, stream, payload = action
        return f.frame(kind, flags, stream, payload)
    if name == "hpack":
        _, stream, flags, payload = action
        return f.frame(f.HEADERS, flags | f.END_HEADERS, stream, payload)
    if name == "headers":
        _, stream, flags, headers, pieces = action
        block = peer.encoder.encode(headers)
        size = max(1, -(-len(block) // pieces))
        parts = [block[at : at + size] for at in range(0, len(block), size)] or [b""]
        flags &= ~f.PADDED & ~f.PRIORITY_FLAG
        if len(parts) == 1:
            return f.frame(f.HEADERS, flags | f.END_HEADERS, stream, parts[0])
        out = f.frame(f.HEADERS, flags & ~f.END_HEADERS, stream, parts[0])
        for i, part in enumerate(parts[1:], 2):
            out += f.frame(f.CONTINUATION, f.END_HEADERS if i == len(parts) else 0, stream, part)
        return out
    if name == "data":
        _, stream, flags, payload = action
        return f.frame(f.DATA, flags & ~f.PADDED, stream, message(payload))
    if name == "request":
        _, stream, payload = action
        return peer.request(stream, payload)
    if name == "rst":
        return f.rst_stream(action[1], action[2])
    if name == "window":
        return f.window_update(action[1], action[2])
    if name == "settings":
        _, pairs, ack = action
        return f.frame(f.SETTINGS, f.ACK if ack else 0, 0, b"".join(
            k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in pairs))  # fmt: skip
    if name == "ping":
        return f.frame(f.PING, f.ACK if action[1] else 0, 0, b"12345678")
    raise AssertionError(name)


def act(peer: Peer, action: tuple[Any, ...], pieces: list[int]) -> None:
    connection = peer.connection
    name = action[0]
    held = [c for c in peer.handler.calls if not c._stream.answered]
    if name == "answer":
        if held:
            held[action[1] % len(held)].answer(action[2])
    elif name == "fail":
        if held:
            held[action[1] % len(held)].fail(13, "failed")
    elif name == "sweep":
        connection.sweep(connection.opened + action[1])
    elif name == "pause":
        if action[1]:
            connection.pause_writing()
        else:
            connection.resume_writing()
    elif name == "many":
        for _ in range(action[2]):
            if not peer.wire.closed:
                act(peer, action[1], pieces)
    else:
        data = encode(peer, action)
        at = 0
        for size in pieces or [len(data)]:  # in pieces of any size
            if at >= len(data):
                break
            peer.send(data[at : at + size])
            at += size
        if at < len(data):
            peer.send(data[at:])
    check(peer)


def check(peer: Peer) -> None:
    """What the connection holds is within its bounds, and its counts agree."""
    connection, calls, limits = peer.connection, peer.connection.calls, LIMITS
    assert len(connection.streams) + calls.orphans <= limits.max_streams
    assert 0 <= calls.orphans <= limits.max_streams
    assert 0 <= calls.buffered <= limits.connection_buffer
    assert peer.server.buffered == calls.buffered
    assert 0 <= calls.unsent <= limits.answer_buffer
    assert len(connection._buffer) < 9 + f.DEFAULT_FRAME_SIZE
    assert len(connection._block) <= limits.max_continuations + 1
    assert connection._block_size <= 4 * limits.max_header_list
    table = connection.decoder._decoder.header_table
    assert (
        table.maxsize <= 4096
        and sum(32 + len(n) + len(v) for n, v in table.dynamic_entries) <= 4096
    )
    handed = [c for c in peer.handler.calls if not c._stream.answered]
    assert peer.server.unanswered == sum(1 for c in handed if c._stream.id in connection.streams)
    assert peer.server.unanswered >= 0
    floods = connection.floods
    assert floods.pings <= limits.max_pings + 1 and floods.settings <= limits.max_settings + 1
    opened = connection.calls.opened - floods.opened
    assert floods.empty <= limits.max_empty + 1
    assert floods.resets <= max(limits.max_resets + 1, (opened + 1) // 2 + 1)


def outcome(peer: Peer) -> None:
    """Every frame whole, SETTINGS first, nothing after a GOAWAY, no internal error; with
    the held calls answered, each call answered or reset, unless a GOAWAY cut it off."""
    event(f"calls handed over: {min(len(peer.handler.calls), 3)}+")
    for call in peer.handler.calls:
        call.answer(b"late")
    peer.connection.calls.flush()
    data = bytes(peer.wire.written)
    frames, at = [], 0
    while at < len(data):
        assert len(data) - at >= 9
        length, kind, flags, stream = f.frame_head(data, at)
        assert len(data) - at - 9 >= length
        frames.append((kind, flags, stream, data[at + 9 : at + 9 + length]))
        at += 9 + length
    assert frames[0][0] == f.SETTINGS
    goaways = [i for i, (kind, *_) in enumerate(frames) if kind == f.GOAWAY]
    if goaways:
        assert goaways == [len(frames) - 1]
        code = int.from_bytes(frames[-1][3][4:8], "big")
        event(f"GOAWAY {code}: {frames[-1][3][8:40].decode(errors='replace')}")
        assert code != f.INTERNAL_ERROR, frames[-1][3][8:]
        assert peer.wire.closed
        return
    assert not peer.wire.closed or peer.wire.aborted or peer.connection.calls.going_away
    decoder = hpack.Decoder()
    ended = {s for kind, fl, s, _ in frames if kind == f.RST_STREAM or
             (kind == f.HEADERS and fl & f.END_STREAM)}  # fmt: skip
    for kind, _, stream, payload in frames:
        if kind == f.HEADERS:
            decoder.decode(payload)  # a block any decoder reads
            waiting = stream in peer.connection.calls._waiting
            assert stream in ended or waiting or peer.wire.aborted


@FUZZ
@given(
    st.lists(CALLS, max_size=4),
    st.lists(ACTIONS, min_size=1, max_size=40),
    st.lists(st.integers(1, 40), max_size=6),
)
def test_any_sequence_of_frames_is_answered_reset_or_goaway_within_bounds(
    calls: list[tuple[Any, ...]], actions: list[tuple[Any, ...]], pieces: list[int]
) -> None:
    peer = Peer(LIMITS, hold=True)
    for action in calls + actions:
        if peer.wire.closed:
            break
        act(peer, action, pieces)
    outcome(peer)


CONVERSATION = st.lists(
    st.one_of(
        st.tuples(st.just("request"), st.integers(0, 8), MESSAGES),
        st.tuples(st.just("ping"), st.booleans()),
        st.tuples(st.just("window"), st.sampled_from([0, 1]), st.sampled_from([1, 1000])),
        st.tuples(st.just("settings"), st.just([(f.INITIAL_WINDOW_SIZE, 100)]), st.just(False)),
    ),
    min_size=1,
    max_size=8,
)
MUTATIONS = st.lists(
    st.tuples(st.sampled_from(["flip", "delete", "repeat", "insert"]), st.integers(0, 10_000),
              st.integers(1, 20), st.binary(min_size=1, max_size=12)),
    min_size=1, max_size=4,
)  # fmt: skip


def mutate(data: bytes, mutations: list[tuple[str, int, int, bytes]]) -> bytes:
    for name, at, size, noise in mutations:
        at %= max(1, len(data))
        if name == "flip":
            data = data[:at] + bytes([data[at] ^ noise[0]]) + data[at + 1 :] if data else noise
        elif name == "delete":
            data = data[:at] + data[at + size :]
        elif name == "repeat":
            data = data[:at] + data[at : at + size] * 3 + data[at:]
        else:
            data = data[:at] + noise + data[at:]
    return data


@FUZZ
@given(CONVERSATION, MUTATIONS, st.lists(st.integers(1, 64), max_size=6))
def test_a_mutated_conversation_is_answered_reset_or_goaway_within_bounds(
    conversation: list[tuple[Any, ...]],
    mutations: list[tuple[str, int, int, bytes]],
    pieces: list[int],
) -> None:
    peer = Peer(LIMITS, hold=True)
    valid = b""
    for i, action in enumerate(conversation):
        if action[0] == "request":
            valid += peer.request(2 * i + 1, action[2])
        else:
            valid += encode(peer, action)
    data, at = mutate(valid, mutations), 0
    for size in pieces:
        peer.send(data[at : at + size])
        at += size
        check(peer)
    peer.send(data[at:])
    check(peer)
    peer.connection.sweep(peer.connection.opened + 61)
    check(peer)
    outcome(peer)
