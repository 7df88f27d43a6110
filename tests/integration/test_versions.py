"""Several versions of one model on the live server: the version routes, a canary, a rollback.

Model `clf` has three versions, scikit-learn logistic regressions fitted on the digits with
their labels shifted by 0, 3 and 6 (mod 10): each version answers every row differently, so an
answer tells which version gave it. Version 3, the highest, is the default. Model `echo` is a
python model whose versions answer their own version number; no application names it, so its
versions are loaded by their first request.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import joblib
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.models import AppClient, serve_apps

pytestmark = pytest.mark.integration

SHIFTS = {1: 0, 2: 3, 3: 6}
X, Y, ROWS, _ = models.digits_split()
ECHO = """
import numpy as np


class Echo:
    version = {version}

    def predict(self, batch):
        return np.full((batch.shape[0], 1), self.version, np.int64)
"""


def build(root: Path) -> dict[int, np.ndarray]:
    """The repository; returns each `clf` version's labels for the query rows."""
    (root / "clf").mkdir(parents=True)
    (root / "clf" / "model.yaml").write_text("framework: sklearn\n")
    labels = {}
    for version, shift in SHIFTS.items():
        model = LogisticRegression(max_iter=3000).fit(X, (Y + shift) % 10)
        (root / "clf" / str(version)).mkdir()
        joblib.dump(model, root / "clf" / str(version) / "model.joblib")
        labels[version] = model.predict(ROWS)
    (root / "echo").mkdir()
    (root / "echo" / "model.yaml").write_text(
        "framework: python\nentrypoint: echo.py:Echo\nslo_ms: 10000\n"
        "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n"
    )
    for version in (1, 2):
        (root / "echo" / str(version)).mkdir()
        (root / "echo" / str(version) / "echo.py").write_text(ECHO.format(version=version))
    return labels


def body(rows: np.ndarray, datatype: str = "FP64") -> dict[str, Any]:
    tensor = {"name": "input-0", "shape": list(rows.shape), "datatype": datatype,
              "data": rows.reshape(-1).tolist()}  # fmt: skip
    return {"inputs": [tensor]}


def output(answer: dict[str, Any], name: str) -> list[Any]:
    return next(o["data"] for o in answer["outputs"] if o["name"] == name)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("versions-repository")
    labels = build(root)
    apps = {"canary": {"models": ["clf@1", "clf@2"], "policy": "fixed",
                       "split": {"clf@1": 0.5, "clf@2": 0.5}}}  # fmt: skip
    with serve_apps(root, tmp_path_factory.mktemp("versions"), apps, "versions") as server:
        api = AppClient(server.url)
        yield {"url": server.url, "labels": labels, "api": api}
        api.close()


