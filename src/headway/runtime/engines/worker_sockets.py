"""The frontend's end of the workers' stream sockets: listening, the hello, framed writes, reads.

Plain sockets and not ZeroMQ, which hands every message through an I/O thread on each side:
four thread wake-ups per hop instead of one (docs/decisions.md). Messages are `wire.framed`: a
gathered `sendmsg` out, one `recv` in, read by the event loop's own reader callback. Which
worker a connection is, and what its messages mean, is its engine's business: the engine is
told of each hello, each batch of messages and each closed connection.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from headway.runtime import handshake
from headway.runtime.wire import READ_SIZE, FrameReader, Frames, framed, listen, pack, remainder
from headway.runtime.wire import unpack as unpack_message

log = logging.getLogger("headway.engine")

#: The most a connection may send before its hello is accepted (a hello is ~200 bytes).
HELLO_LIMIT = 1 << 14

#: What an engine binds a connection to once it said hello (its record of the worker).
P = TypeVar("P")


class WorkerLink(Generic[P]):
    """One worker's socket: what has been read of its next message, what waits to be written."""

    __slots__ = ("challenge", "fd", "opened", "peer", "pending", "process", "reader", "sock")

    def __init__(self, sock: socket.socket, peer: str, opened: float) -> None:
        self.sock = sock
        self.opened = opened
        self.fd = sock.fileno()
        self.peer = peer
        self.reader = FrameReader()
        self.pending: list[memoryview] = []  # unsent bytes, while the socket's buffer is full
        self.process: P | None = None  # known once the worker said hello
        self.challenge = handshake.challenge()


class WorkerSockets(Generic[P]):
    """Listens on an endpoint (`ipc://PATH`, a Unix socket; `tcp://HOST:PORT` for workers
    elsewhere) and moves frames on the connections.

    Each new connection is sent a challenge; its first message goes to `hello(link, header)`,
    which binds `link.process` and returns True, or refuses it (`refuse`). Later messages go
    to `deliver(link, messages)`, in the order read; `closed(link)` hears of every connection
    closed, by either side."""

    def __init__(
        self,
        *,
        hello: Callable[[WorkerLink[P], dict[str, Any]], bool],
        deliver: Callable[[WorkerLink[P], list[list[bytes]]], None],
        closed: Callable[[WorkerLink[P]], None],
    ) -> None:
        self._hello = hello
        self._deliver = deliver
        self._closed = closed
        self.links: set[WorkerLink[P]] = set()
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def listen(self, loop: asyncio.AbstractEventLoop, endpoint: str) -> str:
        """Listen on `endpoint`; returns it, with the port bound in place of a port 0."""
        listener = listen(endpoint)
        if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
            host = endpoint[len("tcp://") :].rpartition(":")[0]
            endpoint = f"tcp://{host}:{listener.getsockname()[1]}"
        self._loop = loop
        self._listener = listener
        loop.add_reader(listener.fileno(), self._accept)
        return endpoint

    def stop(self) -> None:
        """Close every connection and the listener."""
        for link in list(self.links):
            self.close(link)
        if self._listener is not None and self._loop is not None:
            self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None

    # -- writing ------------------------------------------------------------------------------
    def write(self, link: WorkerLink[P], frames: Frames) -> bool:
        """Write now, as far as the socket takes it; the rest when it is writable again."""
        buffers, total = framed(frames)
        if link.pending:  # keep the order: behind what is already waiting
            link.pending += remainder(buffers, 0)
            return True
        try:
            sent = link.sock.sendmsg(buffers)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close(link)
            return False
        if sent < total:
            link.pending = remainder(buffers, sent)
            assert self._loop is not None
            self._loop.add_writer(link.fd, self._flush, link)
        return True

    def _flush(self, link: WorkerLink[P]) -> None:
        while link.pending:
            try:
                sent = link.sock.sendmsg(link.pending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.close(link)
                return
            link.pending = remainder(link.pending, sent)
        assert self._loop is not None
        self._loop.remove_writer(link.fd)

    # -- reading ------------------------------------------------------------------------------
    def _accept(self) -> None:
        assert self._listener is not None and self._loop is not None
        while True:
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                log.exception("accepting a worker connection failed")
                return
            sock.setblocking(False)
            peer = "a local process"
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peer = f"{address[0]}:{address[1]}"
            link: WorkerLink[P] = WorkerLink(sock, peer, self._loop.time())
            self.links.add(link)
            self._loop.add_reader(link.fd, self.readable, link)
            self.write(link, pack(dict(link.challenge)))

    def catch_up(self) -> None:
        """Read what already waits on the workers' sockets, now (`LocalEngine.catch_up`)."""
        for link in list(self.links):
            if link.process is not None:
                self.readable(link)

    def readable(self, link: WorkerLink[P]) -> None:
        try:
            data = link.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the worker went away: its engine's watcher reports the exit
            self.close(link)
            return
        if link.process is None:
            self._greet(link, data)
        else:
            self._deliver(link, link.reader.feed(data))

    def _greet(self, link: WorkerLink[P], data: bytes) -> None:
        """What a connection sends before it is a worker: its hello, then (rarely, in the same
        read) the first replies. A stray that sends too much or garbage is closed."""
        try:
            messages = link.reader.feed(data)
            if not messages:
                if link.reader.buffered > HELLO_LIMIT:
                    self.refuse(link, "it sent more than a hello before saying hello")
                return
            header, _ = unpack_message(messages[0])
        except Exception as exc:  # a stray's bytes must never take the engine down
            self.refuse(link, f"its first message is not a message: {exc!r:.200}")
            return
        if self._hello(link, header) and len(messages) > 1:
            self._deliver(link, messages[1:])

    # -- closing ------------------------------------------------------------------------------
    def refuse_silent(self, opened_before: float, timeout: float) -> None:
        """Close the connections opened before `opened_before` that have not said hello."""
        for link in list(self.links):
            if link.process is None and link.opened < opened_before:
                self.refuse(link, f"no hello within {timeout:g} s")

    def refuse(self, link: WorkerLink[P], reason: str) -> None:
        log.warning("refused a worker connection from %s: %s", link.peer, reason)
        self.close(link)

    def close(self, link: WorkerLink[P]) -> None:
        if link not in self.links:
            return
        self.links.discard(link)
        if self._loop is not None:
            self._loop.remove_reader(link.fd)
            self._loop.remove_writer(link.fd)
        link.sock.close()
        self._closed(link)
