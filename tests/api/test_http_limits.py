"""The limits that make Headway's HTTP server safe to expose (`api.limits`), on real loopback
sockets: decoded body size, URL and header size, read timeouts and the connection cap. Each
refusal is a clear 4xx/5xx with the reason, then the connection closes; other clients are
served meanwhile."""

from __future__ import annotations

import asyncio
import gzip
import resource
import socket
import subprocess
import sys
import zlib
from collections.abc import Callable

import orjson
import pytest
from tests.api.echo_server import LIMIT, EchoApp, connect, request, response, serve

from headway.api.connection import HttpConnection
from headway.api.http import HttpServer
from headway.api.limits import (
    MAX_BLANK_BYTES,
    MAX_HEADER_BYTES,
    MAX_URL_BYTES,
    RESERVED_FDS,
    BodyDecoder,
    body_decoder,
    decode_body,
)
from headway.errors import InvalidInput, PayloadTooLarge


async def refused(reader: asyncio.StreamReader, status: int) -> str:
    """The one answer before the server closes: `status`, `connection: close`; its error."""
    got, headers, body = await response(reader)
    assert got == status and headers["connection"] == "close", (got, body)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # then closed
    return str(orjson.loads(body)["error"])


async def served(server: HttpServer, path: str = "/now/other") -> None:
    """Another client is answered meanwhile."""
    reader, writer = await connect(server)
    writer.write(request(path))
    assert (await response(reader))[0] == 200
    writer.close()


# -- bodies -----------------------------------------------------------------------------------


def test_gzip_and_deflate_bodies_reach_the_app_decoded() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        for encoded, name in (
            (gzip.compress(b"hello"), "gzip"),
            (zlib.compress(b"bye"), "deflate"),
        ):
            writer.write(request("/z", encoded, f"Content-Encoding: {name}"))
            status, _, body = await response(reader)
            assert status == 200, body
        assert [b for _, _, b in app.seen] == [b"hello", b"bye"]
        writer.close()

    serve(test)


def test_a_gzip_bomb_is_refused_at_the_decoded_limit_without_decoding_it_whole() -> None:
    bomb = gzip.compress(b"\0" * (LIMIT * 10_000))  # 10 MB decoded from ~10 kB sent
    assert len(bomb) < LIMIT * 20

    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        # a chunked body, so that only the decoded size can be over the limit
        chunked = b"POST /z HTTP/1.1\r\nHost: t\r\nContent-Encoding: gzip\r\n"
        writer.write(chunked + b"Transfer-Encoding: chunked\r\n\r\n")
        piece = bomb[:500]
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        error = await refused(reader, 413)
        assert "gzip-decoded request body exceeds the limit of 1000 bytes" in error
        assert app.seen == []
        await served(server)

    serve(test)


def test_the_decoder_never_holds_more_than_the_limit_plus_one_byte() -> None:
    decoder = BodyDecoder("gzip", 1000)
    bomb = gzip.compress(b"\0" * 10**8)  # 100 MB decoded
    try:
        decoder.feed(bomb)
    except PayloadTooLarge:
        pass
    else:
        raise AssertionError("a 100 MB body passed a 1000 byte limit")
    assert decoder.size == 1001


def test_a_truncated_or_corrupt_gzip_body_and_an_unknown_encoding_are_refused() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/z", gzip.compress(b"hello")[:-12], "Content-Encoding: gzip"))
        assert "the stream is truncated" in await refused(reader, 400)
        reader, writer = await connect(server)
        writer.write(request("/z", b"not gzip at all", "Content-Encoding: gzip"))
        assert "body is not valid gzip" in await refused(reader, 400)
        reader, writer = await connect(server)
        writer.write(request("/z", b"x", "Content-Encoding: br"))
        assert "Content-Encoding 'br' is not supported" in await refused(reader, 415)
        assert app.seen == []

    serve(test)


