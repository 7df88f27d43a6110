"""Accepting every connection that waits in a server's listen queues, not one a loop turn.

uvloop (libuv) accepts one connection per listening socket a loop turn. While turns are long
(a model's run on the loop with the inline engine, a long turn of reads under overload) the
others wait a turn each: the last of N new clients waited N runs before it was read. So each
connection the loop accepts asks `PendingAccepts.accept` to take the rest of the queue at once.
The HTTP/1.1 server (`api.http`) and the gRPC server (`api.grpc.server`) both do.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("headway.http")

#: Most connections one `PendingAccepts.accept` takes from each listening socket; each one it
#: takes asks again once set up, so a longer queue is drained over a few turns.
ACCEPT_AT_ONCE = 64


class PendingAccepts:
    """A listening server's sockets (duplicates of them: the same listen queues), to accept
    what waits there; `close` with the server."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        server: asyncio.Server,
        protocol: Callable[[], asyncio.Protocol],
    ) -> None:
        self.loop = loop
        self.protocol = protocol
        self.listeners: list[socket.socket] = []
        for listening in server.sockets:
            listener = socket.socket(fileno=os.dup(listening.fileno()))
            listener.setblocking(False)
            self.listeners.append(listener)

    def accept(self) -> None:
        """Accept the connections that wait now, up to ACCEPT_AT_ONCE a socket (a connection
        was just accepted: others may have come with it), each set up at once."""
        for listener in self.listeners:
            for _ in range(ACCEPT_AT_ONCE):
                try:
                    sock, _address = listener.accept()
                except OSError:  # none waiting (or closed): the loop's own accept says why
                    break
                self._set_up(self.loop.connect_accepted_socket(self.protocol, sock))

    def _set_up(self, setup: Coroutine[Any, Any, object]) -> None:
        """Run an accepted connection's set-up (`connect_accepted_socket`) up to where it
        waits, now, and on from there when what it waits for is done: in a task it would
        start a loop turn later, and its first read come a turn after that of a connection
        the loop accepted (a turn is a whole model run while the inline engine runs on it)."""
        try:
            waiting = setup.send(None)
        except StopIteration:
            return
        except Exception as exc:  # the client left before its connection was set up
            log.debug("a connection closed before it was set up: %s", exc)
            return
        if isinstance(waiting, asyncio.Future):
            waiting.add_done_callback(lambda _: self._set_up(setup))
        else:  # a bare yield: go on next turn
            self.loop.call_soon(self._set_up, setup)

    def close(self) -> None:
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()
