"""The dashboard in a real headless Chromium: it loads with no console errors, shows the
models, workers, applications and a flow's operators, and its numbers move under load."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.browser import chromium_page
from tests.integration.oip_client import infer_json

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Two workers, a model that serves, one that failed to load, and a flow application of
    two operators (fusion off: a map, then `doubler`)."""
    root = tmp_path_factory.mktemp("dashboard")
    models.python_model(root / "repository", "doubler", "Doubler")
    models.python_model(root / "repository", "broken", "Broken")
    flow = models.scaled_flow(root / "repository" / "flows")  # a flow file of the repository
    with ServerProcess(root / "repository", state=root / "s.db", workers=2) as started:
        app = {"flow": flow, "fusion": False, "slo_ms": 30_000}
        put = httpx.put(f"{started.url}/apps/scaled", json=app, timeout=60)
        assert put.status_code == 201, put.text
        yield started


def test_the_root_redirects_to_the_dashboard_and_its_data_names_every_model(
    server: ServerProcess,
) -> None:
    root = httpx.get(f"{server.url}/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/dashboard"
    page = httpx.get(f"{server.url}/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert httpx.get(f"{server.url}/dashboard/nope.js").status_code == 404
    data = httpx.get(f"{server.url}/dashboard/data.json").json()
    names = {m["name"] for m in data["models"]}
    assert {n for n in names if not n.startswith("flow.")} == {"doubler", "broken"}
    assert {w["worker"] for w in data["workers"]} == {0, 1}
    operators = [o for o in data["operators"] if o["app"] == "scaled"]
    assert len(operators) == 2 and all(o["name"] == f"scaled/{o['operator']}" for o in operators)


def test_the_page_shows_the_models_and_its_numbers_move_under_load(
    server: ServerProcess, tmp_path: Path
) -> None:
    with chromium_page() as (page, problems):
        page.goto(f"{server.url}/")
        assert page.url.endswith("/dashboard")
        doubler = page.locator('#models tr[data-name="doubler"]')
        doubler.wait_for()
        assert "READY" in doubler.inner_text()
        assert page.locator('#models tr[data-name="broken"]').inner_text().count("UNAVAILABLE") == 1
        assert page.locator("#workers tbody tr").count() == 2
        before = int(doubler.locator("td.requests").inner_text())
        rows = np.ones((1, 4), np.float32)
        for _ in range(20):
            assert infer_json(server.url, "doubler", rows).status_code == 200
        page.wait_for_function(
            "n => Number(document.querySelector('#models tr[data-name=\"doubler\"] td.requests')"
            ".textContent) >= n",
            arg=before + 20,
            timeout=10_000,
        )
        rate = doubler.locator("td.rate").inner_text()
        operators = [o["name"] for o in httpx.get(f"{server.url}/dashboard/data.json").json()
                     ["operators"] if o["app"] == "scaled"]  # fmt: skip
        assert len(operators) == 2
        calls = {n: int(_operator(page, n, "calls")) for n in operators}
        for _ in range(3):
            answer = httpx.post(f"{server.url}/apps/scaled/predict", json={"input": [1.0] * 4})
            assert answer.status_code == 200, answer.text
        for name in operators:  # each operator's row counts the three queries
            page.wait_for_function(
                "([name, n]) => Number(document.querySelector("
                '`#operators tr[data-name="${name}"] td.calls`).textContent) >= n',
                arg=[name, calls[name] + 3],
                timeout=10_000,
            )
        page.screenshot(path=str(_artifacts(tmp_path) / "dashboard.png"), full_page=True)
    assert rate != "\u2013", rate  # an en dash: no rate yet
    assert problems == []


def _operator(page: Any, name: str, column: str) -> str:
    row = page.locator(f'#operators tr[data-name="{name}"]')
    row.wait_for()
    return str(row.locator(f"td.{column}").inner_text())


def _artifacts(default: Path) -> Any:
    """Where the screenshot goes: $HEADWAY_ARTIFACTS (CI keeps it) or the test's folder."""
    folder = Path(os.environ.get("HEADWAY_ARTIFACTS", default))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
