"""The example flows deployed on a live server answer what `flow.local` answers.

Each example is served twice: as `headway.yaml` declares it (every optimisation on) and through
the admin API with fusion, competitive execution and batching off. Queries go concurrently, so
actions batch rows of several queries. Lookup values are put through `PUT /lookups/{key}`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from headway.control.models.measuring import WARMUP_RUNS
from headway.flows import LocalServices
from headway.launcher import ServerProcess
from tests.flows.examples import APPS, EXAMPLES, NAMES, flow, inputs, models, same
from tests.integration.models import AppClient, batches_run

pytestmark = pytest.mark.integration
SLO_MS = 20_000
OFF = {"fusion": False, "compete": False, "batching": False, "slo_ms": SLO_MS}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("flow-repository")
    models.build(root)
    tmp = tmp_path_factory.mktemp("flow-server")
    # the examples' headway.yaml beside copies of their files (a config's flow files lie beside
    # it or in the repository), with deadlines a machine at load 30 meets (this test is about
    # answers, not deadlines: a 503 under load would only say the machine was busy)
    apps = yaml.safe_load((EXAMPLES / "headway.yaml").read_text())["apps"]
    for app in apps.values():
        app["slo_ms"] = SLO_MS
    for name in NAMES:
        shutil.copy(EXAMPLES / f"{name}.py", tmp)
    (tmp / "headway.yaml").write_text(yaml.safe_dump({"apps": apps}))
    # the admin API may name only the repository's files: the examples again, under flows/
    shutil.copytree(tmp, root / "flows", ignore=shutil.ignore_patterns("*.yaml"))
    extra = ["--config", str(tmp / "headway.yaml")]
    with ServerProcess(root, state=tmp / "state.db", workers=2, extra=extra,
                       log=tmp / "server.log") as server:  # fmt: skip
        api = AppClient(server.url)
        for key, value in models.lookups().items():
            api.call("PUT", f"/lookups/{key}", {"value": value})
        for name in NAMES:
            body = {"flow": f"flows/{name}.py:flow", **OFF}
            api.call("PUT", f"/apps/{APPS[name]}-off", body, status=201)
            for app in (APPS[name], APPS[name] + "-off"):
                warm(server.url, app, inputs(name, 1)[0])
        yield {
            "api": api,
            "local": LocalServices(lookups=models.lookups(), repository=root),
            "flows": root / "flows",
        }
        api.close()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("variant", ["", "-off"])
def test_a_deployed_example_answers_as_flow_local(
    deployed: dict[str, Any], name: str, variant: str
) -> None:
    api: AppClient = deployed["api"]
    example = flow(name)
    rows = inputs(name, 24)
    app = APPS[name] + variant

    def ask(row: Any) -> Any:
        value = row.tolist() if hasattr(row, "tolist") else row
        return api.call("POST", f"/apps/{app}/predict", {"input": value})

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, rows))
    for row, answer in zip(rows, answers, strict=True):
        assert same(answer["output"], example.local([row], deployed["local"]).records()), row
        assert answer["default"] is False and len(answer["query_id"]) == 32
    many = api.call("POST", f"/apps/{app}/predict",
                    {"inputs": [r.tolist() if hasattr(r, "tolist") else r for r in rows[:3]]})  # fmt: skip
    assert same([a["output"] for a in many["outputs"]], [a["output"] for a in answers[:3]])


def test_the_app_describes_its_plan_and_each_operators_statistics(deployed: dict[str, Any]) -> None:
    api: AppClient = deployed["api"]
    before = api.call("GET", "/apps/cascade")["statistics"]["operators"]
    sent_before = requests_to(api, fused_stage_model(api))
    for row in inputs("cascade", 30):
        api.call("POST", "/apps/cascade/predict", {"input": row.tolist()})
    described = api.call("GET", "/apps/cascade")
    stages = {s["name"]: s for s in described["flow"]["stages"]}
    assert stages["model:digits-fast+map:top"]["kind"] == "action"
    assert stages["join"]["kind"] == "frontend"
    assert len(described["ready"]) == 3  # the three action stages are served
    ops = {o["operator"]: o for o in described["statistics"]["operators"]}
    assert ops["model:digits-fast"]["rows_in"] >= 30
    unsure = ops["filter:unsure"]
    assert 0 < unsure["rows_out"] < unsure["rows_in"]  # a branch probability for a planner
    assert ops["model:digits-slow"]["rows_in"] == unsure["rows_out"]
    # the fused filter runs before dispatch: only the unsure queries go to the forest's stage
    kept = (
        unsure["rows_out"] - next(o for o in before if o["operator"] == "filter:unsure")["rows_out"]
    )
    assert 0 < requests_to(api, fused_stage_model(api)) - sent_before == kept < 30
    assert ops["join"]["calls"] == ops["map:pick"]["calls"] >= 30
    metrics = api_text(api, "/metrics")
    assert 'headway_flow_operator_calls_total{app="cascade",operator="filter:unsure"}' in metrics
    assert 'headway_flow_operator_seconds_count{app="cascade",operator="map:top"}' in metrics


def test_a_competing_stage_runs_on_two_workers(deployed: dict[str, Any]) -> None:
    api: AppClient = deployed["api"]
    stages = api.call("GET", "/apps/heavy-tail")["flow"]["stages"]
    (stage,) = [s for s in stages if s["high_variance"]]
    assert stage["replicas"] == 2 and len(stage["served_as"]) == 2  # a model per copy
    for name in stage["served_as"]:
        config = api.call("GET", f"/v2/models/{name}/config")
        assert config["max_batch_size"] == 1 and config["headway"]["replicas"] == 1, config
    off = api.call("GET", "/apps/heavy-tail-off")["flow"]["stages"]
    assert [s["replicas"] for s in off if s["high_variance"]] == [1]


def test_bad_input_and_bad_flows_are_4xx_naming_the_problem(deployed: dict[str, Any]) -> None:
    api: AppClient = deployed["api"]
    error = api.call("POST", "/apps/recommender/predict", {"input": 3}, status=400)["error"]
    assert "column 'user': expected str, got int" in error
    error = api.call("POST", "/apps/cascade/predict", {"input": {"img": [1]}}, status=400)["error"]
    assert "missing ['image']" in error and "unknown ['img']" in error
    bad = deployed["flows"] / "bad.py"
    bad.write_text(
        "from headway.flows import Flow, Row\n"
        "def f(row: Row) -> float:\n    return 1.0\n"
        "flow = Flow('bad', {'x': float})\nflow.map(f, col='y')\n"
    )
    error = api.call("PUT", "/apps/bad", {"flow": f"{bad}:flow"}, status=400)["error"]
    assert "operator 'map:f'" in error and "col 'y' is not a column" in error
    unknown = deployed["flows"] / "unknown.py"
    unknown.write_text(
        "import numpy as np\nfrom headway.flows import Flow, Model\n"
        "flow = Flow('u', {'x': np.ndarray})\nflow.map(Model('no-such-model', {'y': float}))\n"
    )
    error = api.call("PUT", "/apps/unknown", {"flow": f"{unknown}:flow"}, status=400)["error"]
    assert "no-such-model" in error
    error = api.call("POST", "/apps/cascade/feedback", {"query_id": "x", "label": 1}, status=400)
    assert "is a flow" in error["error"]
    assert api.call("GET", "/lookups/user:1")["value"] == models.lookups()["user:1"]
    api.call("GET", "/lookups/never-put", status=404)


def warm(url: str, app: str, row: Any, timeout: float = 60.0) -> None:
    """Wait until the app answers: on a busy machine a stage's estimate, inflated by one slow
    run, can turn requests away early (503) until the next ones run."""
    value = row.tolist() if hasattr(row, "tolist") else row
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.post(f"{url}/apps/{app}/predict", json={"input": value}, timeout=30)
        if response.status_code == 200:
            return
        assert response.status_code == 503 and time.monotonic() < deadline, response.text
        time.sleep(0.2)


def api_text(api: AppClient, path: str) -> str:
    return httpx.get(api.url + path, timeout=30).text


def fused_stage_model(api: AppClient) -> str:
    """The model serving the cascade's fused stage (its filter, the forest and a map)."""
    stages = api.call("GET", "/apps/cascade")["flow"]["stages"]
    (name,) = next(s for s in stages if s["operators"][0] == "filter:unsure")["served_as"]
    return str(name)


