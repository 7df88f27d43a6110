"""A property-based fuzz of the HTTP/1.1 request path (`api.connection.HttpConnection` over
httptools): request lines, headers, chunked and gzip bodies, pipelining and empty lines, whole
or mutated byte by byte, read in pieces split anywhere. Whatever arrives, no exception leaves
the connection, no answer is a 5xx, what it buffers stays within the limits, and every read
returns at once. Seeded (derandomized) and short, for CI.

The connection is fed in memory (a transport that records what is written), with an app that
answers each request at once, so that each example is a few reads and nothing waits on a loop.
"""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headway.api.connection import HttpConnection
from headway.api.http import HttpServer
from headway.api.limits import MAX_BLANK_BYTES, MAX_HEADER_BYTES, MAX_URL_BYTES
from headway.errors import PayloadTooLarge

#: The body limit of the app below: small, so that bodies pass it.
LIMIT = 2000
#: Most seconds one read may take (no hang), generous for a busy machine.
READ_S = 2.0


class App:
    """Answers with 200 and the length of the body: the second, fourth... request at once
    (held behind the one before), the others when told (`answer_later`), last first."""

    max_body_bytes = LIMIT
    max_answer_bytes = 4 * LIMIT
    loop_held_until = float("-inf")

    def __init__(self) -> None:
        self.requests = 0
        self.later: list[Callable[[], None]] = []

    def catch_up(self) -> None:
        pass

    def check_length(self, declared: bytes | None) -> None:
        if declared is not None and declared.isdigit() and int(declared) > LIMIT:
            raise PayloadTooLarge(f"request body of {int(declared)} bytes exceeds {LIMIT}")

    def check_size(self, size: int) -> None:
        if size > LIMIT:
            raise PayloadTooLarge(f"request body exceeds {LIMIT} bytes")

    def respond(
        self,
        method: str,
        path: str,
        headers: dict[bytes, bytes],
        body: bytes,
        reply: Callable[[Any], None],
        received: float | None = None,
    ) -> None:
        self.requests += 1
        answer = (200, b'{"length":%d}' % len(body), [(b"content-type", b"application/json")])
        if self.requests % 2:  # the first, third...: later; the others held behind them
            self.later.append(lambda: reply(answer))
        else:
            reply(answer)

    def answer_later(self) -> None:
        while self.later:
            self.later.pop()()


class Transport:
    """What the connection writes, kept; reading paused or not; closed or not."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = self.eof = self.paused = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.written += data

    def write_eof(self) -> None:
        self.eof = True

    def can_write_eof(self) -> bool:
        return True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


# -- requests, whole and broken ---------------------------------------------------------------

METHODS = st.sampled_from([b"POST", b"GET", b"PUT", b"DELETE", b"HEAD", b"OPTIONS"])
TARGETS = st.sampled_from(
    [b"/", b"/now/x?y=1", b"/v2/models/m/infer"] * 3
    + [
        b"/a%2Fb//c", b"/%ff%00", b"*",
        b"http://h:1/x?q", b"https://h", b"http://u@h/", b"http:///x", b"HTTP://H:99",
        b"/" + b"u" * (MAX_URL_BYTES + 10),
    ]
)  # fmt: skip
VERSIONS = st.sampled_from([b"HTTP/1.1"] * 6 + [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"PRI"])
#: Headers a client may well send; and ones that break a request, or try to.
BENIGN = st.sampled_from(
    [
        b"Accept: */*", b"Expect: 100-continue", b"Connection: close", b"Connection: keep-alive",
        b"X-Long: " + b"v" * (MAX_HEADER_BYTES // 3), b"Inference-Header-Content-Length: 2",
        b"Content-Type: application/json", b"X-Same: a", b"X-Same: b",
    ]
)  # fmt: skip
HOSTILE = st.sampled_from(
    [
        b"Content-Length: 5", b"Content-Length: -1", b"Content-Length: 99999999999",
        b"Content-Length: 3, 3", b"Transfer-Encoding: gzip, chunked", b"Content-Encoding: br",
        b"Connection: keep-alive, upgrade", b"Upgrade: websocket", b"X: \x00\xff", b" folded",
        b"No-Colon", b"Transfer-Encoding: chunked",
    ]
)  # fmt: skip


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True once in `n` draws (hypothesis leans to a strategy's first values: False here)."""
    return st.sampled_from([False] * (n - 1) + [True])


#: Compressed bodies that are not one whole stream.
BROKEN = ["two-members", "junk", "truncated"]


