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
