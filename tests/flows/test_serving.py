"""The deployed executor's pure parts: first answer wins, the app's switches over the flow's."""

from __future__ import annotations

import asyncio

import pytest

from headway.apps.config import AppConfig
from headway.errors import ModelError, WorkerFailed
from headway.flows import Options
from headway.flows.calls import first


def test_the_first_good_answer_wins_and_errors_wait_for_the_others() -> None:
    async def scenario() -> tuple[str, bool, str]:
        loop = asyncio.get_running_loop()
        slow, fast, failing = (loop.create_future() for _ in range(3))
        loop.call_soon(failing.set_exception, WorkerFailed("replica 1 died"))
        loop.call_soon(lambda: loop.call_soon(fast.set_result, "fast"))
        winner = await first([slow, failing, fast])
        pending = not slow.done()
        slow.set_result("slow")  # the loser finishes later; its answer is ignored
        only = await first([slow])
        return winner, pending, only

    assert asyncio.run(scenario()) == ("fast", True, "slow")


def test_when_every_copy_fails_the_first_error_is_raised() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        a, b = loop.create_future(), loop.create_future()
        a.set_exception(ModelError("first"))
        loop.call_soon(b.set_exception, ModelError("second"))
        await first([a, b])

    with pytest.raises(ModelError, match="first"):
        asyncio.run(scenario())


def test_the_apps_switches_override_the_flows_options() -> None:
    flow_defaults = Options(fusion=True, compete=False, compete_replicas=3)
    config = AppConfig("a", (), flow="f.py:flow", fusion=False, compete=True)
    assert config.flow_options(flow_defaults) == Options(
        fusion=False, compete=True, compete_replicas=3, batching=True
    )
