"""HTTP/2 frames as bytes (RFC 9113) and header blocks through HPACK (`hpack`, RFC 7541).

What `api.grpc.h2` needs to serve unary gRPC calls: frame headers, the frames a server sends,
SETTINGS parsed, and header blocks decoded and encoded with two caches. A block the client
sends again while the decoder's dynamic table is unchanged decodes to the same headers (a
gRPC client's blocks reference the table after its first call), so decoded blocks are kept
by (table generation, bytes). Answers are encoded without indexing (`NeverIndexedHeaderTuple`
never touches the table), so an answer's block is the same bytes every time and is kept.
"""

from __future__ import annotations

import struct
from typing import Any

import hpack
from hpack import NeverIndexedHeaderTuple

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 §6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9

# Flags.
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# Error codes (RFC 9113 §7).
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB

# Settings (RFC 9113 §6.5.2).
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6

#: Frames no larger than this every peer accepts (and this server reads).
DEFAULT_FRAME_SIZE = 16_384
DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1

_HEAD = struct.Struct(">HBBBL")  # length (24 bits as 16 + 8), type, flags, stream id
_PAIR = struct.Struct(">HL")


class ConnectionFault(Exception):
    """The peer broke the protocol: answer GOAWAY with `code` and close."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StreamFault(Exception):
    """One stream broke the protocol: answer RST_STREAM with `code`; the connection lives."""

    def __init__(self, stream: int, code: int, message: str) -> None:
        super().__init__(message)
        self.stream = stream
        self.code = code
        self.message = message


def frame_head(data: bytes, at: int) -> tuple[int, int, int, int]:
    """(length, type, flags, stream id) of the frame whose 9-byte head starts at `at`."""
    high, low, kind, flags, stream = _HEAD.unpack_from(data, at)
    return high << 8 | low, kind, flags, stream & 0x7FFFFFFF


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return _HEAD.pack(size >> 8, size & 0xFF, kind, flags, stream) + payload


def settings(pairs: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_PAIR.pack(key, value) for key, value in pairs.items()))


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    if len(payload) % 6:
        raise ConnectionFault(FRAME_SIZE_ERROR, "SETTINGS payload is not a multiple of 6")
    return [_PAIR.unpack_from(payload, at) for at in range(0, len(payload), 6)]


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big"))


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, code.to_bytes(4, "big"))


def goaway(last_stream: int, code: int, message: str = "") -> bytes:
    payload = last_stream.to_bytes(4, "big") + code.to_bytes(4, "big")
    return frame(GOAWAY, 0, 0, payload + message.encode("utf-8", "replace")[:1024])


def data_head(stream: int, size: int, end: bool = False) -> bytes:
    """The head of a DATA frame of `size` bytes (the payload follows, not copied here)."""
    return _HEAD.pack(size >> 8, size & 0xFF, DATA, END_STREAM if end else 0, stream)


def headers_head(stream: int, size: int, end: bool) -> bytes:
    flags = END_HEADERS | (END_STREAM if end else 0)
    return _HEAD.pack(size >> 8, size & 0xFF, HEADERS, flags, stream)


def unpadded(payload: bytes, flags: int, stream: int, priority: bool = False) -> bytes:
    """A DATA or HEADERS payload without its padding (and HEADERS' priority fields)."""
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload:
            raise ConnectionFault(PROTOCOL_ERROR, f"stream {stream}: padded frame, no pad length")
        start = 1
        end -= payload[0]
    if priority and flags & PRIORITY_FLAG:
        start += 5
    if end < start:
        raise ConnectionFault(PROTOCOL_ERROR, f"stream {stream}: padding longer than the frame")
    return payload[start:end] if start or end < len(payload) else payload


Headers = list[tuple[bytes, bytes]]


def first_value(headers: Headers, key: bytes) -> bytes | None:
    """The first value of header `key` (lower-case), or None."""
    for name, value in headers:
        if name == key:
            return value
    return None


class HeaderDecoder:
    """HPACK decoding for one connection, with blocks that leave the table alone cached.

    `generation` counts the changes to the decoder's dynamic table; a cached block is valid
    only within the generation it was decoded in, so a change clears the cache."""

    #: Blocks kept per generation (a client sends few distinct ones).
    CACHE_SIZE = 64

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._table = self._decoder.header_table
        self.generation = 0
        self._cache: dict[bytes, Headers] = {}

    def decode(self, block: bytes) -> Headers:
        """The block's (name, value) pairs; ConnectionFault when it cannot be decoded (the
        table is then out of step with the peer's, so the connection cannot go on)."""
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        table = self._table
        entries = table.dynamic_entries
        before = (len(entries), entries[0] if entries else None, table.maxsize)
        try:
            headers: Any = self._decoder.decode(block, raw=True)
        except hpack.OversizedHeaderListError as exc:
            raise ConnectionFault(ENHANCE_YOUR_CALM, f"header list too large: {exc}") from None
        except (hpack.HPACKError, ValueError, IndexError) as exc:
            raise ConnectionFault(COMPRESSION_ERROR, f"bad header block: {exc}") from None
        decoded: Headers = [(bytes(name), bytes(value)) for name, value in headers]
        after = (len(entries), entries[0] if entries else None, table.maxsize)
        if after[0] != before[0] or after[1] is not before[1] or after[2] != before[2]:
            self.generation += 1
            self._cache.clear()
        elif len(self._cache) < self.CACHE_SIZE:
            self._cache[block] = decoded
        return decoded


_ENCODER = hpack.Encoder()
_BLOCKS: dict[tuple[tuple[bytes, bytes], ...], bytes] = {}


def encode(headers: tuple[tuple[bytes, bytes], ...]) -> bytes:
    """An answer's header block, never indexed: the same bytes whatever the peer's table."""
    block = _BLOCKS.get(headers)
    if block is None:
        block = _ENCODER.encode([NeverIndexedHeaderTuple(n, v) for n, v in headers])
        if len(_BLOCKS) < 256:  # status lines and success trailers; error texts vary
            _BLOCKS[headers] = block
    return block
