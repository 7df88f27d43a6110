"""gRPC beside REST on one Headway server: the overhead workload (a no-op Python model, one
row of four FP32 per request) at one and at 32 requests in flight, closed loop.

    PYTHONPATH=src python bench/grpc_vs_rest.py [--duration 5] [--workers 1]

REST goes through Headway's own load generator (raw HTTP/1.1 on asyncio, binary tensors);
gRPC through grpc.aio on one channel with the request serialized once, as tritonclient's
async client would send it (raw_input_contents). Both run in this process, one after the
other against the same server, so their ratio is the figure to read; the absolute numbers
depend on the machine (note whether it was shared). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import orjson
import uvloop

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = repository(Path(folder) / "repository")
        with ServerProcess(root, state=Path(folder) / "s.db", workers=args.workers) as server:
            rows = []
            for concurrency in (1, 32):
                over_rest = rest(server, concurrency, args.duration)
                over_grpc = grpc_run(server, concurrency, args.duration)
                rows.append((concurrency, over_rest, over_grpc))
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
          f"python {sys.version.split()[0]}; {args.duration:g} s per run, {args.workers} worker(s)")  # fmt: skip
    print("\n| c | REST req/s | gRPC req/s | gRPC/REST | REST p50 ms | gRPC p50 ms | REST p99 ms "
          "| gRPC p99 ms | failed (REST, gRPC) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for c, r, g in rows:
        ratio = g["rps"] / r["rps"] if r["rps"] else float("nan")
        print(f"| {c} | {r['rps']:,.0f} | {g['rps']:,.0f} | {ratio:.2f} | {r['p50']:.2f} | "
              f"{g['p50']:.2f} | {r['p99']:.2f} | {g['p99']:.2f} | {r['failed']}, {g['failed']} |")  # fmt: skip


if __name__ == "__main__":
    main()
