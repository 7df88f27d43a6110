"""What a client may send and for how long: sizes, encodings, read times, connections.

One place for the limits that make the server safe to expose, with the status each answers:
413 for a body over `--max-body-mb` (the decoded size of a gzip or deflate body, decoded
piece by piece as it arrives, never all at once; 400 for bytes after its compressed stream),
414 for a long URL, 431 for large headers, 415 for a content coding the server does not
decode, 408 for a client too slow to send its request (`--header-timeout`, `--body-timeout`),
400 for empty lines past a few between requests, 400 for an answer over `--max-answer-mb`,
and 503 for a connection over `--max-connections` when no idle one can be closed for it. A
client that leaves its answers unread is closed after `--write-timeout`, or sooner when its
unread answers pass the connection's or the server's bound (`--max-unread-mb`). The figures
follow what nginx, Go, Node and Envoy default to.
"""

from __future__ import annotations

import logging
import zlib

from headway.errors import InvalidInput, PayloadTooLarge

log = logging.getLogger("headway.http")

#: The longest request target (path and query) answered; longer is 414.
MAX_URL_BYTES = 8 * 1024
#: The most header bytes (names and values) one request may carry; more is 431.
MAX_HEADER_BYTES = 16 * 1024
#: Seconds from a request's first byte until its whole head must have arrived (408 after).
HEADER_TIMEOUT_S = 10.0
#: Seconds from the end of a request's head until its whole body must have arrived.
BODY_TIMEOUT_S = 60.0
#: Seconds a client may leave answers unread before its connection closes (nginx's send_timeout).
WRITE_TIMEOUT_S = 60.0
#: Connections served at once; one more is answered 503 and closed.
MAX_CONNECTIONS = 4096
#: File descriptors kept free of connections for workers, the store and logs.
RESERVED_FDS = 256
#: CR and LF bytes a connection may send where a request line is due (RFC 9112 2.2: a server
#: SHOULD ignore at least one empty line there; Go's net/http discards up to 4 such bytes).
#: More is 400 and the connection closes; they never count as activity for the keep-alive.
MAX_BLANK_BYTES = 8
#: Seconds a connection's unsent answer bytes may wait with none of them taken by its client;
#: then it is closed and what it left unread dropped (nginx's send_timeout).
WRITE_TIMEOUT_S = 60.0
#: Bytes of a streamed answer (server-sent events) a client may leave unsent past the socket's
#: buffers before the stream is cut and its request withdrawn (Envoy's default
#: per_connection_buffer_limit_bytes): a reader that stops reading mid-stream holds no more.
STREAM_BUFFER_BYTES = 1 * 2**20
#: Seconds a stream (an event stream, a gRPC streaming call) may send and receive nothing before
#: it is ended with an error (Envoy's stream_idle_timeout).
STREAM_IDLE_TIMEOUT_S = 300.0
#: The largest answer, in largest request bodies (`--max-answer-mb`'s default): room for the
#: answer to a request at the body limit rendered as JSON from binary tensors. Larger is 400.
ANSWER_PER_BODY = 4
#: The answer bytes one connection may leave unread (past what its socket and the transport's
#: high-water mark take), in largest answers: a client that does not pipeline never has more
#: than one; past it the connection is closed.
UNREAD_PER_CONNECTION = 2
#: The answer bytes that the whole server holds unread by their clients, in largest answers
#: (`--max-unread-mb`'s default); past it the connections holding the most are closed (what
#: Envoy's overload manager does to the streams using the most buffer memory).
UNREAD_ANSWERS = 4


class UnsupportedEncoding(InvalidInput):
    """A Content-Encoding other than gzip, deflate or identity (HTTP 415)."""

    reason = "unsupported_encoding"


class AnswerTooLarge(InvalidInput):
    """An answer over `--max-answer-mb` (HTTP 400, gRPC RESOURCE_EXHAUSTED): the request asks
    for more than the server sends at once. Never sent, so never held for a slow client."""

    reason = "answer_too_large"


