"""A streamed answer's events for the servers that send with `await`: ASGI (uvicorn, `--http
uvicorn`) and RSGI (granian, `--http granian`).

Headway's own server writes each event to its socket as the model makes it (`api.connection`).
The other servers take a body piece by piece from a coroutine, which waits while the client
reads slowly; meanwhile the events wait here. The same bounds hold as on Headway's server:
events a client leaves waiting past `limit` bytes cut the stream off (its unsent events
dropped, a last error event naming why, its request withdrawn), and a stream that sends
nothing for `idle` seconds is ended with an error event. A client that goes away (`gone`)
withdraws the request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from headway.api.limits import STREAM_BUFFER_BYTES, STREAM_IDLE_TIMEOUT_S
from headway.api.sse import EventStream

log = logging.getLogger("headway.http")


class EventPump:
    """The sink of one `EventStream` (`api.sse.Sink`), read by the server as an async
    iterator of body pieces (each the events that came since the last piece, joined)."""

    __slots__ = ("cut_off", "ended", "idle", "limit", "queued", "size", "stream", "wake")

    def __init__(
        self,
        stream: EventStream,
        limit: int = STREAM_BUFFER_BYTES,
        idle: float = STREAM_IDLE_TIMEOUT_S,
    ) -> None:
        self.stream = stream
        self.limit = limit
        self.idle = idle
        self.queued: list[bytes] = []
        self.size = 0
        self.ended = False
        self.cut_off = False  # past the limit: only the last error event may follow
        self.wake = asyncio.Event()
        stream.attach(self)

    def send(self, data: bytes) -> None:
        if self.ended:
            return
        self.queued.append(data)
        self.size += len(data)
        self.wake.set()
        if self.size > self.limit and not self.cut_off:
            self.cut(
                f"it left {self.size} bytes of a streamed answer unread, more than a stream "
                f"may hold ({self.limit}, --stream-buffer-mb)"
            )

    def end(self) -> None:
        self.ended = True
        self.wake.set()

    def cut(self, reason: str) -> None:
        """Drop what waits and end the stream in error (its request withdrawn)."""
        log.info("stream cut off: %s", reason)
        self.cut_off = True
        self.queued.clear()
        self.size = 0
        self.stream.abandon(f"the stream was cut off: {reason}")

    def gone(self) -> None:
        """The client went away: nothing more is sent, the request is withdrawn."""
        self.queued.clear()
        self.size = 0
        self.stream.cancel()
        self.end()

    async def pieces(self) -> AsyncIterator[bytes]:
        """What to send next, as it comes; over once the stream has ended."""
        while True:
            if self.queued:
                data = b"".join(self.queued) if len(self.queued) > 1 else self.queued[0]
                self.queued.clear()
                self.size = 0
                yield data
            elif self.ended:
                return
            else:
                self.wake.clear()
                try:
                    async with asyncio.timeout(self.idle):
                        await self.wake.wait()
                except TimeoutError:
                    self.stream.abandon(
                        f"the stream sent nothing for {self.idle:g} s (--stream-idle-timeout)"
                    )
