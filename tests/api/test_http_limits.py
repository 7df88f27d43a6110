"""The limits that make Headway's HTTP server safe to expose (`api.limits`), on real loopback
sockets: decoded body size, URL and header size, read timeouts and the connection cap. Each
refusal is a clear 4xx/5xx with the reason, then the connection closes; other clients are
served meanwhile."""

from __future__ import annotations

import asyncio
import gzip
import resource
import subprocess
import sys
import zlib

import orjson
import pytest
from tests.api.echo_server import LIMIT, EchoApp, connect, request, response, serve

from headway.api.http import HttpServer
from headway.api.limits import (
    MAX_HEADER_BYTES,
    MAX_URL_BYTES,
    RESERVED_FDS,
    BodyDecoder,
    body_decoder,
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
        for reader, writer in held:  # each is served, so each is counted
            writer.write(request("/now/held"))
            assert (await response(reader))[0] == 200
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