def test_a_second_gzip_member_or_junk_after_the_stream_is_refused_not_ignored() -> None:
    one = gzip.compress(b"hello")
    for body, encoding in (
        (one + gzip.compress(b"world"), "gzip"),  # two members
        (one + b"junk", "gzip"),
        (one + b"\0" * 8, "gzip"),  # padding
        (zlib.compress(b"hello") + b"x", "deflate"),
    ):
        try:
            decode_body(encoding.encode(), body, 1000)
        except InvalidInput as exc:
            assert "follow the end of its compressed stream" in exc.message
        else:
            raise AssertionError(f"{body!r} was decoded")
        decoder = BodyDecoder(encoding, 1000)  # bytes that come after it, in a later piece
        complete = body[: len(one)] if encoding == "gzip" else zlib.compress(b"hello")
        assert decoder.feed(complete) == b"hello"
        try:
            decoder.feed(b"x")
        except InvalidInput:
            pass
        else:
            raise AssertionError("bytes after the stream were ignored")

    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/z", one + gzip.compress(b"world"), "Content-Encoding: gzip"))
        assert "a second gzip member, or junk" in await refused(reader, 400)
        assert app.seen == []

    serve(test)


def test_identity_and_missing_encodings_need_no_decoder() -> None:
    assert body_decoder(None, 10) is None and body_decoder(b"identity", 10) is None
    try:
        body_decoder(b"gzip, br", 10)
    except InvalidInput as exc:
        assert "not supported" in exc.message
    else:
        raise AssertionError("a chain of encodings was accepted")


# -- URL and headers --------------------------------------------------------------------------