def answer_too_large(size: int, limit: int) -> AnswerTooLarge:
    return AnswerTooLarge(
        f"the answer of {size}+ bytes exceeds the limit of {limit} bytes (--max-answer-mb); "
        "ask for fewer rows or outputs, or binary outputs (REST), or raise the limit"
    )


def max_answer_bytes(max_body_bytes: int, answer_mb: float | None = None) -> int:
    """The largest answer: `answer_mb`, else ANSWER_PER_BODY largest request bodies."""
    return int(answer_mb * 2**20) if answer_mb else ANSWER_PER_BODY * max_body_bytes


def uri_too_long(size: int) -> str:
    return f"request target of {size}+ bytes exceeds the limit of {MAX_URL_BYTES} bytes"


def headers_too_large(size: int) -> str:
    return f"request headers of {size}+ bytes exceed the limit of {MAX_HEADER_BYTES} bytes"


class BodyDecoder:
    """Decodes a gzip or deflate body as its pieces arrive, refusing it (PayloadTooLarge) the
    moment its decoded size passes `limit`: a small compressed body cannot become a large one
    in memory, and no call decodes more than `limit` + 1 bytes."""

    __slots__ = ("_zlib", "encoding", "limit", "size")

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding = encoding
        self.limit = limit
        self.size = 0
        self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else 15)

    def feed(self, piece: bytes) -> bytes:
        decoder = self._zlib
        try:
            out = decoder.decompress(piece, self.limit - self.size + 1)
        except zlib.error as exc:
            raise InvalidInput(f"body is not valid {self.encoding}: {exc}") from None
        if decoder.eof and decoder.unused_data:
            self._trailing(len(decoder.unused_data))
        self.size += len(out)
        if self.size > self.limit:
            raise PayloadTooLarge(
                f"{self.encoding}-decoded request body exceeds the limit of {self.limit} bytes "
                "(--max-body-mb)"
            )
        return out

    def _trailing(self, size: int) -> None:
        """Bytes after the end of the compressed stream (a second gzip member, or junk): not
        ignored, as the body would not be what was sent, nor decoded, as one body is one
        stream."""
        raise InvalidInput(
            f"body is not valid {self.encoding}: {size}+ bytes follow the end of its compressed "
            "stream (a second gzip member, or junk); send the body as one stream"
        )

    def finish(self) -> bytes:
        """What remains once the body has arrived; a truncated stream is a 400."""
        if not self._zlib.eof:
            raise InvalidInput(f"body is not valid {self.encoding}: the stream is truncated")
        return b""


def body_decoder(encoding: bytes | None, limit: int) -> BodyDecoder | None:
    """The decoder a request's Content-Encoding asks for (None: the body is as sent)."""
    if encoding is None:
        return None
    name = encoding.strip().lower().decode("latin-1")
    if name in ("gzip", "x-gzip", "deflate"):
        return BodyDecoder("deflate" if name == "deflate" else "gzip", limit)
    if name in ("", "identity"):
        return None
    raise UnsupportedEncoding(
        f"Content-Encoding {name!r} is not supported; send gzip, deflate or an unencoded body"
    )


def decode_body(encoding: bytes | None, body: bytes, limit: int) -> bytes:
    """A whole body, decoded within `limit` (for callers that already hold all of it)."""
    decoder = body_decoder(encoding, limit)
    if decoder is None:
        return body
    out = decoder.feed(body)
    decoder.finish()
    return out


def connection_cap(wanted: int) -> int:
    """`wanted`, or fewer if the process may not open that many files: raises the soft file
    limit towards the hard one first (as nginx's worker_rlimit_nofile does), so that the cap,
    not EMFILE in accept, is what a flood of connections meets."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows has no file limit to raise
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        cap = max(1, soft - RESERVED_FDS)
        log.warning(
            "--max-connections %d lowered to %d: the file limit is %d (ulimit -n)",
            wanted, cap, soft,
        )  # fmt: skip
        return cap
    return wanted
