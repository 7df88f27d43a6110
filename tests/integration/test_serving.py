"""The real server answers the Open Inference Protocol correctly, for every framework."""

from __future__ import annotations

import gzip
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from headway.datatypes import numpy_dtype
from headway.launcher import ServerProcess
from tests.integration.oip_client import infer_json, outputs_of

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "model",
    ["digits-logreg", "iris-forest", "cancer-torch", "wine-onnx", "iris-xgboost", "wine-lightgbm"],
)
def test_predictions_match_the_framework_in_process(
    server: ServerProcess, repository: tuple[Path, dict[str, Any]], model: str
) -> None:
    rows, expected = repository[1][model]
    spec = httpx.get(f"{server.url}/v2/models/{model}").json()["inputs"][0]
    sent = rows.astype(numpy_dtype(spec["datatype"]))
    got = outputs_of(infer_json(server.url, model, sent, spec["name"]))
    assert set(got) == set(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_python_model_and_requested_outputs(server: ServerProcess) -> None:
    rows = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = outputs_of(infer_json(server.url, "doubler", rows))
    np.testing.assert_array_equal(got["output-0"], rows * 2)
    rows64, _ = np.zeros((3, 64)), None
    only = infer_json(server.url, "digits-logreg", rows64, outputs=[{"name": "probabilities"}])
    assert [o["name"] for o in only.json()["outputs"]] == ["probabilities"]


def test_health_metadata_and_config(server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/v2/health/live").status_code == 200
    assert_only_broken_is_unready(server)
    meta = httpx.get(f"{server.url}/v2").json()
    assert meta["name"] == "headway" and "binary_tensor_data" in meta["extensions"]
    model = httpx.get(f"{server.url}/v2/models/digits-logreg").json()
    assert model["inputs"] == [{"name": "input-0", "datatype": "FP64", "shape": [-1, 64]}]
    assert [o["name"] for o in model["outputs"]] == ["label", "probabilities"]
    assert httpx.get(f"{server.url}/v2/models/digits-logreg/versions/1/ready").status_code == 200
    config = httpx.get(f"{server.url}/v2/models/digits-logreg/config").json()
    assert config["max_batch_size"] == 32 and config["input"][0]["dims"] == [64]
    assert httpx.get(f"{server.url}/openapi.json").json()["openapi"].startswith("3.")


def test_repository_index_lists_every_model(server: ServerProcess) -> None:
    index = httpx.post(f"{server.url}/v2/repository/index").json()
    states = {entry["name"]: entry["state"] for entry in index}
    assert states["digits-logreg"] == "READY"
    assert states["broken"] == "UNAVAILABLE"


def test_a_model_that_fails_to_load_reports_why_and_others_serve(server: ServerProcess) -> None:
    ready = httpx.get(f"{server.url}/v2/models/broken/ready")
    assert ready.status_code == 400
    assert "weights file is corrupt" in ready.json()["reason"]
    assert "weights file is corrupt" in httpx.get(f"{server.url}/v2/models/broken").json()["reason"]
    answer = infer_json(server.url, "broken", np.zeros((1, 4), np.float32))
    assert answer.status_code == 503 and "corrupt" in answer.json()["error"]
    assert infer_json(server.url, "doubler", np.zeros((1, 4), np.float32)).status_code == 200


BAD_INPUTS = [
    ("malformed JSON", b'{"inputs": [', 400, "not valid JSON"),
    ("no inputs", b'{"outputs": []}', 400, "'inputs'"),
    (
        "wrong shape",
        orjson.dumps({"inputs": [{"name": "input-0", "shape": [3, 10], "datatype": "FP64",
                                  "data": [0.0] * 30}]}),
        400,
        "input 'input-0': expected shape [-1, 64], got [3, 10]",
    ),
    (
        "wrong datatype",
        orjson.dumps({"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "BYTES",
                                  "data": ["x"] * 64}]}),
        400,
        "expected datatype FP64, got BYTES",
    ),
    (
        "element count",
        orjson.dumps({"inputs": [{"name": "input-0", "shape": [2, 64], "datatype": "FP64",
                                  "data": [0.0] * 64}]}),
        400,
        "needs 128 elements, got 64",
    ),
    (
        "wrong input name",
        orjson.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP64",
                                  "data": [0.0] * 64}]}),
        400,
        "unexpected ['x']",
    ),
    (
        "unknown datatype",
        orjson.dumps({"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP128",
                                  "data": [0.0] * 64}]}),
        400,
        "unknown datatype 'FP128'",
    ),
    (
        "bad timeout",
        orjson.dumps({"parameters": {"timeout": "soon"}, "inputs": [
            {"name": "input-0", "shape": [1, 64], "datatype": "FP64", "data": [0.0] * 64}]}),
        400,
        "'timeout' must be a positive number",
    ),
    ("oversized body", b"[" + b"0," * 700_000 + b"0]", 413, "exceeds the limit"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "body", "status", "message"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_gets_a_clear_4xx_and_the_server_stays_ready(
    server: ServerProcess, case: str, body: bytes, status: int, message: str
) -> None:
    response = httpx.post(f"{server.url}/v2/models/digits-logreg/infer", content=body)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]
    assert_only_broken_is_unready(server)