def requests_to(api: AppClient, model: str) -> float:
    """The server's count of requests to `model` (`headway_requests_total` on `/metrics`)."""
    for family in text_string_to_metric_families(api_text(api, "/metrics")):
        for sample in family.samples:
            if sample.name == "headway_requests_total" and sample.labels["model"] == model:
                return sample.value
    return 0.0


def test_a_select_operator_inside_a_flow_learns_from_feedback(deployed: dict[str, Any]) -> None:
    """Exp4 over two models inside a flow: feedback that always agrees with the forest moves
    the weight to it; the state is in the app's description."""
    api: AppClient = deployed["api"]
    local: LocalServices = deployed["local"]
    rows = inputs("selection", 40)
    forest = local.predict("digits-forest", {"input-0": np.stack(rows) / 16.0})["label"]
    for row, label in zip(rows, forest, strict=True):
        answer = api.call("POST", "/apps/selection/predict", {"input": row.tolist()})
        assert answer["models"] == ["digits-logreg", "digits-forest"]
        losses = api.call("POST", "/apps/selection/feedback",
                          {"query_id": answer["query_id"], "label": int(label)})["losses"]  # fmt: skip
        assert losses["select:exp4/digits-forest"] == 0.0
    stats = api.call("GET", "/apps/selection")["statistics"]["selection"]["select:exp4"]
    weights = {m["model"]: m["weight"] for m in stats}
    assert weights["digits-forest"] > weights["digits-logreg"]
    error = api.call(
        "POST", "/apps/selection/feedback", {"query_id": "nope", "label": 1}, status=404
    )
    assert "unknown query id 'nope'" in error["error"]


