"""How fast can `headway bench` send? Its ceiling on one core against a trivial server.

Starts a trivial HTTP/1.1 server (a raw uvloop protocol that answers every request with the
same small 200 response, and the model metadata that `headway bench` asks for) in a separate
process pinned to its own core, pins this process to another core, and drives the server with
`headway.loadgen.client.run`, closed loop at several concurrencies and open loop at several
rates. For each run it prints the answers per second and the CPU this process used (busy
fraction of its one core), so a run where the server, not the load generator, was the limit shows
up as a load generator below 100% CPU.

    python bench/loadgen_ceiling.py [--duration 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from headway.loadgen import arrivals, report  # noqa: E402
from headway.loadgen.client import Target, http_request, run  # noqa: E402
from headway.loadgen.workload import encode, from_metadata  # noqa: E402

METADATA = orjson.dumps(
    {
        "name": "m",
        "platform": "trivial",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}],
    }
)
ANSWER = orjson.dumps(
    {
        "model_name": "m",
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 1], "data": [0.5]}],
    }
)


def _response(body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def serve(port: int, cpu: int | None) -> None:
    """The trivial server: fixed answers, httptools to find where each request ends."""
    import httptools
    import uvloop

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    infer, metadata = _response(ANSWER), _response(METADATA)

    class Trivial(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.Transport = transport  # type: ignore[assignment]
            self.parser = httptools.HttpRequestParser(self)
            self.get = False

        def on_url(self, url: bytes) -> None:
            self.get = self.parser.get_method() == b"GET"

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_complete(self) -> None:
            self.transport.write(metadata if self.get else infer)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Trivial, "127.0.0.1", port, backlog=4096)
        print("ready", flush=True)
        await server.serve_forever()

    uvloop.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def measure(
    target: Target,
    requests: list[bytes],
    duration: float,
    server_pid: int,
    concurrency: int | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    """One run; the figures that say how fast the load generator went and what it cost."""
    schedule = None if rate is None else arrivals.schedule(rate, duration + 1.0, "poisson", seed=1)
    cpu0, wall0, server0 = _cpu_seconds(), time.perf_counter(), _process_cpu_seconds(server_pid)
    tally = run(
        target,
        requests,
        duration=duration,
        warmup=1.0,
        schedule=schedule,
        concurrency=concurrency,
        max_connections=2048,
    )
    cpu, wall = _cpu_seconds() - cpu0, time.perf_counter() - wall0
    server_cpu = _process_cpu_seconds(server_pid) - server0
    figures = report.summarize(tally, duration=duration)
    mode = f"closed c={concurrency}" if rate is None else f"open {rate:g}/s"
    return {
        "mode": mode,
        "answers_per_s": round(figures["throughput_rps"]),
        "loadgen_cpu": round(cpu / wall, 2),  # of its one core
        "answers_per_cpu_s": round(tally.answered / cpu),  # the ceiling on one whole core
        "server_cpu": round(server_cpu / wall, 2),
        "p50_ms": figures["latency_ms"]["p50"],
        "p99_ms": figures["latency_ms"]["p99"],
        "lateness_p99_ms": figures["send_lateness_ms"]["p99"],
        "peak_connections": figures["peak_connections"],
        "capped": figures["capped"],
        "failed": figures["requests"] - figures["ok"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[16, 64, 256])
    parser.add_argument("--rate", type=float, nargs="*", default=[10_000, 20_000, 30_000, 40_000])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # internal: be the server
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.cpu)
        return

    cores = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = (cores[-1], cores[0]) if len(cores) > 1 else (None, None)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)]
        + ([] if server_cpu is None else ["--cpu", str(server_cpu)]),
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != b"ready":
            raise SystemExit("the trivial server did not start")
        if client_cpu is not None:
            os.sched_setaffinity(0, {client_cpu})
        target = Target("127.0.0.1", port)
        metadata = orjson.loads(METADATA)
        bodies = [encode(r) for r in from_metadata(metadata, batch=1, variants=16)]
        requests = [http_request(target, target.infer_path("m"), b) for b in bodies]
        results = [
            measure(target, requests, args.duration, server.pid, concurrency=c)
            for c in args.concurrency
        ]
        results += [measure(target, requests, args.duration, server.pid, rate=r) for r in args.rate]
    finally:
        server.terminate()
        server.wait()
    summary = _summary(results)
    if args.json:
        print(orjson.dumps({"machine": _machine(), "runs": results, **summary}).decode())
        return
    print(
        f"{_machine()}; loadgen on cpu {client_cpu}, trivial server on cpu {server_cpu}, "
        f"{args.duration:g} s per run"
    )
    for r in results:
        print("  ".join(f"{k}={v}" for k, v in r.items()))
    for key, value in summary.items():
        print(f"{key}: {value}")


LATE_MS = 5.0  # an open-loop run is "on schedule" when its send lateness p99 is under this


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    closed = [r for r in results if r["mode"].startswith("closed")]
    on_time = [
        r
        for r in results
        if r["mode"].startswith("open")
        and not r["failed"]
        and r["lateness_p99_ms"] is not None
        and r["lateness_p99_ms"] < LATE_MS
    ]
    best = max(closed, key=lambda r: r["answers_per_s"], default=None)
    return {
        "closed_loop_best_rps": best and best["answers_per_s"],
        "closed_loop_best_loadgen_cpu": best and best["loadgen_cpu"],
        "open_loop_on_schedule_up_to_rps": max((r["answers_per_s"] for r in on_time), default=None),
        "answers_per_loadgen_cpu_s_median": sorted(r["answers_per_cpu_s"] for r in results)[
            len(results) // 2
        ]
        if results
        else None,
    }


def _machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
