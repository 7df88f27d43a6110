"""Busy polling: the loop keeps turning for the window after each arm, then sleeps again.

Event order and counts, not timings: the poller yields the core once per loop turn, so the
yields counted are the turns it kept the loop awake for.
"""

from __future__ import annotations

import asyncio

from headway.api.busy_poll import BusyPoller


def test_an_armed_poller_keeps_the_loop_turning_until_its_window_ends(yields: list[int]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        poller = BusyPoller(loop, 0.5)
        assert not poller.running
        poller.arm()
        assert poller.running
        await asyncio.sleep(0.02)  # the loop turns (and yields) while the sleep runs
        assert poller.running and yields[0] > 10
        await asyncio.sleep(0.6)  # past the window: it stopped and the loop may sleep
        assert not poller.running
        stopped = yields[0]
        await asyncio.sleep(0.05)
        assert yields[0] == stopped  # no turn once stopped

    asyncio.run(main())


def test_arming_again_extends_the_window(yields: list[int]) -> None:
    async def main() -> None:
        poller = BusyPoller(asyncio.get_running_loop(), 0.4)
        poller.arm()
        for _ in range(4):  # re-armed every 0.2 s for 0.8 s: longer than one window
            await asyncio.sleep(0.2)
            assert poller.running
            poller.arm()
        await asyncio.sleep(0.5)
        assert not poller.running

    asyncio.run(main())