def assert_only_broken_is_unready(server: ServerProcess) -> None:
    """The server is ready but for the one model whose load fails, which it names."""
    ready = httpx.get(f"{server.url}/v2/health/ready")
    assert ready.status_code == 503
    body = ready.json()
    assert body["starting"] is False and list(body["models"]) == ["broken"]
    assert "weights file is corrupt" in body["models"]["broken"]
    assert "broken" in body["error"]


def test_unknown_model_version_and_route_are_404(server: ServerProcess) -> None:
    unknown = httpx.post(f"{server.url}/v2/models/nope/infer", content=b"{}")
    assert unknown.status_code == 404 and "unknown model 'nope'" in unknown.json()["error"]
    version = httpx.get(f"{server.url}/v2/models/digits-logreg/versions/7")
    assert version.status_code == 404 and "no version 7" in version.json()["error"]
    assert httpx.get(f"{server.url}/v3/anything").status_code == 404
    assert httpx.get(f"{server.url}/v2/models/digits-logreg/infer").status_code == 405


def test_gzip_request_bodies_are_accepted(server: ServerProcess) -> None:
    body = {
        "inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]
    }
    response = httpx.post(
        f"{server.url}/v2/models/doubler/infer",
        content=gzip.compress(orjson.dumps(body)),
        headers={"Content-Encoding": "gzip"},
    )
    assert response.json()["outputs"][0]["data"] == [2, 4, 6, 8]


def test_a_deadline_too_tight_is_rejected_fast(server: ServerProcess) -> None:
    rows = np.ones((1, 4), np.float32)
    body = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}
    with httpx.Client(base_url=server.url, timeout=10) as client:
        # `slow` sleeps 200 ms per batch; warm-up runs at load taught the scheduler so.
        assert client.post("/v2/models/slow/infer", json=body).status_code == 200
        started = time.perf_counter()
        tight = {**body, "parameters": {"timeout": 50_000}}  # 50 ms, in microseconds
        response = client.post("/v2/models/slow/infer", json=tight)
        elapsed = time.perf_counter() - started
    assert response.status_code == 503
    assert "deadline cannot be met" in response.json()["error"]
    assert elapsed < 0.15, f"rejection took {elapsed * 1e3:.1f} ms; running would take 200 ms"
    assert infer_json(server.url, "slow", rows, parameters={"slo_ms": 1000}).status_code == 200


def test_cache_answers_repeats(server: ServerProcess) -> None:
    rows = np.full((1, 64), 3.0)
    first = outputs_of(infer_json(server.url, "digits-cached", rows))
    second = outputs_of(infer_json(server.url, "digits-cached", rows))
    np.testing.assert_array_equal(first["probabilities"], second["probabilities"])
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'headway_cache_hits_total{model="digits-cached"} 1.0' in metrics


def test_metrics_count_requests_and_batches(server: ServerProcess) -> None:
    for _ in range(3):
        infer_json(server.url, "doubler", np.zeros((2, 4), np.float32))
    metrics = httpx.get(f"{server.url}/metrics").text
    line = next(
        m for m in metrics.splitlines() if m.startswith('headway_requests_total{model="doubler"}')
    )
    assert float(line.split()[-1]) >= 3
    assert 'headway_batch_size_bucket{le="2.0",model="doubler"}' in metrics
    assert "headway_request_latency_seconds_bucket" in metrics
