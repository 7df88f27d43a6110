"""The real server refuses what it must with a clear 4xx (never a 500), says which methods a
route takes, and its OpenAPI document refuses what the server refuses; the same limits hold
under `--http uvicorn` where uvicorn leaves them to the app."""

from __future__ import annotations

import gzip
import socket
import time
from collections.abc import Iterator

import httpx
import jsonschema
import orjson
import pytest

from headway.api.openapi import OPENAPI
from headway.launcher import ServerProcess, free_port
from tests.integration import models

pytestmark = pytest.mark.integration

ONE_ROW = {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}


def test_a_version_of_thousands_of_digits_is_a_404_not_a_500(server: ServerProcess) -> None:
    version = "9" * 5000
    for answer in (
        httpx.get(f"{server.url}/v2/models/doubler/versions/{version}"),
        httpx.post(f"{server.url}/v2/models/doubler/versions/{version}/infer", json=ONE_ROW),
    ):
        assert answer.status_code == 404, answer.text
        assert "has no version of 5000 digits; it has [1]" in answer.json()["error"]


def test_an_app_naming_a_version_of_thousands_of_digits_is_a_400(server: ServerProcess) -> None:
    answer = httpx.put(f"{server.url}/apps/huge", json={"models": ["doubler@" + "9" * 5000]})
    assert answer.status_code == 400 and "is not a model name like" in answer.json()["error"]


def test_a_405_names_the_allowed_methods_in_allow(server: ServerProcess) -> None:
    for method, path, allowed in (
        ("GET", "/v2/models/doubler/infer", "POST"),
        ("POST", "/v2/models/doubler", "GET"),
        ("GET", "/v2/repository/index", "POST"),
        ("GET", "/v2/repository/models/doubler/load", "POST"),
        ("POST", "/metrics", "GET"),
        ("DELETE", "/openapi.json", "GET"),
        ("DELETE", "/apps", "GET"),
        ("PATCH", "/apps/any", "GET, PUT, DELETE"),
        ("POST", "/lookups/any", "GET, PUT, DELETE"),
    ):
        answer = httpx.request(method, f"{server.url}{path}")
        assert answer.status_code == 405, (method, path, answer.status_code)
        assert answer.headers["allow"] == allowed, (method, path)
        assert f"method {method} not allowed here" in answer.json()["error"]


def test_a_model_that_is_not_ready_answers_with_the_error_key(server: ServerProcess) -> None:
    answer = httpx.get(f"{server.url}/v2/models/broken/ready")
    assert answer.status_code == 400
    body = answer.json()
    assert body["ready"] is False and "weights file is corrupt" in body["reason"]
    assert body["error"].startswith("model 'broken' is not ready: ")
    schema = {"$ref": "#/components/schemas/Error", "components": OPENAPI["components"]}
    jsonschema.validate(body, schema)


def test_the_openapi_document_refuses_what_the_server_refuses(server: ServerProcess) -> None:
    served = httpx.get(f"{server.url}/openapi.json").json()
    assert served == orjson.loads(orjson.dumps(OPENAPI))
    request = {"$ref": "#/components/schemas/InferRequest", "components": served["components"]}
    jsonschema.validate(ONE_ROW, request)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"inputs": []}, request)
    assert httpx.post(f"{server.url}/v2/models/doubler/infer", json={"inputs": []}).is_client_error
    name = served["paths"]["/v2/models/{name}/infer"]["post"]["parameters"][0]["schema"]
    for refused in ("", "a/b", "-x"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(refused, name)
    jsonschema.validate("digits-logreg", name)


def test_a_gzip_bomb_is_413_at_the_decoded_limit_and_the_server_serves_on(
    server: ServerProcess,
) -> None:
    bomb = gzip.compress(b"\0" * 200 * 2**20)  # 200 MB decoded from ~200 kB: --max-body-mb 1
    answer = httpx.post(
        f"{server.url}/v2/models/doubler/infer",
        content=bomb,
        headers={"Content-Encoding": "gzip"},
        timeout=30,
    )
    assert answer.status_code == 413
    assert "gzip-decoded request body exceeds the limit of 1048576 bytes" in answer.json()["error"]
    assert httpx.post(f"{server.url}/v2/models/doubler/infer", json=ONE_ROW).status_code == 200


def test_a_long_url_is_414_and_large_headers_431(server: ServerProcess) -> None:
    assert_url_and_header_limits(server.url)


def assert_url_and_header_limits(url: str) -> None:
    long_url = httpx.get(f"{url}/v2/models/{'m' * 10_000}")
    assert long_url.status_code == 414 and "exceeds the limit of 8192" in long_url.json()["error"]
    large = httpx.get(f"{url}/v2/health/live", headers={f"x-h{k}": "v" * 100 for k in range(200)})
    assert large.status_code == 431 and "exceed the limit of 16384" in large.json()["error"]
    assert httpx.get(f"{url}/v2/health/live").status_code == 200


@pytest.fixture(scope="module")
def uvicorn_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("uvicorn-repository")
    models.python_model(root, "doubler", "Doubler")
    state = tmp_path_factory.mktemp("uvicorn-state") / "state.db"
    log = tmp_path_factory.mktemp("uvicorn-logs") / "server.log"
    extra = ["--http", "uvicorn", "--max-body-mb", "1", "--max-connections", "3"]
    # uvicorn does not announce the port it bound, so it is given one (port 0 is for ours)
    with ServerProcess(root, state=state, port=free_port(), extra=extra, log=log) as srv:
        yield srv


def test_under_uvicorn_bombs_long_urls_and_large_headers_are_refused(
    uvicorn_server: ServerProcess,
) -> None:
    url = uvicorn_server.url
    bomb = gzip.compress(b"\0" * 50 * 2**20)
    headers = {"Content-Encoding": "gzip"}
    answer = httpx.post(f"{url}/v2/models/doubler/infer", content=bomb, headers=headers)
    assert answer.status_code == 413 and "gzip-decoded" in answer.json()["error"]
    assert_url_and_header_limits(url)


def test_under_uvicorn_connections_over_the_cap_are_refused_with_503(
    uvicorn_server: ServerProcess,
) -> None:
    held = [socket.create_connection(("127.0.0.1", uvicorn_server.port)) for _ in range(3)]
    try:
        with httpx.Client(base_url=uvicorn_server.url) as client:
            assert client.get("/v2/health/live").status_code == 503
    finally:
        for sock in held:
            sock.close()
    for _ in range(100):  # until the server has seen them go
        if httpx.get(f"{uvicorn_server.url}/v2/health/live").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError("uvicorn kept refusing after the held connections closed")
