"""The loop-lag monitor sees a blocked event loop."""

from __future__ import annotations

import asyncio
import time

from headway.api.lag import LoopLag


def test_a_blocked_loop_shows_up_as_lag_and_an_idle_one_does_not() -> None:
    async def scenario() -> tuple[float, float]:
        lag = LoopLag(interval=0.002, window=5)
        lag.start()
        await asyncio.sleep(0.03)
        idle = lag.current
        time.sleep(0.05)  # block the loop: the timer fires ~50 ms late
        await asyncio.sleep(0.005)
        blocked = lag.current
        lag.stop()
        return idle, blocked

    idle, blocked = asyncio.run(scenario())
    assert idle < 0.02
    assert blocked >= 0.04