def test_a_flows_stage_models_are_warm_before_it_is_deployed(deployed: dict[str, Any]) -> None:
    """PUT answers once every stage model ran its warm-up (a fused stage's too: the app makes
    up rows of zeros of its input columns), before the app was asked anything."""
    api: AppClient = deployed["api"]
    body = {"flow": "flows/cascade.py:flow", "slo_ms": SLO_MS}
    described = api.call("PUT", "/apps/cascade-warm", body, status=201)
    stages = [s for s in described["flow"]["stages"] if s["kind"] == "action"]
    served = sorted(name for stage in stages for name in stage["served_as"])
    assert [s["name"] for s in stages] == [
        "model:digits-fast+map:top",
        "filter:unsure+model:digits-slow+map:top_slow",
        "map:pick",  # its image column is shaped as digits-fast's input, which it fed
    ]
    assert sorted(described["ready"]) == served
    assert described["statistics"]["queries"] == 0
    for name in served:  # warm-up runs, counted apart from traffic
        assert batches_run(api.url, name) >= WARMUP_RUNS, name
        (stats,) = api.call("GET", f"/v2/models/{name}/stats")["model_stats"]
        assert stats["execution_count"] == 0, (name, stats)  # no client asked it anything


def test_a_flow_that_cannot_make_its_deadline_answers_the_default_output(
    deployed: dict[str, Any],
) -> None:
    """The app's slo_ms bounds the whole flow: a first stage that sleeps 400 ms under a 200 ms
    SLO is cut off at the deadline, the model after it is never called, and the answer is the
    app's default output, flagged."""
    api: AppClient = deployed["api"]
    late = deployed["flows"] / "late.py"
    late.write_text(
        "import time\nimport numpy as np\nfrom headway.flows import Flow, Model, Row\n"
        "def pause(row: Row) -> np.ndarray:\n    time.sleep(0.4)\n    return row['image']\n"
        "flow = Flow('late', {'image': np.ndarray})\n"
        "flow.map(pause, names=['image']).map(\n"
        "    Model('digits-fast', {'probabilities': np.ndarray}, inputs={'input-0': 'image'}))\n"
    )
    body = {"flow": f"{late}:flow", "slo_ms": 200, "default_output": "unknown", "fusion": False}
    api.call("PUT", "/apps/late", body, status=201)
    answer = api.call("POST", "/apps/late/predict", {"input": inputs("cascade", 1)[0].tolist()})
    assert (answer["output"], answer["default"], answer["models"]) == ("unknown", True, [])
    assert "deadline (200 ms)" in answer["default_explanation"]
    described = api.call("GET", "/apps/late")
    assert described["config"]["default_output"] == "unknown"
    ops = {o["operator"]: o for o in described["statistics"]["operators"]}
    assert ops["model:digits-fast"]["calls"] == 0
    assert described["statistics"]["defaults"] == 1
