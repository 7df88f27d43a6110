"""A real two-node Ray cluster on loopback for the Ray engine's tests (`-m ray`).

Both nodes run on this machine as separate raylets with their own resources: the head offers
`head` and `spread`, the second node `accel`. Logical CPUs are set explicitly and the object
store kept small (Headway does not use it on the hot path), so the cluster fits beside the
rest of the suite. Every process of the cluster is stopped at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

#: Each node's settings: a small object store, idle workers not started ahead of need, and
#: workers at normal priority (Ray's default nice 15 starves them on a busy machine).
NODE = {"num_cpus": 8, "object_store_memory": 100 * 2**20}
#: Seconds a server on the cluster may take to start: each replica is an actor that starts a
#: process and imports its framework, on a 2-core machine shared with other work.
START_S = 240.0
RAY_ENV = {
    "RAY_worker_niceness": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def session_processes(session: str) -> set[int]:
    """PIDs of processes whose command line names the Ray session folder (Linux /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if session.encode() in cmdline.read():
                        found.add(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    saved = {name: os.environ.get(name) for name in RAY_ENV}
    os.environ.update(RAY_ENV)
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={**NODE, "resources": {"head": 1, "spread": 1}, "include_dashboard": False},
    )
    # the node that offers `accel` (tests find it by this attribute; more nodes may join)
    cluster.accel_node = cluster.add_node(**NODE, resources={"accel": 1})
    cluster.wait_for_nodes()
    session = os.path.basename(cluster.head_node.get_session_dir_path())
    try:
        yield cluster
    finally:
        cluster.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    left = session_processes(session)
    assert not left, f"Ray processes outlived the cluster: {sorted(left)}"
