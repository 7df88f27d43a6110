"""Applications of the config file follow the file: one the next config drops is not served (its
learned state kept aside, served again if a later config names it again); applications created
through the admin API persist across restarts whatever the config says."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tests.apps.stubs import StubController, StubModel

from headway.apps import AppRegistry, parse_app
from headway.apps.registry import AppNotFound
from headway.store import Store

#: exp4 weighs every member on each feedback: what it learns does not hang on a random pick.
TWO = {"models": ["a", "b"], "policy": "exp4", "eta": 0.5}


def _controller() -> StubController:
    return StubController(a=StubModel(lambda x: x), b=StubModel(lambda x: x + 1))


def _serve(
    path: Path,
    declared: dict[str, dict[str, Any]],
    then: Callable[[AppRegistry], Awaitable[Any]] | None = None,
) -> Any:
    """Start a registry on the state file with `declared` as the config's apps, run `then`
    (default: list the apps served), stop it."""

    async def run() -> Any:
        store = Store(path)
        configs = {name: parse_app(name, raw) for name, raw in declared.items()}
        apps = AppRegistry(_controller(), store, configs)
        await apps.start()
        try:
            return await then(apps) if then is not None else sorted(apps.apps)
        finally:
            await apps.stop()
            store.close()

    return asyncio.run(run())


def test_config_apps_follow_the_config_and_api_apps_persist(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def learn(apps: AppRegistry) -> dict[str, float]:
        apps.put("made", {"models": ["a"]})  # through the admin API
        for _ in range(3):  # b is right, a is wrong: b gains weight
            answer = await apps.get("dropped").predict([1.0])
            await apps.feedback("dropped", 2.0, query_id=answer["query_id"])
        return dict(apps.get("dropped").registry.app.log_weights)  # type: ignore[union-attr]

    learned = _serve(path, {"kept": TWO, "dropped": TWO}, learn)
    assert learned["a"] < learned["b"]

    # the next config no longer names 'dropped': gone, also from the API's listing
    async def look(apps: AppRegistry) -> list[str]:
        with pytest.raises(AppNotFound):
            apps.get("dropped")
        return [entry["name"] for entry in apps.summary()]

    assert _serve(path, {"kept": TWO}, look) == ["kept", "made"]
    assert _serve(path, {}) == ["made"]  # no config at all: only what the API made

    # named again, unchanged: served as it was, with what it had learned
    async def weights(apps: AppRegistry) -> dict[str, float]:
        return dict(apps.get("dropped").registry.app.log_weights)  # type: ignore[union-attr]

    assert _serve(path, {"kept": TWO, "dropped": TWO}, weights) == pytest.approx(learned)


def test_an_api_app_named_like_a_dropped_config_app_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _serve(path, {"old": TWO})

    async def replace(apps: AppRegistry) -> None:
        apps.put("old", {"models": ["a"]})

    _serve(path, {}, replace)
    assert _serve(path, {}) == ["old"]  # now the API's: it persists
