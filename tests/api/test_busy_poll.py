"""Busy polling: the loop keeps turning for the window after each arm, then sleeps again.

Event order and counts on an injected clock, not timings: the poller yields the core once per
loop turn, so the yields counted are the turns it kept the loop awake for.
"""

from __future__ import annotations

import asyncio

from headway.api.busy_poll import BusyPoller


async def turns(n: int) -> None:
    """Let the loop run `n` turns."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_an_armed_poller_keeps_the_loop_turning_until_its_window_ends(yields: list[int]) -> None:
    async def main() -> None:
        now = [100.0]
        poller = BusyPoller(asyncio.get_running_loop(), 0.5, now=lambda: now[0])
        assert not poller.running
        await turns(5)
        assert yields[0] == 0  # not armed: the loop is left alone
        poller.arm()
        assert poller.running
        await turns(20)
        assert poller.running and 19 <= yields[0] <= 20  # one yield per turn in the window
        now[0] = 100.5  # the window ends
        await turns(3)
        assert not poller.running
        stopped = yields[0]
        await turns(10)
        assert yields[0] == stopped  # no turn once stopped

    asyncio.run(main())


def test_arming_again_extends_the_window(yields: list[int]) -> None:
    async def main() -> None:
        now = [0.0]
        poller = BusyPoller(asyncio.get_running_loop(), 0.4, now=lambda: now[0])
        poller.arm()
        for step in range(1, 5):  # re-armed every 0.2 s for 0.8 s: longer than one window
            now[0] = 0.2 * step
            await turns(2)
            assert poller.running
            poller.arm()
        now[0] = 0.8 + 0.39
        await turns(2)
        assert poller.running
        now[0] = 0.8 + 0.4
        await turns(2)
        assert not poller.running

    asyncio.run(main())


def test_arm_for_never_shortens_a_window_and_disarm_ends_it_at_the_next_turn(
    yields: list[int],
) -> None:
    # The reply poll: armed for a window when a worker's reply is due, ended as it comes.
    async def main() -> None:
        now = [0.0]
        poller = BusyPoller(asyncio.get_running_loop(), 0.0, now=lambda: now[0])
        poller.arm_for(0.5)
        poller.arm_for(0.1)  # a shorter window inside the longer one changes nothing
        now[0] = 0.3
        await turns(3)
        assert poller.running and yields[0] >= 2
        poller.disarm()
        await turns(2)
        assert not poller.running
        stopped = yields[0]
        await turns(5)
        assert yields[0] == stopped
        poller.arm_for(0.2)  # armed again after it stopped
        await turns(2)
        assert poller.running

    asyncio.run(main())


def test_the_server_polls_for_a_reply_only_when_it_is_all_it_waits_for_and_due_soon() -> None:
    from tests.api.echo_server import EchoApp, serve

    from headway.api.http import HttpServer

    async def test(server: HttpServer, app: EchoApp) -> None:
        poller = server._reply_poller
        assert poller is not None and not poller.running
        server.expect_reply(0.002, 1)  # a run longer than the poll window: sleep through it
        assert not poller.running
        server.unanswered = 3
        server.expect_reply(0.0001, 2)  # another request is still unanswered: it has work
        assert not poller.running
        server.expect_reply(0.0001, 3)
        assert poller.running
        server.replies_in()
        for _ in range(3):
            await asyncio.sleep(0)
        assert not poller.running
        server.unanswered = 0

    serve(test, reply_poll=0.001)