@st.composite
def body(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A body and the framing headers it goes with: sized, chunked, or gzip within either."""
    content = draw(st.binary(max_size=300) | st.just(b"\0" * (LIMIT * 3)))
    headers: list[bytes] = []
    coding = draw(st.sampled_from(["none"] * 6 + ["gzip", "deflate"] * 2 + BROKEN))
    if coding != "none":
        packed = gzip.compress(content) if coding != "deflate" else zlib.compress(content)
        packed = {
            "two-members": packed + gzip.compress(b"more"),
            "junk": packed + b"junk",
            "truncated": packed[: len(packed) // 2],
        }.get(coding, packed)
        content = packed
        headers.append(b"Content-Encoding: " + (b"deflate" if coding == "deflate" else b"gzip"))
    if draw(st.booleans()):
        pieces = draw(st.lists(st.integers(1, 200), max_size=4))
        chunks, at = [], 0
        for size in pieces:
            chunks.append(b"%x\r\n%s\r\n" % (len(content[at : at + size]), content[at : at + size]))
            at += size
        chunks.append(b"%x\r\n%s\r\n" % (len(content[at:]), content[at:]) if content[at:] else b"")
        headers.append(b"Transfer-Encoding: chunked")
        return b"".join(chunks) + b"0\r\n\r\n", headers
    headers.append(b"Content-Length: %d" % len(content))
    return content, headers


@st.composite
def request(draw: st.DrawFn) -> bytes:
    line = b" ".join([draw(METHODS), draw(TARGETS), draw(VERSIONS)])
    content, framing = draw(body())
    headers = [b"Host: h", *framing, *draw(st.lists(BENIGN, max_size=4))]
    if draw(one_in(3)):
        headers.append(draw(HOSTILE))
    blank = draw(st.sampled_from([b""] * 8 + [b"\r\n", b"\n\r\n", b"\r\n" * MAX_BLANK_BYTES]))
    return blank + line + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + content


@st.composite
def mutated(draw: st.DrawFn, stream: bytes) -> bytes:
    """`stream` with a few bytes flipped, inserted or cut."""
    data = bytearray(stream)
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "insert", "cut"]))
        if kind == "flip":
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from([b"\r\n", b"\n", b"\0", b":", b" ", b"%"]))
        else:
            del data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """A connection's bytes (pipelined requests, maybe mutated) as the reads that bring it."""
    count = draw(st.sampled_from([3, 1, 2, 4]))  # pipelined
    stream = b"".join(draw(request()) for _ in range(count))
    if draw(one_in(3)):
        stream = draw(mutated(stream))
    if draw(one_in(10)):  # bytes of any kind
        stream = draw(st.binary(min_size=1, max_size=600))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=6))))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True) if a < b]


# -- the property -----------------------------------------------------------------------------


def answers(written: bytes) -> Iterator[int]:
    """The status of each answer written (interim 100s included), checking their framing."""
    at = 0
    while at < len(written):
        end = written.index(b"\r\n\r\n", at)
        head = written[at:end].split(b"\r\n")
        version, status, _ = head[0].split(b" ", 2)
        assert version == b"HTTP/1.1", head[0]
        fields = dict(line.lower().split(b": ", 1) for line in head[1:])
        length = int(fields.get(b"content-length", b"0"))
        assert int(status) == 100 or b"content-length" in fields, head
        at = end + 4 + length
        assert at <= len(written), "an answer shorter than its content-length"
        yield int(status)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(reads=streams())
def test_any_bytes_get_4xx_or_answers_never_an_exception_a_5xx_or_a_growing_buffer(
    loop: asyncio.AbstractEventLoop, reads: list[bytes]
) -> None:
    app = App()
    server = HttpServer(app, port=0)  # type: ignore[arg-type]  # never started: fed directly
    server.loop = loop
    connection = HttpConnection(server)
    transport = Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    largest = 0
    for data in reads:
        began = time.monotonic()
        connection.data_received(data)  # raises nothing
        assert time.monotonic() - began < READ_S
        largest = max(largest, len(data))
        within_limits(connection, largest)
    app.answer_later()
    assert connection._held == 0 and not connection.pending
    connection.sweep(time.monotonic() + 10_000)  # the timeouts: a 408, or a close
    connection.connection_lost(None)
    statuses = list(answers(bytes(transport.written)))
    assert all(status < 500 for status in statuses), statuses
    assert server.unread == 0 and not server.connections
    loop.run_until_complete(asyncio.sleep(0))  # the turn of reads ends


def within_limits(connection: HttpConnection, read: int) -> None:
    """What a connection holds of a request is bounded by the limits, and by the `read` that
    brought it past one (refused then, it holds no more)."""
    assert len(connection._url) <= MAX_URL_BYTES + read
    header_bytes = sum(len(name) + len(value) for name, value in connection._headers.items())
    assert header_bytes <= MAX_URL_BYTES + MAX_HEADER_BYTES + read
    assert sum(len(piece) for piece in connection._body) <= LIMIT
    assert connection._blank <= MAX_BLANK_BYTES + read
    # answers held behind an earlier one, counted (the transport here holds nothing unsent)
    assert connection.unread == connection._held <= connection._max_unread