def test_a_url_over_the_limit_is_414_as_soon_as_it_is_read() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/now/" + "a" * (MAX_URL_BYTES - 100), method="GET"))
        assert (await response(reader))[0] == 200  # under the limit: served
        writer.write(b"GET /" + b"a" * (MAX_URL_BYTES // 2))  # sent in pieces, never finished
        await asyncio.sleep(0.05)
        writer.write(b"a" * (MAX_URL_BYTES // 2 + 10))
        assert "exceeds the limit of 8192 bytes" in await refused(reader, 414)
        await served(server)

    serve(test)


def test_headers_over_the_limit_are_431_whether_many_small_or_one_never_ending() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        many = [f"X-H{k}: {'v' * 90}" for k in range(MAX_HEADER_BYTES // 90)]
        writer.write(request("/now/h", b"", *many))
        assert "exceed the limit of 16384 bytes" in await refused(reader, 431)

        reader, writer = await connect(server)
        writer.write(b"GET /now/h HTTP/1.1\r\nX-Long: ")  # one header, read after read
        sending = asyncio.ensure_future(trickle(writer, b"v" * 4096 * 40, piece=4096, pause=0.005))
        assert "exceed the limit of 16384 bytes" in await refused(reader, 431)
        sending.cancel()
        assert app.seen == []
        await served(server)

    serve(test)


def _head_of(header_bytes: int) -> tuple[bytes, bytes]:
    """A GET head whose headers' names and values hold exactly `header_bytes` bytes, repeated
    names among them (merged into one value by the server), as two pieces: the first under
    the limit, the second taking it to `header_bytes`."""
    lines = [b"Host: t"] + [b"X-Same: " + b"v" * 990 for _ in range(12)]  # 4 + 1 + 12 * 996
    size = sum(len(line) - 2 for line in lines)  # ": " is not a name or value byte
    assert size < MAX_HEADER_BYTES
    rest = header_bytes - size - len(b"X-Last")
    lines.append(b"X-Last: " + b"w" * rest)
    first = b"GET /now/h HTTP/1.1\r\n" + b"\r\n".join(lines[:-1]) + b"\r\n"
    return first, lines[-1] + b"\r\n\r\n"


def test_headers_are_counted_exactly_when_a_head_spans_reads_and_repeats_names() -> None:
    # The usual head arrives in one read under the limit and is not counted header by header;
    # one that spans reads past the limit is, from its first header, repeated names included.
    async def test(server: HttpServer, app: EchoApp) -> None:
        for size, status in ((MAX_HEADER_BYTES, 200), (MAX_HEADER_BYTES + 1, 431)):
            reader, writer = await connect(server)
            first, second = _head_of(size)
            writer.write(first)
            await writer.drain()
            await asyncio.sleep(0.05)  # the second piece in a read of its own
            writer.write(second)
            if status == 200:
                assert (await response(reader))[0] == 200
                writer.close()
            else:
                error = await refused(reader, 431)
                assert f"request headers of {size}+ bytes exceed" in error
        assert len(app.seen) == 1

    serve(test)


# -- read timeouts ----------------------------------------------------------------------------


def test_a_head_trickled_a_byte_at_a_time_is_timed_out_with_408() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        trickling = asyncio.ensure_future(trickle(writer, b"GET /now/slow HTTP/1.1\r\nX-A: b"))
        error = await refused(reader, 408)
        assert "request head did not arrive within 0.3 s (--header-timeout)" in error
        trickling.cancel()
        await served(server)

    serve(test, header_timeout=0.3)


def test_a_body_trickled_a_byte_at_a_time_is_timed_out_with_408() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(b"POST /slow HTTP/1.1\r\nHost: t\r\nContent-Length: 500\r\n\r\n")
        trickling = asyncio.ensure_future(trickle(writer, b"x" * 500))
        error = await refused(reader, 408)
        assert "request body did not arrive within 0.3 s of its head (--body-timeout)" in error
        trickling.cancel()
        assert app.seen == []

    serve(test, body_timeout=0.3)


def test_a_request_that_arrives_in_time_is_not_timed_out() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        for k in range(3):  # each within its timeouts, together well past them
            writer.write(b"POST /now/%d HTTP/1.1\r\nHost: t\r\n" % k)
            await asyncio.sleep(0.15)
            writer.write(b"Content-Length: 2\r\n\r\n")
            await asyncio.sleep(0.15)
            writer.write(b"ok")
            assert (await response(reader))[0] == 200
        writer.close()

    serve(test, header_timeout=0.5, body_timeout=0.5)


async def trickle(
    writer: asyncio.StreamWriter, data: bytes, piece: int = 1, pause: float = 0.05
) -> None:
    """Send `data` a `piece` at a time, `pause` s apart, until done or the server closes."""
    for k in range(0, len(data), piece):
        if writer.is_closing():
            return
        writer.write(data[k : k + piece])
        try:
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(pause)


# -- the connection cap -----------------------------------------------------------------------


def test_a_connection_over_the_cap_is_answered_503_with_the_reason_and_closed() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        held = [await connect(server) for _ in range(3)]
        for _, writer in held:  # each is reading a request's head: counted, and not idle
            writer.write(b"GET /now/held HTTP/1.1\r\n")
        await until(lambda: all(c._phase for c in server.connections), server)
        reader, writer = await connect(server)
        writer.write(request("/now/fourth"))
        error = await refused(reader, 503)
        assert "serves at most 3 at once (--max-connections)" in error
        assert len(server.connections) == 3
        held[0][1].close()
        for _ in range(100):  # until the server has seen it go
            if len(server.connections) < 3:
                break
            await asyncio.sleep(0.01)
        await served(server)  # a place is free again

    serve(test, max_connections=3)


async def until(condition: Callable[[], bool], server: HttpServer) -> None:
    """Wait (up to 5 s) until `condition()` holds of the server's state."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached; {len(server.connections)} connections")


def test_at_the_cap_the_longest_idle_connection_is_closed_for_a_new_one() -> None:
    """nginx's reusable connections: a connection waiting for its next request gives its
    place to a new client (the longest idle first) rather than the new one being refused;
    one with a request under way or an answer unsent keeps its place."""

    async def test(server: HttpServer, app: EchoApp) -> None:
        idle = []
        for k in range(3):
            reader, writer = await connect(server)
            writer.write(request(f"/now/idle{k}"))
            assert (await response(reader))[0] == 200
            idle.append((reader, writer))
        # a fourth and a fifth client: each is served, in the place of the longest idle
        kept = []  # (a writer that is collected closes its connection)
        for k in range(2):
            reader, writer = await connect(server)
            kept.append(writer)
            writer.write(request(f"/now/new{k}"))
            assert (await response(reader))[0] == 200
            assert await asyncio.wait_for(idle[k][0].read(), 5) == b""  # closed, no answer
            writer.write(b"GET /now/busy HTTP/1.1\r\n")  # now reading a head: not idle
        await until(lambda: sum(c._phase == 1 for c in server.connections) == 2, server)
        reader, writer = await connect(server)  # idle[2] is the one idle left: it goes
        kept.append(writer)
        writer.write(request("/now/third"))
        assert (await response(reader))[0] == 200
        assert await asyncio.wait_for(idle[2][0].read(), 5) == b""
        writer.write(b"GET /now/busy HTTP/1.1\r\n")
        await until(lambda: sum(c._phase == 1 for c in server.connections) == 3, server)
        reader, writer = await connect(server)  # none idle: refused
        writer.write(request("/now/refused"))
        assert "serves at most 3 at once" in await refused(reader, 503)

    serve(test, max_connections=3)


def test_empty_lines_before_a_request_are_allowed_a_few_then_refused() -> None:
    # RFC 9112 2.2: a server SHOULD ignore at least one empty line where a request is due
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(b"\r\n\r\n" + request("/now/a"))
        assert (await response(reader))[0] == 200
        writer.write(b"\r\n")  # in reads of their own, counted since the last request
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"\n\r\n\r\n" + request("/now/b"))
        assert (await response(reader))[0] == 200
        for _ in range(MAX_BLANK_BYTES // 2 + 1):
            writer.write(b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)
        assert "more than 8 bytes of empty lines" in await refused(reader, 400)
        assert [p for _, p, _ in app.seen] == ["/now/a", "/now/b"]
        await served(server)

    serve(test)


def test_empty_lines_are_no_activity_for_the_keep_alive() -> None:
    """A client that sends a CRLF now and then holds no connection past the keep-alive: the
    idle timer runs from the last answer, whatever empty lines came after it."""

    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, writer = await connect(server)
        writer.write(request("/now/a"))
        assert (await response(reader))[0] == 200
        (connection,) = server.connections
        answered = connection.last_active
        for _ in range(3):
            writer.write(b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.02)
        assert connection.last_active == answered and connection.idle
        connection.sweep(answered + 29)  # within --keep-alive: kept
        assert not connection.closing
        connection.sweep(answered + 31)  # past it: closed, CRLFs or not
        assert await asyncio.wait_for(reader.read(), 5) == b""

    serve(test, keep_alive=30)


def cap_under_file_limit(soft: int, hard: int, wanted: int) -> tuple[int, int, str]:
    """`connection_cap(wanted)` in a process started with the file limit (soft, hard): the cap,
    the soft limit after it, and what it logged."""
    code = (
        "import logging, resource, sys\n"
        "logging.basicConfig(stream=sys.stdout, format='%(message)s')\n"
        "from headway.api.limits import connection_cap\n"
        f"cap = connection_cap({wanted})\n"
        "print(cap, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=limit, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    cap, after = out[-1].split()
    return int(cap), int(after), "\n".join(out[:-1])


def test_the_connection_cap_fits_the_file_limit_raising_it_when_allowed() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2000:
        pytest.skip(f"the hard file limit here is {hard}")
    # the soft limit is raised toward the hard one to fit the cap: the cap holds, not EMFILE
    assert cap_under_file_limit(512, 2000, 1000)[:2] == (1000, 1000 + RESERVED_FDS)
    # it cannot be raised past the hard one: the cap is lowered, and the log says so
    cap, after, logged = cap_under_file_limit(512, 512, 1000)
    assert (cap, after) == (512 - RESERVED_FDS, 512)
    assert "--max-connections 1000 lowered to 256: the file limit is 512" in logged


def test_a_refusal_reaches_a_client_that_is_still_sending() -> None:
    """Closed after its answer, a connection still drains what the client sends (a lingering
    close): closing with input unread would reset it, and the reset can overtake the answer."""

    async def test(server: HttpServer, app: EchoApp) -> None:
        for _ in range(5):
            reader, writer = await connect(server)
            writer.write(b"NOT HTTP AT ALL\r\n\r\n" + b"x" * 2_000_000)
            assert "malformed HTTP request" in await refused(reader, 400)
            writer.close()
        await served(server)

    serve(test)


# -- answers a client does not read -----------------------------------------------------------


async def not_reading(
    server: HttpServer, *paths: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, HttpConnection]:
    """A client that reads nothing, having sent a request for each of `paths` at once
    (pipelined); its sockets, both ends, take little (so what the server writes waits in the
    server, whatever the machine's socket buffer sizes)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.transport.pause_reading()  # type: ignore[attr-defined]
    ours = sock.getsockname()
    found: list[HttpConnection] = []

    def accepted() -> bool:
        found[:] = [
            c
            for c in server.connections
            if c.transport is not None and c.transport.get_extra_info("peername") == ours
        ]
        return bool(found)

    await until(accepted, server)
    found[0].transport.get_extra_info("socket").setsockopt(  # type: ignore[union-attr]
        socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
    )
    writer.write(b"".join(request(path, method="GET") for path in paths))
    return reader, writer, found[0]


async def dropped(reader: asyncio.StreamReader) -> None:
    """The server closed the connection before its answers were read (a reset, or EOF)."""
    reader._transport.resume_reading()  # type: ignore[attr-defined]
    try:
        while await asyncio.wait_for(reader.read(2**20), 5):
            pass
    except ConnectionError:
        pass


MB = 2**20


def test_a_client_that_takes_none_of_its_answer_is_closed_after_the_write_timeout() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, _writer, connection = await not_reading(server, f"/big/{3 * MB}")
        await until(lambda: server.unread > 2 * MB, server)
        assert not connection.idle  # its answer is unsent: not closed as idle, nor reclaimed
        began = connection._write_stamp
        connection.sweep(began + 100)  # within --write-timeout
        assert not connection.closing and server.unread > 0
        reader._transport.resume_reading()  # type: ignore[attr-defined]
        await reader.readexactly(MB)  # the client takes some: its timer starts again
        reader._transport.pause_reading()  # type: ignore[attr-defined]
        unsent = connection._unsent_seen
        await until(
            lambda: connection.transport.get_write_buffer_size() < unsent,  # type: ignore[union-attr]
            server,
        )
        connection.sweep(began + 150)
        assert not connection.closing and connection._write_stamp == began + 150
        connection.sweep(began + 200)
        connection.sweep(began + 271)  # then none for longer than the timeout: dropped
        assert connection.closing and server.unread == 0
        await dropped(reader)
        await until(lambda: not server.connections, server)
        await served(server)

    serve(test, write_timeout=120)


def test_a_closing_connection_whose_client_does_not_read_is_dropped_all_the_same() -> None:
    """A transport closes only once its unsent bytes are sent: closed as idle, or after a
    refusal, a client that does not read would hold it (and its answers) for ever."""

    async def test(server: HttpServer, app: EchoApp) -> None:
        reader, _writer, connection = await not_reading(server, f"/big/{3 * MB}")
        await until(lambda: server.unread > 2 * MB, server)
        connection.close()
        assert connection in server.connections  # closing, not closed: its bytes wait
        await until(lambda: not server.connections, server)  # the sweep, past the timeout
        assert server.unread == 0
        await dropped(reader)

    serve(test, write_timeout=0.3)


def test_unread_answers_are_bounded_per_connection() -> None:
    # pipelined requests answered while their client reads none: past the bound (2 largest
    # answers, 4 MiB each here), the connection is dropped rather than hold more
    async def test(server: HttpServer, app: EchoApp) -> None:
        three = f"/big/{3 * MB}"
        reader, _writer, _ = await not_reading(server, three, three, three)
        await dropped(reader)
        await until(lambda: not server.connections and server.unread == 0, server)
        # answers held behind a slow one count alike
        reader, _writer, _ = await not_reading(server, "/sleep/1", three, three, three)
        await until(lambda: not server.connections and server.unread == 0, server)
        assert "/sleep/1" not in app.ended  # dropped while its answers waited behind it
        await dropped(reader)
        await served(server)

    serve(test)


def test_answers_that_come_after_their_client_left_are_not_counted_as_unread() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        _, writer = await connect(server)
        writer.write(request("/sleep/0.6") + request("/sleep/0.1"))  # the second waits behind
        await until(lambda: "/sleep/0.1" in app.began, server)
        writer.close()
        await until(lambda: not server.connections, server)
        await until(lambda: "/sleep/0.1" in app.ended, server)
        await asyncio.sleep(0.05)  # its answer, held behind the first, of a connection gone
        assert server.unread == 0
        await until(lambda: "/sleep/0.6" in app.ended, server)
        assert server.unread == 0

    serve(test)


def test_unread_answers_are_bounded_for_the_whole_server_dropping_who_holds_most() -> None:
    async def test(server: HttpServer, app: EchoApp) -> None:
        small, writer, kept = await not_reading(server, f"/big/{2 * MB}")
        await until(lambda: server.unread > MB, server)
        large, _other_writer, _ = await not_reading(server, f"/big/{4 * MB}")
        await dropped(large)  # the two hold more than 5 MiB: the one holding most goes
        await until(lambda: server.connections == {kept}, server)
        assert 0 < server.unread <= server.max_unread
        small._transport.resume_reading()  # type: ignore[attr-defined]
        status, _, body = await response(small)  # the other keeps its answer
        assert status == 200 and len(body) == 2 * MB
        await until(lambda: server.unread == 0, server)
        writer.close()

    serve(test, max_unread=5 * MB)
