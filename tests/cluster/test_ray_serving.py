"""`headway serve --engine ray` on a real two-node Ray cluster: the same answers as the local
engine, models placed on the nodes that have the resources they declare, replicas as actors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from headway.datatypes import numpy_dtype
from headway.launcher import ServerProcess
from tests.cluster.conftest import START_S
from tests.integration import models
from tests.integration.oip_client import index, infer_json, metric, outputs_of
from tests.processes import command, descendants

pytestmark = pytest.mark.ray

PLACED = {
    "on-accel": "resources: {custom: {accel: 1}}\n",
    "on-head": "resources: {cpus: 1, custom: {head: 1}}\n",
    "needs-tpu": "resources: {custom: {tpu: 1}}\n",
    "pair": "replicas: 2\n",
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("ray-repository")
    expected = {}
    for name, builder in models.BUILDERS.items():
        try:
            expected[name] = builder(root)
        except ImportError:  # a framework that is not installed here: not served
            continue
    for name, extra in PLACED.items():
        models.python_model(root, name, "Doubler", extra)
    return root, expected


@pytest.fixture(scope="module")
def ray_server(
    cluster: Any, repository: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("ray-server")
    extra = ["--engine", "ray", "--ray-address", cluster.address]
    server = ServerProcess(repository[0], state=work / "s.db", extra=extra, log=work / "server.log")
    try:
        yield server.start(timeout=START_S)
    finally:
        server.stop()


def test_answers_equal_the_local_engines_for_each_installed_framework(
    ray_server: ServerProcess, repository: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, expected = repository
    assert "digits-logreg" in expected
    with ServerProcess(root, state=tmp_path / "local.db", workers=1) as local:
        for model, (rows, want) in expected.items():
            spec = httpx.get(f"{local.url}/v2/models/{model}").json()["inputs"][0]
            sent = rows.astype(numpy_dtype(spec["datatype"]))
            on_ray = outputs_of(infer_json(ray_server.url, model, sent, spec["name"]))
            on_local = outputs_of(infer_json(local.url, model, sent, spec["name"]))
            assert set(on_ray) == set(on_local) == set(want), model
            for name in want:
                np.testing.assert_array_equal(on_ray[name], on_local[name], err_msg=model)
                np.testing.assert_allclose(on_ray[name], want[name], rtol=1e-5, atol=1e-6)


def test_models_land_on_the_nodes_that_have_their_declared_resources(
    ray_server: ServerProcess, cluster: Any
) -> None:
    head = cluster.head_node.node_id
    other = cluster.accel_node.node_id
    entries = index(ray_server)
    assert entries["on-accel"]["state"] == "READY"
    assert entries["on-accel"]["nodes"] == [other]
    assert entries["on-head"]["nodes"] == [head]
    # which node hosts which worker, in /metrics too
    hosted = {
        labels["model"]: labels["node"]
        for labels, _ in metric(ray_server, "headway_model_replicas")
    }
    assert hosted["on-accel"] == other and hosted["on-head"] == head
    # and on the dashboard: each worker's node and models
    board = httpx.get(f"{ray_server.url}/dashboard/data.json", timeout=10).json()
    on_nodes = {tuple(w["models"]): w["node"] for w in board["workers"]}
    assert on_nodes[("on-accel",)] == other and on_nodes[("on-head",)] == head
    rows = np.arange(4, dtype=np.float32).reshape(1, 4)
    for model in ("on-accel", "on-head"):
        np.testing.assert_array_equal(
            outputs_of(infer_json(ray_server.url, model, rows))["output-0"], rows * 2
        )


def test_a_model_needing_a_resource_no_node_has_is_not_ready_with_the_reason(
    ray_server: ServerProcess,
) -> None:
    entry = index(ray_server)["needs-tpu"]
    assert entry["state"] == "UNAVAILABLE"
    assert "tpu 1" in entry["reason"] and "no node" in entry["reason"]
    response = infer_json(ray_server.url, "needs-tpu", np.ones((1, 4), np.float32))
    assert response.status_code == 503
    assert "tpu" in response.json()["error"]
    ready = httpx.get(f"{ray_server.url}/v2/models/needs-tpu/ready", timeout=10).json()
    assert ready["ready"] is False and "tpu" in ready["reason"]


def test_replicas_are_actors_created_on_load_and_removed_on_unload(
    ray_server: ServerProcess,
) -> None:
    def pair_workers() -> int:
        return int(sum(v for labels, v in metric(ray_server, "headway_model_replicas")
                       if labels["model"] == "pair"))  # fmt: skip

    def workers() -> float:
        return metric(ray_server, "headway_workers")[0][1]

    assert pair_workers() == 2
    before = workers()
    url = f"{ray_server.url}/v2/repository/models/pair"
    assert httpx.post(f"{url}/unload", timeout=30).status_code == 200
    deadline = time.monotonic() + 20
    while workers() > before - 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers() == before - 2, "the unloaded model's actors are still there"
    assert index(ray_server)["pair"]["state"] == "UNLOADED"
    assert httpx.post(f"{url}/load", timeout=60).status_code == 200
    assert pair_workers() == 2 and workers() == before
    rows = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(
        outputs_of(infer_json(ray_server.url, "pair", rows))["output-0"], rows * 2
    )


def test_without_an_address_the_server_starts_ray_and_stops_it_at_exit(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    models.python_model(root, "doubler", "Doubler")
    server = ServerProcess(
        root,
        state=tmp_path / "s.db",
        extra=["--engine", "ray"],
        log=tmp_path / "server.log",
        env={"RAY_ADDRESS": ""},  # the test cluster sets it for its own session
    )
    server.start(timeout=START_S)
    try:
        assert server.process is not None
        ray_processes = descendants(server.process.pid)
        names = {name for name in (command(pid) for pid in ray_processes) if name}
        assert any("raylet" in name for name in names), names
        assert any("gcs_server" in name for name in names), names
        rows = np.ones((2, 4), np.float32)
        np.testing.assert_array_equal(
            outputs_of(infer_json(server.url, "doubler", rows))["output-0"], rows * 2
        )
    finally:
        server.stop(timeout=60)
    assert server.process.returncode == 0
    left = {pid: command(pid) for pid in ray_processes if command(pid)}
    assert not left, f"Ray processes outlived the server: {left}"


def test_applications_work_unchanged_on_ray(
    ray_server: ServerProcess, repository: tuple[Path, dict[str, Any]]
) -> None:
    rows, want = repository[1]["digits-logreg"]
    api = models.AppClient(ray_server.url)
    try:
        api.call("PUT", "/apps/digits", {"models": ["digits-logreg"], "policy": "fixed",
                                         "default_output": -1, "slo_ms": 1000}, status=201)  # fmt: skip
        for row, label in zip(rows[:5], want["label"][:5], strict=True):
            answer = api.predict("digits", row)
            assert answer["output"] == int(label), answer
            api.feedback("digits", answer["query_id"], int(label))
    finally:
        api.close()


def test_many_models_load_and_evict_in_a_pool_of_actors_under_a_memory_budget(
    cluster: Any, repository: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root = tmp_path / "repo"
    for name in ("first", "second", "third"):
        models.python_model(root, name, "Doubler", "memory_mb: 60\n")
    extra = ["--engine", "ray", "--ray-address", cluster.address, "--workers", "1",
             "--memory-budget-mb", "100"]  # fmt: skip
    server = ServerProcess(root, state=tmp_path / "s.db", extra=extra, log=tmp_path / "log")
    server.start(timeout=START_S)
    try:
        rows = np.ones((1, 4), np.float32)
        for _ in range(2):  # each load evicts the one before: the budget holds one at a time
            for name in ("first", "second", "third"):
                got = outputs_of(
                    infer_json(server.url, name, rows, parameters={"timeout": 10_000_000})
                )
                np.testing.assert_array_equal(got["output-0"], rows * 2)
        loads = sum(value for _, value in metric(server, "headway_loads_total"))
        evictions = sum(value for _, value in metric(server, "headway_evictions_total"))
        assert loads >= 6 and evictions >= 5, (loads, evictions)
        assert [labels["worker"] for labels, _ in metric(server, "headway_worker_node")] == ["0"]
    finally:
        server.stop()
