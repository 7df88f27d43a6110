"""A worker process: hosts models and executes one action at a time, timing each.

Started by an engine as `python -m headway.runtime.worker --endpoint ENDPOINT --identity ID`.
It connects a DEALER socket to the controller's ROUTER, says hello, then serves actions:
`load` (build the framework adapter and load the artifact), `infer` (predict one batch) and
`unload`. Each reply carries the measured duration of the action. The worker exits when its
parent goes away, so a crashed server leaves no orphans.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import resource
import sys
import time
import traceback
from typing import Any

import numpy as np
import zmq

from headway.adapters import Adapter, adapter_class
from headway.runtime.wire import pack, unpack, zero_copy


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: peak RSS is the best we have
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class WorkerState:
    """The models this worker hosts and the actions it knows. No sockets here."""

    OPERATIONS = frozenset({"load", "infer", "unload", "ping"})

    def __init__(self) -> None:
        self.models: dict[str, Adapter] = {}

    def handle(
        self, header: dict[str, Any], tensors: dict[str, np.ndarray]
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        op = header.get("op")
        latest = header.get("latest")
        if latest is not None and time.monotonic() > latest:
            # Clockwork's window: an action that can no longer start in time is refused, so
            # the controller can answer its requests at once instead of running them late.
            return {"id": header.get("id"), "ok": False, "late": True, "duration": 0.0}, {}
        started = time.perf_counter()
        try:
            if op not in self.OPERATIONS:
                raise ValueError(f"unknown op {op!r}; a worker knows {sorted(self.OPERATIONS)}")
            reply, outputs = getattr(self, f"_{op}")(header, tensors)
            reply["ok"] = True
        except Exception as exc:  # the model's failure is reported, never fatal to the worker
            reply, outputs = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, {}
            if os.environ.get("HEADWAY_WORKER_TRACEBACKS"):
                traceback.print_exc()
        reply["id"] = header.get("id")
        reply["duration"] = time.perf_counter() - started
        return reply, outputs

    def _load(self, header: dict[str, Any], _: dict[str, np.ndarray]) -> tuple[dict, dict]:
        config = header["config"]
        for key in header.get("evict") or ():
            self.models.pop(key, None)
        if header.get("evict"):
            # Young generation only: a full collection took ~0.1 s on every evicting LOAD in
            # the 1,000-model experiment, longer than a 100 ms SLO (bench/RESULTS-clockwork.md).
            gc.collect(0)
        before = _rss_mb()
        adapter = adapter_class(config["framework"])(config)
        adapter.load()
        self.models[header["model"]] = adapter
        inputs, outputs = adapter.signature()
        memory = max(0.0, _rss_mb() - before)
        return {"inputs": inputs, "outputs": outputs, "memory_mb": memory}, {}

    def _unload(self, header: dict[str, Any], _: dict[str, np.ndarray]) -> tuple[dict, dict]:
        self.models.pop(header["model"], None)
        gc.collect()
        return {}, {}

    def _infer(self, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> tuple[dict, dict]:
        adapter = self.models.get(header["model"])
        if adapter is None:
            raise LookupError(f"model {header['model']!r} is not loaded on this worker")
        outputs = adapter.predict(tensors, header.get("outputs"))
        rows = header["rows"]
        for name, array in outputs.items():
            if array.ndim == 0 or array.shape[0] != rows:
                raise ValueError(
                    f"output {name!r} has shape {list(array.shape)}; its first dimension must be "
                    f"the batch ({rows} rows)"
                )
        return {}, outputs

    def _ping(self, header: dict[str, Any], _: dict[str, np.ndarray]) -> tuple[dict, dict]:
        return {"pid": os.getpid(), "models": sorted(self.models)}, {}


def serve(endpoint: str, identity: str) -> None:
    """Connect to the controller and execute actions until told to stop or orphaned."""
    parent = os.getppid()
    context = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.IDENTITY, identity.encode())
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    socket.send_multipart(pack({"op": "hello", "pid": os.getpid()}))
    state = WorkerState()
    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    while True:
        if not poller.poll(1000):
            if os.getppid() != parent:
                return
            continue
        header, tensors = unpack(socket.recv_multipart())
        if header.get("op") == "stop":
            return
        reply, outputs = state.handle(header, tensors)
        frames = pack(reply, outputs)
        socket.send_multipart(frames, copy=not zero_copy(frames))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A Headway worker process.")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--identity", required=True)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        serve(args.endpoint, args.identity)
    sys.exit(0)


if __name__ == "__main__":
    main()
