"""gRPC beside REST on one Headway server: the overhead workload (a no-op Python model, one
row of four FP32 per request) at one and at 32 requests in flight, closed loop.

    PYTHONPATH=src python bench/grpc_vs_rest.py [--clients c] [--rounds 3] [--duration 5]

`--clients c` (the default) loads both protocols with a client written in C, one thread
each, so the client is cheap and the same kind for both: ``wrk`` posting OIP JSON over
HTTP/1.1 keep-alive connections for REST, ``h2load`` posting the ModelInfer message
(raw_input_contents, as tritonclient sends it) for gRPC, on 32 connections of one call each
and on one connection of 32 streams (how a gRPC channel multiplexes). Every call is checked
against the model's own success count (`/v2/models/noop/stats`), since h2load cannot read
gRPC's status. Rounds interleave the protocols; figures are medians over rounds.

`--clients python` loads REST through Headway's own load generator (raw HTTP/1.1 on asyncio,
binary tensors) and gRPC through grpc.aio in this process: the grpc.aio client costs more CPU
than the server here, so this mode measures the clients as much as the server.

The ratio is the figure to read; absolute numbers depend on the machine (note its load).
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import h2load
import httpx
import numpy as np
import orjson
import uvloop
import wrk
from grpc_ceiling import cpu_seconds

from headway.api.grpc import messages
from headway.launcher import ServerProcess
from headway.loadgen.client import Target, http_request, run
from headway.loadgen.report import percentiles_ms, summarize
from headway.loadgen.workload import Body

MODEL = "noop"
ROW = np.ones((1, 4), np.float32)
NOOP = """
class Noop:
    def load(self, path):
        pass

    def predict(self, batch):
        return batch
"""


def repository(root: Path) -> Path:
    folder = root / MODEL / "1"
    folder.mkdir(parents=True)
    (root / MODEL / "model.yaml").write_text(
        "framework: python\nentrypoint: noop.py:Noop\nslo_ms: 1000\n"
        "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n"
    )
    (folder / "noop.py").write_text(NOOP)
    return root


def rest(server: ServerProcess, concurrency: int, duration: float) -> dict[str, float]:
    target = Target.parse(server.url)
    head = orjson.dumps(
        {
            "inputs": [
                {"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                 "parameters": {"binary_data_size": ROW.nbytes}}
            ],
            "parameters": {"binary_data_output": True},
        }
    )  # fmt: skip
    body = Body(head + ROW.tobytes(), len(head))
    request = http_request(target, target.infer_path(MODEL), body)
    tally = run(target, [request], duration=duration, warmup=1.0, concurrency=concurrency)
    figures = summarize(tally, duration)
    failed = figures["answered"] - figures["ok"] + figures["transport_errors"]
    return {"rps": figures["throughput_rps"], **figures["latency_ms"], "failed": failed}


def grpc_run(server: ServerProcess, concurrency: int, duration: float) -> dict[str, float]:
    request = messages.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(ROW.tobytes())
    payload = request.SerializeToString()

    async def load() -> tuple[list[float], int]:
        latencies: list[float] = []
        failed = 0
        async with grpc.aio.insecure_channel(server.grpc_address) as channel:
            call = channel.unary_unary(f"/{messages.SERVICE}/ModelInfer")
            start = time.perf_counter()
            measure_from, end = start + 1.0, start + 1.0 + duration

            async def worker() -> None:
                nonlocal failed
                while (now := time.perf_counter()) < end:
                    try:
                        await call(payload)
                    except grpc.aio.AioRpcError:
                        failed += 1
                        continue
                    if now >= measure_from:
                        latencies.append(time.perf_counter() - now)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, failed

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        latencies, failed = runner.run(load())
    return {"rps": round(len(latencies) / duration, 2), **percentiles_ms(latencies),
            "failed": failed}  # fmt: skip


def infer_message() -> bytes:
    """The ModelInfer request as tritonclient sends it: the row in raw_input_contents."""
    request = messages.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(ROW.tobytes())
    return request.SerializeToString()


def successes(server: ServerProcess) -> tuple[int, int, int, int]:
    """The model's (success, fail) counts so far, and its (rows, worker actions), from
    Triton's statistics."""
    stats = httpx.get(f"{server.url}/v2/models/{MODEL}/stats", timeout=10).json()
    model = stats["model_stats"][0]
    counts = model["inference_stats"]
    return (counts["success"]["count"], counts["fail"]["count"], model["inference_count"],
            model["execution_count"])  # fmt: skip


