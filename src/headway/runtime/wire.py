"""The worker wire format: a small JSON header frame, then one raw buffer frame per tensor.

No pickling: numeric tensors travel as their bytes (little-endian, C order) with dtype and
shape in the header; BYTES tensors use the Open Inference Protocol's length-prefixed layout.

On a byte stream (a Unix or TCP socket between the frontend and a worker) a message is a table
of its frames' lengths followed by the frames: `framed` writes it (gathered by one `sendmsg`,
no copy of the tensors) and a `FrameReader` splits the stream back into messages.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from headway.control.engine import Action, Reply
from headway.datatypes import decode_bytes_tensor, encode_bytes_tensor

Frames = list[bytes | memoryview | np.ndarray]

_COUNT = struct.Struct("<I")
#: How much a reader asks the kernel for at once. Not more: CPython allocates the whole size
#: for each recv, and above glibc's mmap threshold (128 KiB) that is an mmap and munmap per
#: call (docs/decisions.md).
READ_SIZE = 1 << 16


def pack(
    header: Action | Reply | dict[str, Any], tensors: dict[str, np.ndarray] | None = None
) -> Frames:
    """Frames for a header and its tensors (the header gains a `tensors` list)."""
    frames: Frames = [b""]
    specs = []
    for name, array in (tensors or {}).items():
        if array.dtype.kind in "OUS":
            specs.append([name, "BYTES", list(array.shape)])
            frames.append(encode_bytes_tensor(array))
        else:
            # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
            contiguous = array if array.flags.c_contiguous else np.array(array, order="C")
            if contiguous.dtype.byteorder == ">":
                contiguous = contiguous.astype(contiguous.dtype.newbyteorder("<"))
            specs.append([name, contiguous.dtype.str, list(contiguous.shape)])
            frames.append(contiguous)
    header["tensors"] = specs
    frames[0] = orjson.dumps(header)
    return frames


def unpack(frames: Sequence[bytes]) -> tuple[Any, dict[str, np.ndarray]]:
    """The header (an `Action`, a `Reply` or a worker's hello) and tensors of a message made
    by `pack` (numeric tensors are not copied)."""
    header = orjson.loads(frames[0])
    tensors: dict[str, np.ndarray] = {}
    for (name, dtype, shape), buffer in zip(header.get("tensors", ()), frames[1:], strict=True):
        if dtype == "BYTES":
            tensors[name] = decode_bytes_tensor(buffer, tuple(shape))
        else:
            tensors[name] = np.frombuffer(buffer, dtype=np.dtype(dtype)).reshape(shape)
    return header, tensors


def listen(endpoint: str) -> socket.socket:
    """A non-blocking listening socket for `ipc://PATH` or `tcp://HOST:PORT`."""
    scheme, _, address = endpoint.partition("://")
    if scheme == "ipc":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)
        sock.bind(address)
    elif scheme == "tcp":
        host, _, port = address.rpartition(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("" if host == "*" else host, int(port)))
    else:
        raise ValueError(f"worker endpoint {endpoint!r}: use ipc://PATH or tcp://HOST:PORT")
    sock.listen(64)
    sock.setblocking(False)
    return sock


def connect(endpoint: str) -> socket.socket:
    """A blocking socket connected to the frontend's `listen(endpoint)` (worker side)."""
    scheme, _, address = endpoint.partition("://")
    if scheme == "ipc":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
        return sock
    if scheme == "tcp":
        host, _, port = address.rpartition(":")
        sock = socket.create_connection(
            ("127.0.0.1" if host in ("*", "0.0.0.0") else host, int(port))
        )
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise ValueError(f"worker endpoint {endpoint!r}: use ipc://PATH or tcp://HOST:PORT")


def framed(frames: Frames) -> tuple[list[Any], int]:
    """The buffers that carry `frames` on a byte stream, and their total size in bytes."""
    # numpy declares ndarray a Buffer only for Python >= 3.12; it is one on 3.11 too.
    sizes = [memoryview(f).nbytes for f in frames]  # type: ignore[arg-type]
    table = struct.pack(f"<I{len(sizes)}Q", len(sizes), *sizes)
    return [table, *frames], len(table) + sum(sizes)


def remainder(buffers: list[Any], sent: int) -> list[memoryview]:
    """What is left of `buffers` after the first `sent` bytes went out (a partial write)."""
    left: list[memoryview] = []
    for buffer in buffers:
        view = memoryview(buffer)
        if not view.nbytes:
            continue  # an empty tensor: nothing to send (and a view of it will not cast)
        view = view.cast("B")
        if sent >= view.nbytes:
            sent -= view.nbytes
            continue
        left.append(view[sent:])
        sent = 0
    return left


def send_all(sock: socket.socket, frames: Frames) -> None:
    """Write one message on a blocking socket: one gathered `sendmsg`, more only if partial."""
    buffers, total = framed(frames)
    sent = sock.sendmsg(buffers)
    if sent < total:
        for view in remainder(buffers, sent):
            sock.sendall(view)


class FrameReader:
    """Splits a byte stream, however the kernel chunked it, back into `framed` messages."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes read of a message not yet complete."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[list[bytes]]:
        """The messages that `data` completes (each a list of frames), in order."""
        if not self._buffer:
            # The common case, a whole message in one read: slice it, no staging copy.
            messages, used = _split(data)
            if used < len(data):
                self._buffer += memoryview(data)[used:]
            return messages
        self._buffer += data
        view = memoryview(self._buffer)
        try:
            messages, used = _split(view)
        finally:
            view.release()
        del self._buffer[:used]
        return messages


def _split(data: bytes | memoryview) -> tuple[list[list[bytes]], int]:
    messages: list[list[bytes]] = []
    position, size = 0, len(data)
    while size - position >= 4:
        (count,) = _COUNT.unpack_from(data, position)
        start = position + 4 + 8 * count
        if size < start:
            break
        lengths = struct.unpack_from(f"<{count}Q", data, position + 4)
        end = start + sum(lengths)
        if size < end:
            break
        frames = []
        for length in lengths:
            frames.append(bytes(data[start : start + length]))
            start += length
        messages.append(frames)
        position = end
    return messages, position
