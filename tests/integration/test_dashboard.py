"""The dashboard in a real headless Chromium against a live server: it loads with no console
errors; its charts draw the history, and what they draw matches `/metrics`; its tables' numbers
move under load; a flow is drawn as its operator graph with each operator's live figures; a
plan the server follows is shown with its simulated latency and CG-Mean and CG-Peak."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from headway.launcher import ServerProcess
from headway.planning.pipeline import Catalogue, Hardware, LatencyProfile, Pipeline, Stage
from headway.planning.plan_file import plan_document
from headway.planning.planner import Planner
from headway.planning.report import QUANTILES, report
from tests.integration import models
from tests.integration.browser import artifacts, chromium_page
from tests.integration.oip_client import BODY, infer_json
from tests.integration.steady import SteadyLoad

pytestmark = pytest.mark.integration

#: A flow whose three operators fuse into one stage that races two replicas (its map is
#: high-variance): a filter that keeps the rows whose values sum above zero, then `doubler`.
RACING_FLOW = """
import numpy as np
from headway.flows import Flow, Model, Table


def positive(row) -> bool:
    return float(np.sum(row["x"])) > 0


def scale(table: Table) -> list[np.ndarray]:
    return list(np.stack(table.column("x")).astype(np.float32) * 3)


flow = Flow("racing", {"x": np.ndarray})
flow.filter(positive).map(scale, names=["y"], batching=True, high_variance=True).map(
    Model("doubler", {"output-0": np.ndarray}, inputs={"input-0": "y"})
)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Two workers, a model that serves, one that failed to load, and two flow applications:
    `scaled` (fusion off: a map, then `doubler`) and `racing` (fused, two racing replicas)."""
    root = tmp_path_factory.mktemp("dashboard")
    models.python_model(root / "repository", "doubler", "Doubler")
    models.python_model(root / "repository", "broken", "Broken")
    flow = models.scaled_flow(root / "repository" / "flows")  # a flow file of the repository
    (root / "repository" / "flows" / "racing.py").write_text(RACING_FLOW)
    with ServerProcess(root / "repository", state=root / "s.db", workers=2) as started:
        for name, app in (
            ("scaled", {"flow": flow, "fusion": False, "slo_ms": 30_000}),
            ("racing", {"flow": f"{root / 'repository' / 'flows' / 'racing.py'}:flow",
                        "slo_ms": 30_000}),
        ):  # fmt: skip
            put = httpx.put(f"{started.url}/apps/{name}", json=app, timeout=60)
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
    assert httpx.get(f"{server.url}/dashboard/history/x.json").status_code == 404
    data = current(server)
    names = {m["name"] for m in data["models"]}
    assert {n for n in names if not n.startswith("flow.")} == {"doubler", "broken"}
    assert {w["worker"] for w in data["workers"]} == {0, 1}
    operators = [o for o in data["operators"] if o["app"] == "scaled"]
    assert len(operators) == 2 and all(o["name"] == f"scaled/{o['operator']}" for o in operators)
    assert data["flows"] == ["racing", "scaled"] and data["plan"] is False
    history = data["history"]
    assert history["seconds"] == 900 and history["bytes"] <= history["most_bytes"]
    everything = httpx.get(f"{server.url}/dashboard/history.json").json()
    assert everything["last"] >= 1 and len(everything["t"]) == everything["last"]
    newer = httpx.get(f"{server.url}/dashboard/history/{everything['last']}.json").json()
    assert newer["first"] == everything["last"] + 1 and len(newer["t"]) == newer["last"] - everything["last"]  # fmt: skip


def test_the_charts_draw_the_history_and_it_matches_the_metrics(
    server: ServerProcess, tmp_path: Path
) -> None:
    with chromium_page() as (page, problems):
        page.goto(f"{server.url}/dashboard")
        page.click('#range button[data-seconds="900"]')  # every sample the server keeps
        page.locator('path[data-key="model/doubler/queue"]').wait_for(state="attached")
        with SteadyLoad(server.url, "doubler", BODY, rate=40) as load:
            page.wait_for_function(  # a few seconds of load drawn
                "() => (JSON.parse(document.querySelector('path[data-key=\"model/doubler/answered\"]')"
                "?.dataset.counts ?? '[]')).reduce((a, b) => a + (b ?? 0), 0) >= 100",
                timeout=30_000,
            )
            page.screenshot(path=str(artifacts(tmp_path) / "dashboard.png"), full_page=True)
            drawn_under_load = drawn(page, "model/doubler/answered")
        assert set(load.statuses) == {200}, load.statuses
        # a sample taken after the last answer, then the page's next poll: all of it drawn
        last = httpx.get(f"{server.url}/dashboard/data.json").json()["history"]["last"]
        page.wait_for_function(
            "n => Number(document.body.dataset.last) >= n", arg=last + 2, timeout=10_000
        )
        metrics = httpx.get(f"{server.url}/metrics").text
        answered = drawn(page, "model/doubler/answered")
        p99 = drawn(page, "model/doubler/p99_ms")
        queue = drawn(page, "model/doubler/queue")
    assert problems == []
    assert max(v for v in drawn_under_load["values"] if v is not None) > 10  # answers/s
    # every answer the server counted is in the chart, each second's in its own point
    counted = sample(metrics, 'headway_request_latency_seconds_count{model="doubler"}')
    assert sum(c or 0 for c in answered["counts"]) == counted
    buckets = {1000 * float(b) for b in re.findall(
        r'headway_request_latency_seconds_bucket\{le="([0-9.e+-]+)",model="doubler"\}', metrics)}  # fmt: skip
    assert {v for v in p99["values"] if v is not None} <= buckets  # p99s are bucket bounds
    assert queue["values"][-1] == sample(metrics, 'headway_queue_length{model="doubler"}') == 0
    for line in (answered, p99, queue):  # the path's points are the values, on the axes
        assert line["points"] == pytest.approx(line["expected"], abs=0.15)


def test_the_tables_show_the_models_and_their_numbers_move_under_load(
    server: ServerProcess,
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
        replicas = doubler.locator("td.replicas").inner_text()
    assert rate != "\u2013", rate  # an en dash: no rate yet
    assert replicas == "1"
    assert problems == []


def test_a_flow_is_drawn_as_its_operator_graph_with_live_figures(
    server: ServerProcess, tmp_path: Path
) -> None:
    queries = [[1.0] * 4, [1.0] * 4, [1.0] * 4, [-1.0] * 4]  # the filter drops the last
    for app in ("scaled", "racing"):
        for row in queries:
            answer = httpx.post(f"{server.url}/apps/{app}/predict", json={"input": row}, timeout=30)
            assert answer.status_code == 200, answer.text
    data = current(server)
    calls = {o["name"]: o["calls"] for o in data["operators"]}
    with chromium_page() as (page, problems):
        page.goto(f"{server.url}/dashboard")
        for name, count in calls.items():  # each operator's box shows its calls so far
            page.wait_for_function(
                "([name, n]) => Number(document.querySelector("
                '`g.operator[data-operator="${name}"]`)?.dataset.calls) >= n',
                arg=[name, count],
                timeout=10_000,
            )
        scaled = page.locator('figure[data-flow="scaled"]')
        racing = page.locator('figure[data-flow="racing"]')
        graphs = {
            name: {
                "stages": figure.locator("g.stage").count(),
                "edges": figure.locator("path.edge").count(),
                "notes": figure.locator("text.note").all_text_contents(),
            }
            for name, figure in (("scaled", scaled), ("racing", racing))
        }
        filtered = racing.locator('g.operator[data-operator="racing/filter:positive"]')
        selectivity = float(filtered.get_attribute("data-selectivity") or "nan")
        scaled.screenshot(path=str(artifacts(tmp_path) / "dashboard-flow.png"))
    assert problems == []
    # fusion off: the input, the map and the model, one after another
    assert graphs["scaled"]["stages"] == 3 and graphs["scaled"]["edges"] == 2
    # fused into one stage after the input, racing two replicas
    assert graphs["racing"]["stages"] == 2 and graphs["racing"]["edges"] == 1
    assert "fused \u00b7 \u00d72 racing" in graphs["racing"]["notes"]
    assert selectivity == pytest.approx(0.75)  # three of four rows kept


def test_the_plan_the_server_follows_is_shown_beside_its_baselines(tmp_path: Path) -> None:
    root = tmp_path / "repository"
    models.python_model(root, "doubler", "Doubler")
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(planned("doubler", slo_ms=50.0), sort_keys=False))
    with (
        ServerProcess(root, state=tmp_path / "s.db", extra=["--plan", str(plan)]) as server,
        chromium_page() as (page, problems),
    ):
        page.goto(f"{server.url}/dashboard")
        section = page.locator("#plan")
        section.locator("#plan-baselines tbody tr").first.wait_for()
        summary = section.locator(".summary").inner_text()
        deployments = section.locator("#plan-baselines tbody tr td:first-child").all_inner_texts()
        stages = section.locator("#plan-stages tbody tr").all_inner_texts()
        curve = section.locator('.distribution path[data-key="plan"]').get_attribute("d") or ""
        slo = section.locator(".distribution line.slo").count()
        section.screenshot(path=str(artifacts(tmp_path) / "dashboard-plan.png"))
    assert problems == []
    assert "against an SLO of 50 ms" in summary and "$" in summary
    assert deployments == ["plan", "CG-Mean", "CG-Peak"]
    assert len(stages) == 1 and "doubler" in stages[0]
    assert curve.count("L") == len(QUANTILES) - 1 and slo == 1


def planned(model: str, slo_ms: float) -> dict[str, Any]:
    """A plan file for one stage of `model` on a CPU kind, as `headway plan -o` writes it."""
    profile = LatencyProfile({1: 0.002, 2: 0.0025, 4: 0.003, 8: 0.004})
    planner = Planner(
        Pipeline("one", (Stage("only", model),)),
        {model: {"cpu1": profile}},
        Catalogue({"cpu1": Hardware("cpu1", 0.05)}),
        np.random.default_rng(0).exponential(1 / 200, 2_000).cumsum(),
        slo_ms / 1e3,
        screen=None,
    )
    found = planner.plan()
    assert found.config is not None
    document = plan_document("one", found, planner, {1.0: 300.0}, 0.1)
    document["report"] = report(planner, found.config)
    return json.loads(json.dumps(document))  # plain types, as YAML holds them


def current(server: ServerProcess) -> dict[str, Any]:
    """The dashboard's tables as read after now (the recorder reads once a second)."""
    asked = time.time()
    for _ in range(50):
        data: dict[str, Any] = httpx.get(f"{server.url}/dashboard/data.json").json()
        if data["time"] > asked:
            return data
        time.sleep(0.1)
    raise AssertionError("the dashboard read nothing new in 5 s")


def drawn(page: Any, key: str) -> dict[str, Any]:
    """What a chart's line drew: its values (and counts, for a rate), the y of each point of
    its path, and the y its values should have on the chart's axes."""
    found: dict[str, Any] = page.evaluate(
        """key => {
          const path = document.querySelector(`path[data-key="${key}"]`);
          const svg = path.closest("svg").dataset;
          const values = JSON.parse(path.dataset.values);
          const counts = path.dataset.counts ? JSON.parse(path.dataset.counts) : null;
          const points = [...path.getAttribute("d").matchAll(/[ML]([-0-9.]+),([-0-9.]+)/g)]
            .map((m) => Number(m[2]));
          const top = Number(svg.top), height = Number(svg.height), y1 = Number(svg.y1);
          const expected = values.filter((v) => v !== null)
            .map((v) => Math.round((top + height - (Math.min(v, y1) / y1) * height) * 10) / 10);
          return { values, counts, points, expected };
        }""",
        key,
    )
    return found


def sample(metrics: str, name: str) -> float:
    [line] = [line for line in metrics.splitlines() if line.startswith(name + " ")]
    return float(line.split()[-1])
