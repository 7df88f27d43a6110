"""The Python a quick refusal costs Headway's frontend, in-process: CPU µs per refused request.

`refusal_cost.py` measures whole servers under `wrk` (the system calls, the event loop, a mix
of refusals made before and after decoding); this isolates the connection's own path for a
request that overload refuses before routing it (`api/refusals.py`): one HTTP/1.1 POST of one
row, with the headers `headway bench` sends, given to `HttpConnection.data_received` as one
read, read a second after it arrived (so refused as `late`), its 503 written to a transport
that keeps nothing. A real controller over `FakeEngine` workers. Each tree runs in its own
process (its own `src` on PYTHONPATH), in interleaved rounds; CPU time (`time.process_time`),
so other processes' load shows less than in wall time, but the caches it shares still count.

    PYTHONPATH=src python bench/refusal_python.py [--requests 50000] [--rounds 3] [--old-src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
    "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n"
)
BODY = orjson.dumps(
    {
        "inputs": [
            {"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [0.1, 0.2, 0.3, 0.4]}
        ],
        "parameters": {"slo_ms": 50},
    }
)
REQUEST = (
    b"POST /v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: headway-bench\r\n"
    b"Content-Length: %d\r\nContent-Type: application/json\r\n\r\n" % len(BODY)
) + BODY


class Discard:
    """A transport that keeps nothing."""

    written = 0

    def write(self, data: bytes) -> None:
        self.written += 1

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return False


async def refusals(folder: Path, requests: int) -> float:
    """CPU µs per quick refusal of `requests` (after as many to warm up) in this process."""
    from headway.api.app import HeadwayApp
    from headway.api.connection import HttpConnection
    from headway.api.http import HttpServer
    from headway.control.controller import Controller
    from headway.repository import Repository
    from headway.testing import FakeEngine

    (folder / "m" / "1").mkdir(parents=True, exist_ok=True)
    (folder / "m" / "model.yaml").write_text(YAML)
    app = HeadwayApp(Controller(Repository.scan(folder), FakeEngine()))
    await app.start()
    server = HttpServer(app)
    server.loop = asyncio.get_running_loop()
    connection = HttpConnection(server)
    transport = Discard()
    connection.connection_made(transport)  # type: ignore[arg-type]
    server.turn_open = True  # one long turn of reads whose bytes arrived a second ago
    server.turn_floor = time.monotonic() - 1.0
    server.caught_up = float("inf")  # nothing to catch up on: no workers
    feed = connection.data_received
    for _ in range(requests):
        feed(REQUEST)
    started = time.process_time()
    for _ in range(requests):
        feed(REQUEST)
    used = time.process_time() - started
    await app.stop()
    assert transport.written == 2 * requests, "not every request was refused at once"
    return used / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old-src", type=Path, help="also measure this checkout's src")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.once:
        with tempfile.TemporaryDirectory() as name:
            print(asyncio.run(refusals(Path(name), args.requests)))
        return
    trees = {"new": os.environ.get("PYTHONPATH", "")}
    if args.old_src is not None:
        trees = {"old": str(args.old_src.resolve()), **trees}
    figures: dict[str, list[float]] = {tree: [] for tree in trees}
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    for _ in range(args.rounds):
        for tree, path in trees.items():
            done = subprocess.run(
                [sys.executable, __file__, "--once", "--requests", str(args.requests)],
                env={**os.environ, "PYTHONPATH": path},
                capture_output=True,
                text=True,
                check=True,
            )
            figures[tree].append(float(done.stdout.split()[-1]))
    after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"{args.requests:,} quick refusals x {args.rounds} interleaved rounds; load average "
          f"{load} at start, {after} at end")  # fmt: skip
    print("\n| tree | CPU µs per quick refusal (median) | each round |\n|---|---|---|")
    for tree, each in figures.items():
        rounds = " / ".join(f"{x:.2f}" for x in each)
        print(f"| {tree} | {statistics.median(each):.2f} | {rounds} |")


if __name__ == "__main__":
    main()
