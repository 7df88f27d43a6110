"""Two servers in turn on one state file: the second's config no longer names an app of the
first's, which is then gone; an app created through the admin API is served by both."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from headway.launcher import ServerProcess
from tests.integration import models

pytestmark = pytest.mark.integration

APP = {"models": ["doubler"], "task": "regression"}


def _serve(root: Path, tmp: Path, apps: dict[str, dict[str, object]], run: str) -> ServerProcess:
    config = tmp / f"{run}.yaml"
    config.write_text(yaml.safe_dump({"apps": apps}))
    extra = ["--config", str(config)]
    return ServerProcess(root, state=tmp / "state.db", extra=extra, log=tmp / f"{run}.log")


def test_an_app_the_config_drops_is_gone_and_api_apps_stay(tmp_path: Path) -> None:
    root = tmp_path / "repository"
    models.python_model(root, "doubler", "Doubler")
    with _serve(root, tmp_path, {"kept": APP, "dropped": APP}, "first") as server:
        made = httpx.put(f"{server.url}/apps/made", json=APP, timeout=30)
        assert made.status_code == 201, made.text
        listed = httpx.get(f"{server.url}/apps").json()["apps"]
        assert sorted(app["name"] for app in listed) == ["dropped", "kept", "made"]
    with _serve(root, tmp_path, {"kept": APP}, "second") as server:
        listed = httpx.get(f"{server.url}/apps").json()["apps"]
        assert sorted(app["name"] for app in listed) == ["kept", "made"]
        gone = httpx.post(f"{server.url}/apps/dropped/predict", json={"input": [1, 2, 3, 4]})
        assert gone.status_code == 404, gone.text
        answer = httpx.post(f"{server.url}/apps/made/predict", json={"input": [1, 2, 3, 4]})
        assert answer.status_code == 200, answer.text
