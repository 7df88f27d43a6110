"""The Python of Headway's request path per request at 32 connections, without sockets.

Thirty-two `HttpConnection`s over transports that only count their writes are fed the overhead
workload's request (one row of 20 FP64 features, OIP JSON, ``outputs: [probabilities]``) all at
once, and the event loop turns until each is answered; the controller is real, its engine the
`FakeEngine` (replies on the next loop turn, no worker process). What remains is the event
loop thread's own Python per request, from the HTTP parse to the answer's bytes: the kernel's
reads and writes and the worker are left out, so the figure moves with the code and little
with other processes' load (process CPU time, not wall time). ``--profile`` prints cProfile's
top functions by own time and the Python calls per request.

    python bench/request_path.py [--rounds 1000] [--repeat 3] [--profile]

Compare two trees with ``PYTHONPATH=/other/src``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import uvloop

from headway.api.app import HeadwayApp
from headway.api.connection import HttpConnection
from headway.api.http import HttpServer
from headway.control.controller import Controller
from headway.repository import Repository
from headway.testing import FakeEngine

CONNECTIONS = 32
MODEL_YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 64\n"
    "inputs: [{name: input-0, datatype: FP64, shape: [-1, 20]}]\n"
    "outputs: [{name: probabilities, datatype: FP64, shape: [-1, 2]}]\n"
)


class CountingTransport:
    """A transport that keeps nothing: it counts the answers written, and the 200s."""

    def __init__(self) -> None:
        self.writes = 0
        self.ok = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.ok += data.startswith(b"HTTP/1.1 200 ")

    def get_extra_info(self, name: str) -> Any:
        return None

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _probabilities(action: Any, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    rows = len(tensors["input-0"])
    return {"probabilities": np.full((rows, 2), 0.5)}


def request_bytes() -> bytes:
    row = np.random.default_rng(0).standard_normal((1, 20))
    body = orjson.dumps({
        "inputs": [{"name": "input-0", "shape": [1, 20], "datatype": "FP64", "data": row.tolist()}],
        "outputs": [{"name": "probabilities"}],
    })  # fmt: skip
    head = (
        b"POST /v2/models/lr/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
        b"Content-Length: %d\r\nContent-Type: application/json\r\n\r\n" % len(body)
    )
    return head + body


async def measure(rounds: int, repeat: int, profile: bool) -> None:
    root = Path(tempfile.mkdtemp())
    (root / "lr" / "1").mkdir(parents=True)
    (root / "lr" / "model.yaml").write_text(MODEL_YAML)
    app = HeadwayApp(Controller(Repository.scan(root), FakeEngine(compute=_probabilities)))
    server = HttpServer(app, host="127.0.0.1", port=0)
    await server.start()
    raw = request_bytes()
    connections: list[tuple[HttpConnection, CountingTransport]] = []
    for _ in range(CONNECTIONS):
        connection, transport = HttpConnection(server), CountingTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        connections.append((connection, transport))

    async def run(n: int) -> None:
        before = sum(transport.ok for _, transport in connections)
        for _ in range(n):
            for connection, _ in connections:
                connection.data_received(raw)
            while any(connection.pending for connection, _ in connections):
                await asyncio.sleep(0)
        answered = sum(transport.ok for _, transport in connections) - before
        assert answered == n * CONNECTIONS, f"{answered} 200s to {n * CONNECTIONS} requests"

    await run(200)  # warm up: the model's estimates, the caches
    requests = rounds * CONNECTIONS
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await run(rounds)
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(30)
        print(f"Python calls per request: {stats.total_calls / requests:.1f}")  # type: ignore[attr-defined]
    for _ in range(repeat):
        began = time.process_time()
        await run(rounds)
        print(f"{(time.process_time() - began) / requests * 1e6:.2f} us of CPU per request")
    await server.stop()
    await app.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="requests per connection")
    parser.add_argument("--repeat", type=int, default=3, help="measurements of --rounds each")
    parser.add_argument("--profile", action="store_true", help="cProfile one more --rounds")
    args = parser.parse_args()
    uvloop.run(measure(args.rounds, args.repeat, args.profile))


if __name__ == "__main__":
    main()
