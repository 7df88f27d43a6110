"""`api.accepting.PendingAccepts`: connections waiting in the listen queue are accepted
together, on uvloop (the servers' loop), which accepts one a loop turn. Counted in loop turns."""

from __future__ import annotations

import asyncio
import socket
import time

import uvloop

from headway.api.accepting import PendingAccepts


def test_the_connections_waiting_with_one_the_loop_accepts_are_set_up_in_its_turn() -> None:
    clients = 8
    turns = 10
    turn = [0]  # the loop turns held so far, each by a run on the loop
    made: list[int] = []  # the turn each connection was made in

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pending: PendingAccepts

        class Made(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                made.append(turn[0])
                pending.accept()

        def hold() -> None:
            time.sleep(0.01)
            turn[0] += 1
            if turn[0] < turns:
                loop.call_soon(hold)

        server = await loop.create_server(Made, "127.0.0.1", 0)
        pending = PendingAccepts(loop, server, Made)
        port = server.sockets[0].getsockname()[1]
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(clients)]
        try:
            loop.call_soon(hold)
            while turn[0] < turns:
                await asyncio.sleep(0.01)
        finally:
            pending.close()
            server.close()
            for sock in sockets:
                sock.close()

    uvloop.run(main())
    assert len(made) == clients
    # the first, then the seven that waited with it in the next turn (one a turn: the eighth
    # was made in the eighth turn)
    assert max(made) <= min(made) + 1, made
