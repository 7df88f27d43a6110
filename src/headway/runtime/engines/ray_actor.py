"""The Ray actor that hosts one Headway worker: Ray places it, Headway talks to it.

The actor runs Headway's own worker loop (`runtime/worker.serve`), connected to the frontend
over Headway's RPC on `tcp://`: actions and tensors never pass through Ray's object store.
Ray only starts the actor on a node with the resources asked for, tells the engine which node
that is (`where`), and reports the actor's death (`run`'s result fails with an actor error).
Must be importable on every node: Headway is installed there like any Ray application's code.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from headway.runtime.worker import serve


class WorkerActor:
    """One Headway worker inside a Ray actor (the engine wraps it with `ray.remote`)."""

    def where(self) -> dict[str, Any]:
        """The node and process this actor runs in."""
        import ray

        return {
            "node": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def run(self, endpoint: str, identity: str, secret: str) -> int:
        """Serve actions until the frontend says stop or goes away (blocks; then returns 0).
        `secret` proves to the frontend that this worker is one it started."""
        serve(endpoint, identity, secret)
        return 0
