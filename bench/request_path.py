"""The Python of Headway's request path per request at 32 connections, without sockets.

Thirty-two `HttpConnection`s over transports that only count their writes are fed the overhead
workload's request (one row of 20 FP64 features, OIP JSON, ``outputs: [probabilities]``) all at
once, and the event loop turns until each is answered; the controller is real, its engine the
`FakeEngine` (replies on the next loop turn, no worker process). What remains is the event
loop thread's own Python per request, from the HTTP parse to the answer's bytes: the kernel's
reads and writes and the worker are left out, so the figure moves with the code and little
with other processes' load (process CPU time, not wall time). ``--profile`` prints cProfile's
top functions by own time and the Python calls per request.

``--engine inline`` serves the overhead workload's real LogisticRegression (`bench/models.py`)
on the inline engine instead, as `headway serve --engine inline` does, so the model's call and
the engine's turns are counted too; ``--connections 1`` makes every request a batch of its own,
which shows what a batch costs beside what a request does (an open loop's batches are only as
large as the frontend's turns make them).

    python bench/request_path.py [--rounds 1000] [--repeat 3] [--profile]
        [--connections 32] [--engine fake|inline]

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

import models
import numpy as np
import orjson
import uvloop
from systems import headway_repository

from headway.api.app import HeadwayApp
from headway.api.connection import HttpConnection
from headway.api.descriptions import unready
from headway.api.http import HttpServer
from headway.control.controller import Controller
from headway.repository import Repository
from headway.runtime.engines.inline import InlineEngine
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
        self.last = b""  # the latest answer, shown when a round is not all 200s

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.ok += data.startswith(b"HTTP/1.1 200 ")
        self.last = data

    def get_extra_info(self, name: str) -> Any:
        return None

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _probabilities(action: Any, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    rows = len(tensors["input-0"])
    return {"probabilities": np.full((rows, 2), 0.5)}


def request_bytes(row: np.ndarray | None = None) -> bytes:
    """The overhead workload's request: one row of 20 features (random unless given)."""
    if row is None:
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


async def measure(rounds: int, repeat: int, profile: bool, connections: int, engine: str) -> None:
    root = Path(tempfile.mkdtemp())
    if engine == "inline":  # the real model, run on the event loop
        root = headway_repository("lr", models.ensure(), root)
        features, _ = models.dataset()
        raw = request_bytes(features[100:101])
        app = HeadwayApp(Controller(Repository.scan(root), InlineEngine()))
    else:
        (root / "lr" / "1").mkdir(parents=True)
        (root / "lr" / "model.yaml").write_text(MODEL_YAML)
        raw = request_bytes()
        app = HeadwayApp(Controller(Repository.scan(root), FakeEngine(compute=_probabilities)))
    server = HttpServer(app, host="127.0.0.1", port=0)
    await server.start()
    while unready(app.controller) or not app.controller.status():  # load, warm-up sweep
        await asyncio.sleep(0.05)
    pairs: list[tuple[HttpConnection, CountingTransport]] = []
    for _ in range(connections):
        connection, transport = HttpConnection(server), CountingTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        pairs.append((connection, transport))

    async def run(n: int) -> None:
        before = sum(transport.ok for _, transport in pairs)
        for _ in range(n):
            for connection, _ in pairs:
                connection.data_received(raw)
            await asyncio.sleep(0)  # a turn of the loop between rounds, as between reads
            while any(connection.pending for connection, _ in pairs):
                await asyncio.sleep(0)
        answered = sum(transport.ok for _, transport in pairs) - before
        assert answered == n * connections, (
            f"{answered} 200s to {n * connections} requests: {pairs[0][1].last[:400]!r}"
        )

    await run(200)  # warm up: the model's estimates, the caches
    requests = rounds * connections
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
    parser.add_argument(
        "--connections", type=int, default=CONNECTIONS, help="requests sent at once (a batch)"
    )
    parser.add_argument(
        "--engine", choices=("fake", "inline"), default="fake",
        help="fake: replies a turn later, no model; inline: the real LR model on the loop",
    )  # fmt: skip
    args = parser.parse_args()
    if args.connections < 1 or args.rounds < 1:
        parser.error("--connections and --rounds must be at least 1")
    uvloop.run(measure(args.rounds, args.repeat, args.profile, args.connections, args.engine))


if __name__ == "__main__":
    main()