def _children_cpu() -> float:
    """CPU seconds of this process's finished children: the C clients (wrk, h2load), which
    share the machine's cores with the server."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def checked(server: ServerProcess, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`measure()`'s figures, with `failed` counting every call the model did not answer
    successfully (the client's own failures, and answers short of its count of calls)."""
    assert server.process is not None
    before, failed_before, rows_before, actions_before = successes(server)
    used, started = cpu_seconds(server.process.pid), time.monotonic()
    client_used = _children_cpu()
    figures = measure()
    elapsed = time.monotonic() - started
    cores = (cpu_seconds(server.process.pid) - used) / elapsed
    client_cores = (_children_cpu() - client_used) / elapsed
    after, failed_after, rows_after, actions_after = successes(server)
    # the client counts only calls answered in its measured window; the server every one
    shortfall = max(0, figures["ok"] - (after - before))
    failed = figures["requests"] - figures["ok"] + shortfall + failed_after - failed_before
    return {"rps": figures["throughput_rps"], **figures["latency_ms"], "failed": failed,
            "cpu_us": 1e6 * cores / figures["throughput_rps"],
            "client_us": 1e6 * client_cores / figures["throughput_rps"],
            "rows": (rows_after - rows_before) / max(1, actions_after - actions_before)}  # fmt: skip


def c_clients(server: ServerProcess, rounds: int, duration: float) -> list[tuple[str, ...]]:
    """wrk (REST) and h2load (gRPC), interleaved; the median of each cell over rounds."""
    lua = wrk.script(
        orjson.dumps({"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                                  "data": ROW.ravel().tolist()}]}),
        Path(tempfile.mkdtemp(prefix="grpc-vs-rest-")),
    )  # fmt: skip
    message = infer_message()
    url = f"{server.url}/v2/models/{MODEL}/infer"
    path = f"/{messages.SERVICE}/ModelInfer"
    cells: dict[tuple[str, int], Callable[[], dict[str, Any]]] = {}
    for c in (1, 32):
        cells["REST (wrk)", c] = partial(wrk.closed, url, lua, c, duration)
        cells["gRPC (h2load, c conn.)", c] = partial(
            h2load.closed, server.grpc_address, path, message, connections=c, duration=duration
        )
    cells["gRPC (h2load, 1 conn.)", 32] = partial(
        h2load.closed, server.grpc_address, path, message, connections=1, streams=32,
        duration=duration,
    )  # fmt: skip
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {key: [] for key in cells}
    for number in range(rounds):
        for key, measure in cells.items():
            runs[key].append(checked(server, measure))
        print(f"round {number + 1}: load average {load_average()}", file=sys.stderr)
    rows = []
    for (name, c), figures in sorted(runs.items(), key=lambda item: item[0][1]):
        rest_rps = statistics.median(r["rps"] for r in runs["REST (wrk)", c])
        rps = statistics.median(r["rps"] for r in figures)
        rows.append((str(c), name, f"{rps:,.0f}", f"{rps / rest_rps:.2f}",
                     f"{statistics.median(r['p50'] for r in figures):.2f}",
                     f"{statistics.median(r['p99'] for r in figures):.2f}",
                     f"{statistics.median(r['cpu_us'] for r in figures):.0f}",
                     f"{statistics.median(r['client_us'] for r in figures):.0f}",
                     f"{statistics.median(r['rows'] for r in figures):.1f}",
                     str(sum(r["failed"] for r in figures)),
                     " / ".join(f"{r['rps']:,.0f}" for r in figures)))  # fmt: skip
    return rows


def python_clients(server: ServerProcess, duration: float) -> list[tuple[str, ...]]:
    rows = []
    for c in (1, 32):
        over_rest = rest(server, c, duration)
        over_grpc = grpc_run(server, c, duration)
        for name, r in (("REST (headway.loadgen)", over_rest), ("gRPC (grpc.aio)", over_grpc)):
            rows.append((str(c), name, f"{r['rps']:,.0f}",
                         f"{r['rps'] / over_rest['rps']:.2f}" if over_rest["rps"] else "nan",
                         f"{r['p50']:.2f}", f"{r['p99']:.2f}", "", "", "", str(r["failed"]), ""))  # fmt: skip
    return rows


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", choices=("c", "python"), default="c")
    parser.add_argument("--rounds", type=int, default=3, help="with --clients c")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--serve", default="", help="more `headway serve` options, quoted")
    args = parser.parse_args()
    started = load_average()
    with tempfile.TemporaryDirectory() as folder:
        root = repository(Path(folder) / "repository")
        with ServerProcess(root, state=Path(folder) / "s.db", workers=args.workers,
                           extra=shlex.split(args.serve)) as server:  # fmt: skip
            if args.clients == "c":
                rows = c_clients(server, args.rounds, args.duration)
            else:
                rows = python_clients(server, args.duration)
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, python "
          f"{sys.version.split()[0]}, grpcio {grpc.__version__}; {args.clients} clients, "
          f"{args.duration:g} s per run, {args.workers} worker(s); load average "
          f"{started} at start, {load_average()} at end")  # fmt: skip
    print(
        "\n| c | protocol (client) | req/s | ÷ REST | p50 ms | p99 ms | frontend CPU µs per "
        "call | client CPU µs per call | rows per worker action | failed | req/s each round |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
