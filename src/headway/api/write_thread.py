"""Answers sent from a thread beside the event loop's, a loop turn's answers at a time.

On loopback a socket send runs the receiver's side of TCP in the sender's system call, on the
frontend's one Python thread. The answers of one loop turn are handed to `WriteThread` in one
handoff; it sends them with the GIL released during each system call, so that the kernel's work
can run on another core while the loop reads and answers on. Off by default
(`headway serve --write-thread`): each send also hands the GIL back and forth between the two
threads, and docs/decisions.md has what that cost where it was measured.

A connection's transport is wrapped in an `OffloadedTransport`, which keeps what the event
loop's transport promises: answers leave in order; what the kernel does not take at once (a
partial send) is handed back to the loop and written by the transport, whose buffer limits
pause a client that does not read; end-of-file and close come after what was sent before
them; nothing is sent after the connection is lost, and the thread's duplicate of the socket
is closed once its last send is done. A lone answer (nothing else unanswered, nothing queued)
is written at once by the transport, as without the thread: at one connection the thread is
never woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

#: What the thread hands back rather than sends: the transport's own `write_eof` and `close`,
#: done by the loop after the answers before them; and the closing of the thread's socket.
_EOF, _CLOSE, _FORGET = object(), object(), object()

Item = tuple["OffloadedTransport", Any]


class WriteThread:
    """One thread that sends the answers a loop turn gathered, in the order they came.

    `quiet()` tells whether anything else is expected this turn: when it is true and nothing
    is queued, an answer is written by the loop at once instead."""

    def __init__(self, loop: asyncio.AbstractEventLoop, quiet: Callable[[], bool]) -> None:
        self.loop = loop
        self.quiet = quiet
        self._late: list[Item] | None = None  # what came while the thread was ending
        self._ended = False
        self._turn: list[Item] = []
        self._queue: queue.SimpleQueue[list[Item] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="headway-writer", daemon=True)
        self._thread.start()

    def wrap(self, transport: asyncio.Transport) -> OffloadedTransport:
        return OffloadedTransport(transport, self)

    def add(self, out: OffloadedTransport, item: Any) -> None:
        """Queue `item` (bytes or an action) for `out`; the turn's items go at its end."""
        out.queued += 1
        if self._late is not None:  # stopping: after what the thread still has, on the loop
            self._late.append((out, item))
        elif self._ended:
            _take_back([(out, item)])
        else:
            if not self._turn:
                self.loop.call_soon(self._hand_over)
            self._turn.append((out, item))

    def _hand_over(self) -> None:
        turn, self._turn = self._turn, []
        if turn:
            self._queue.put(turn)

    async def stop(self) -> None:
        """End the thread once it has sent what is queued; from then on the loop writes (a
        stopping server, after its last answers)."""
        if self._ended or self._late is not None:
            return
        self._late = []
        self._hand_over()
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)  # what it handed back is done before this
        late, self._late, self._ended = self._late, None, True
        _take_back(late)

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        get = self._queue.get
        while (turn := get()) is not None:
            back: list[Item] = []
            for out, item in turn:
                if item is _FORGET:
                    out.forget()
                    out.sent += 1
                elif out.stalled or type(item) is not bytes:
                    out.stalled = True  # what follows it waits for the loop too
                    back.append((out, item))
                elif out.dead:
                    out.sent += 1
                else:
                    out.send(item, back)
            if back:
                with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped
                    self.loop.call_soon_threadsafe(_take_back, back)


def _take_back(items: list[Item]) -> None:
    """On the loop: what the thread could not send, written or done by the transport, in
    order."""
    for out, item in items:
        out.returned += 1
        transport = out.transport
        if item is _FORGET:
            out.forget()
        elif transport.is_closing():
            continue
        elif item is _EOF:
            transport.write_eof()
        elif item is _CLOSE:
            transport.close()
        else:
            transport.write(item)


class OffloadedTransport(asyncio.Transport):
    """A connection's transport whose writes may go through the `WriteThread`.

    Counters written by one thread each: `queued` (the loop), `sent` (the thread: sent or
    dropped), `returned` (the loop: handed back and done). Items are in flight while
    `queued > sent + returned`; the loop writes through its transport only when none are, and
    only then lets the thread send again after a hand-back (`stalled`)."""

    def __init__(self, transport: asyncio.Transport, writer: WriteThread) -> None:
        super().__init__()
        self.transport = transport
        self.writer = writer
        self.queued = self.sent = self.returned = 0
        self.stalled = False  # an item was handed back: the rest waits for the loop too
        self.dead = False  # a send failed (the client is gone): drop the rest
        self._socket: socket.socket | None = None  # the thread's duplicate, made on first use

    def _in_flight(self) -> bool:
        return self.queued != self.sent + self.returned

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.queued == self.sent + self.returned:  # nothing in flight (`_in_flight`, inlined)
            self.stalled = False
            if (
                self.writer.quiet()
                or self.transport.get_write_buffer_size()
                or (self._socket is None and not self._duplicate())
            ):
                self.transport.write(data)
                return
        self.writer.add(self, data)  # (what is not bytes, the thread hands back to the loop)

    def _duplicate(self) -> bool:
        """The thread's own descriptor of the socket, so that the loop's closing it never
        leaves the thread a number the kernel gives to another connection."""
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        duplicate = socket.socket(fileno=os.dup(sock.fileno()))
        duplicate.setblocking(False)
        self._socket = duplicate
        return True

    def send(self, data: bytes, back: list[Item]) -> None:
        """In the thread: send `data`; what the kernel does not take goes `back` to the loop."""
        assert self._socket is not None
        try:
            done = self._socket.send(data)
        except BlockingIOError:
            done = 0
        except OSError:  # the client is gone; the loop hears of it from its transport
            self.dead = True
            self.sent += 1
            return
        if done == len(data):
            self.sent += 1
        else:
            self.stalled = True
            back.append((self, data[done:]))

    def forget(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def lost(self) -> None:
        """The connection is lost: close the thread's socket after its last send."""
        if self._in_flight():
            self.writer.add(self, _FORGET)
        else:
            self.forget()

    def write_eof(self) -> None:
        if self._in_flight():
            self.writer.add(self, _EOF)
        else:
            self.transport.write_eof()

    def close(self) -> None:
        if self._in_flight():
            self.writer.add(self, _CLOSE)
        else:
            self.transport.close()

    def can_write_eof(self) -> bool:
        return self.transport.can_write_eof()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def pause_reading(self) -> None:
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    def abort(self) -> None:
        self.transport.abort()