def answer_until_ok(client: httpx.Client, path: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The first 200 answer: a busy machine may turn the very first requests away while a
    cold first run inflates the latency estimate (as `models.warm_models`)."""
    deadline = time.monotonic() + 30
    while True:
        response = client.post(path, json=payload)
        if response.status_code == 200:
            return dict(response.json())
        assert time.monotonic() < deadline, f"{path}: {response.text}"
        time.sleep(0.1)


def test_each_version_route_answers_with_that_version(served: dict[str, Any]) -> None:
    labels = served["labels"]
    rows = ROWS[:25]
    with httpx.Client(base_url=served["url"], timeout=30) as client:
        answers = {
            version: answer_until_ok(client, f"/v2/models/clf/versions/{version}/infer", body(rows))
            for version in (1, 2, 3)
        }
        default = answer_until_ok(client, "/v2/models/clf/infer", body(rows))
        for version, answer in answers.items():
            assert answer["model_version"] == str(version)
            assert output(answer, "label") == labels[version][:25].tolist()
        assert default["model_version"] == "3"
        assert output(default, "label") == labels[3][:25].tolist()

        for version in ("1", "2", "3"):
            meta = client.get(f"/v2/models/clf/versions/{version}").json()
            assert (meta["name"], meta["versions"]) == ("clf", ["1", "2", "3"])
            ready = client.get(f"/v2/models/clf/versions/{version}/ready")
            assert ready.status_code == 200 and ready.json()["ready"] is True
        assert client.get("/v2/models/clf").json()["versions"] == ["1", "2", "3"]

        metrics = client.get("/metrics").text
        for label in ("clf", "clf@1", "clf@2"):
            assert f'headway_requests_total{{model="{label}"}}' in metrics
        assert 'model="clf@3"' not in metrics  # the default is counted under its name
        index = client.post("/v2/repository/index").json()
        assert [(e["name"], e["version"]) for e in index if e["name"] == "clf"] == [("clf", "3")]


def test_a_version_no_request_asked_for_before_loads_on_its_first_request(
    served: dict[str, Any],
) -> None:
    row = np.ones((2, 4))
    with httpx.Client(base_url=served["url"], timeout=30) as client:
        metrics = client.get("/metrics").text
        assert 'model="echo@1"' not in metrics  # not registered until asked for
        first = client.post("/v2/models/echo/versions/1/infer", json=body(row, "FP32"))
        assert first.status_code == 200, first.text  # waited for the load, then answered
        assert (first.json()["model_version"], output(first.json(), "output-0")) == ("1", [1, 1])
        default = client.post("/v2/models/echo/infer", json=body(row, "FP32")).json()
        assert (default["model_version"], output(default, "output-0")) == ("2", [2, 2])
        assert 'headway_model_ready{model="echo@1"} 1.0' in client.get("/metrics").text


def test_a_missing_version_is_a_404_naming_the_versions_that_exist(
    served: dict[str, Any],
) -> None:
    with httpx.Client(base_url=served["url"], timeout=30) as client:
        for response in (
            client.post("/v2/models/clf/versions/7/infer", json=body(ROWS[:1])),
            client.get("/v2/models/clf/versions/7"),
            client.get("/v2/models/clf/versions/7/ready"),
        ):
            assert response.status_code == 404, response.text
            error = response.json()["error"]
            assert "'clf' has no version 7; it has [1, 2, 3]" in error, error
        bad = client.post("/v2/models/clf/versions/two/infer", json=body(ROWS[:1]))
        assert bad.status_code == 400 and "version must be an integer" in bad.json()["error"]


def test_a_fixed_app_splits_traffic_between_versions_and_rolls_back(
    served: dict[str, Any],
) -> None:
    api: AppClient = served["api"]
    labels = served["labels"]
    with httpx.Client(base_url=served["url"], timeout=30) as client:
        for version in (1, 2):  # loaded at start for the app; wait until each answers
            answer_until_ok(client, f"/v2/models/clf/versions/{version}/infer", body(ROWS[:1]))
    assert api.call("GET", "/apps/canary")["ready"] == ["clf@1", "clf@2"]

    def ask(i: int) -> str:
        answer = api.predict("canary", ROWS[i])
        assert not answer["default"], answer
        [model] = answer["models"]
        version = int(model.rpartition("@")[2])
        assert answer["output"] == labels[version][i], (i, answer)
        return str(model)

    split = Counter(ask(i) for i in range(60))
    assert set(split) == {"clf@1", "clf@2"} and min(split.values()) >= 10, split

    described = api.call("POST", "/apps/canary/active", {"model": "clf@1"})  # the rollback
    assert described["split"] == {"clf@1": 1.0, "clf@2": 0.0}
    assert Counter(ask(i) for i in range(60, 90)) == {"clf@1": 30}

    described = api.call("POST", "/apps/canary/active", {"split": {"clf@2": 1.0}})  # roll out
    assert Counter(ask(i) for i in range(90, 110)) == {"clf@2": 20}

    statistics = api.call("GET", "/apps/canary")["statistics"]["models"]
    assert {m["model"]: m["state"] for m in statistics} == {"clf@1": "READY", "clf@2": "READY"}
    metrics = httpx.get(f"{served['url']}/metrics").text
    counts = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("headway_requests_total{model=")
    }
    assert counts["clf@1"] >= split["clf@1"] + 30 and counts["clf@2"] >= split["clf@2"] + 20


def test_under_a_memory_budget_versions_load_on_demand_and_are_evicted(tmp_path: Path) -> None:
    root = tmp_path / "repository"
    build(root)
    with (root / "echo" / "model.yaml").open("a") as yaml:
        yaml.write("memory_mb: 30\n")  # one worker's 50 MB holds one version at a time
    row = body(np.ones((1, 4)), "FP32")
    with (
        ServerProcess(
            root, state=tmp_path / "s.db", workers=1, extra=["--memory-budget-mb", "50"],
            log=tmp_path / "server.log",
        ) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):  # fmt: skip
        answers = []
        for path in ("/v2/models/echo", "/v2/models/echo/versions/1") * 3:
            answer = answer_until_ok(client, f"{path}/infer", row)
            answers.append((answer["model_version"], output(answer, "output-0")))
        metrics = client.get("/metrics").text
    assert answers == [("2", [2]), ("1", [1])] * 3
    evictions = [m for m in metrics.splitlines() if m.startswith("headway_evictions_total")]
    assert sum(float(m.split()[-1]) for m in evictions) >= 5, evictions
    requests = next(m for m in metrics.splitlines() if 'requests_total{model="echo@1"}' in m)
    assert float(requests.split()[-1]) >= 3, requests
