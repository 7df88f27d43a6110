"""Faults on a real two-node Ray cluster: a worker actor killed under load, then a node that
leaves under load. Each is noticed, the worker replaced where resources allow, and every
request answered (200, or 503 when its retry failed too): none hangs, none is lost."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from headway.launcher import ServerProcess
from tests.cluster.conftest import NODE, START_S
from tests.integration import models
from tests.integration.oip_client import BODY, index, metric

pytestmark = pytest.mark.ray

#: One replica per node that offers `spread` (the head does; the fixture adds a second node).
STEADY = "replicas: 2\nresources: {custom: {spread: 1}}\n"


@pytest.fixture(scope="module")
def spread_node(cluster: Any) -> Any:
    node = cluster.add_node(**NODE, resources={"spread": 1})
    cluster.wait_for_nodes()
    return node


@pytest.fixture(scope="module")
def server(
    cluster: Any, spread_node: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("ray-faults")
    models.sleeper(work / "repo", "steady", 0.002, extra=STEADY)
    server = ServerProcess(
        work / "repo",
        state=work / "s.db",
        extra=["--engine", "ray", "--ray-address", cluster.address],
        log=work / "server.log",
    )
    try:
        yield server.start(timeout=START_S)
    finally:
        server.stop()


def workers_by_node(server: ServerProcess) -> dict[str, int]:
    """The pid of each worker, by the node hosting it."""
    return {
        labels["node"]: int(labels["pid"])
        for labels, _ in metric(server, "headway_worker_node")
        if labels["pid"]
    }


def under_load(server: ServerProcess, fault: Callable[[], None], requests: int = 600) -> list[Any]:
    """Send `requests` from 8 threads, cause `fault` once they flow; (status, seconds) each."""
    url = f"{server.url}/v2/models/steady/infer"

    def one(_: int) -> tuple[int, float]:
        started = time.perf_counter()
        try:
            status = httpx.post(url, content=BODY, timeout=30).status_code
        except httpx.TimeoutException:
            status = 0  # hung
        return status, time.perf_counter() - started

    with ThreadPoolExecutor(8) as pool:
        load = pool.map(one, range(requests))
        time.sleep(0.5)
        fault()
        return list(load)


def wait_for(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def serves_on(server: ServerProcess, nodes: int) -> bool:
    return len(index(server)["steady"].get("nodes", [])) == nodes


def assert_none_hung(results: list[tuple[int, float]], requests: int) -> None:
    statuses = [status for status, _ in results]
    assert len(results) == requests  # every request was answered: none lost
    assert set(statuses) <= {200, 503}, sorted(set(statuses))
    assert statuses.count(200) >= requests * 0.9, statuses.count(200)
    assert max(seconds for _, seconds in results) < 20.0


def test_a_killed_worker_actor_is_replaced_and_no_request_hangs(
    server: ServerProcess, cluster: Any
) -> None:
    assert wait_for(lambda: serves_on(server, 2), 60)
    head = cluster.head_node.node_id
    before = workers_by_node(server)
    victim = before[head]
    results = under_load(server, lambda: os.kill(victim, signal.SIGKILL))
    assert_none_hung(results, 600)
    # replaced (on the head: the only node with a free `spread`), and both replicas serve
    assert wait_for(lambda: workers_by_node(server).get(head, victim) != victim, 60)
    assert wait_for(lambda: serves_on(server, 2), 60)
    for _ in range(20):
        response = httpx.post(f"{server.url}/v2/models/steady/infer", content=BODY, timeout=10)
        assert response.status_code == 200, response.text


def test_a_node_that_leaves_under_load_is_survived_and_its_worker_replaced(
    server: ServerProcess, cluster: Any, spread_node: Any
) -> None:
    assert wait_for(lambda: serves_on(server, 2), 60)
    results = under_load(server, lambda: cluster.remove_node(spread_node, allow_graceful=False))
    assert_none_hung(results, 600)
    assert index(server)["steady"]["nodes"] == [cluster.head_node.node_id]
    # the replacement waits for a node with a free `spread`; one joins and it lands there
    joined = cluster.add_node(**NODE, resources={"spread": 1})
    assert wait_for(lambda: serves_on(server, 2), 120), index(server)["steady"]
    assert joined.node_id in index(server)["steady"]["nodes"]
    for _ in range(20):
        response = httpx.post(f"{server.url}/v2/models/steady/infer", content=BODY, timeout=10)
        assert response.status_code == 200, response.text
