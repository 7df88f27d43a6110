"""Ending a client connection without losing its last answer: the lingering close.

Closing a socket with the client's input unread resets the connection, and the reset can reach
the client before it has read the answer. So a connection closed after an answer (a refusal,
`connection: close`, one turned away at the connection cap) sends EOF after the answer,
discards what the client still sends for `LINGER_S`, then closes (as nginx does).
"""

from __future__ import annotations

import asyncio
import contextlib

from headway.api.errors import problem
from headway.api.rendering import render

#: How long a connection that is closed after an answer is read and its input discarded before
#: it is closed.
LINGER_S = 1.0


def linger(transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, paused: bool) -> bool:
    """Close `transport` after the answers written to it (see the module docstring); its
    reading resumes if it was `paused`, to discard. Whether it did (False: closed at once,
    for a transport that cannot send EOF)."""
    if not transport.can_write_eof():
        transport.close()
        return False
    transport.write_eof()  # after the answer, once it has left
    if paused:
        with contextlib.suppress(RuntimeError):
            transport.resume_reading()
    loop.call_later(LINGER_S, _close, transport)
    return paused


def turn_away(transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, limit: int) -> None:
    """A connection over the cap of `limit`: answer 503 with the reason, then linger."""
    transport.write(
        render(
            problem(503, f"too many connections: this server serves at most {limit} at "
                    "once (--max-connections); retry shortly"),
            keep_alive=False,
        )
    )  # fmt: skip
    linger(transport, loop, paused=False)


def _close(transport: asyncio.Transport) -> None:
    if not transport.is_closing():
        transport.close()
