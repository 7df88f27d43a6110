"""Does sending answers from a thread (``headway serve --write-thread``) free the event loop?

Headway with and without ``--write-thread`` serve the overhead workload's LogisticRegression
side by side; ``wrk`` (1 thread) drives each at 32 and at 1 connection in interleaved rounds.
Beside throughput and latency it reads each server thread's CPU time from ``/proc`` and reports
it per request: the event loop's thread (``loop``) and the others (the write thread, granian's
or a library's), so that what moved off the loop's thread shows even when the machine is
shared and throughput swings with others' load.

    python bench/write_thread.py [--rounds 3] [--duration 4]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

import models
import wrk
from harness import bodies
from peers.common import WORK, Server
from systems import BY_NAME

from headway.launcher import free_port

SYSTEMS = ("headway", "headway-writer")
TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds by thread of `pid`: the main thread as ``loop``, the others summed."""
    cpu = {"loop": 0.0, "other": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            seconds = (int(fields[11]) + int(fields[12])) / TICKS
            cpu["loop" if tid == str(pid) else "other"] += seconds
    return cpu


def measure(
    server: Server, url: str, lua: Path, concurrency: int, duration: float
) -> dict[str, Any]:
    before = thread_cpu(server.pid)
    figures = wrk.closed(url, lua, concurrency, duration)
    after = thread_cpu(server.pid)
    requests = max(1, figures["requests"])
    figures["cpu_us"] = {k: (after[k] - before[k]) / requests * 1e6 for k in after}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0)
    args = parser.parse_args()
    paths = models.ensure()
    x, _ = models.dataset()
    work = WORK / "write-thread"
    lua = wrk.script(bodies(x[100:101], "FP64", "probabilities")[0], work / "wrk")
    servers: dict[str, tuple[Server, str]] = {}
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {os.getloadavg()}")
    try:
        for name in SYSTEMS:
            port = free_port()
            server = BY_NAME[name].server("lr", paths, port, work).start()
            servers[name] = (server, f"http://127.0.0.1:{port}/v2/models/lr/infer")
        wrk.closed(servers[SYSTEMS[0]][1], lua, 32, 1)  # warm-up
        for r in range(args.rounds):
            for c in (32, 1):
                for name in SYSTEMS:
                    server, url = servers[name]
                    f = measure(server, url, lua, c, args.duration)
                    runs.setdefault((name, c), []).append(f)
                    cpu = f["cpu_us"]
                    print(f"round {r + 1} c={c} {name}: {f['throughput_rps']:,.0f} req/s, p50 "
                          f"{f['latency_ms']['p50']:.3f} p99 {f['latency_ms']['p99']:.3f} ms, "
                          f"cpu/request loop {cpu['loop']:.1f} other {cpu['other']:.1f} us, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    finally:
        for server, _ in servers.values():
            with contextlib.suppress(Exception):
                server.stop()
    print("\n| system | c | req/s | p50 ms | p99 ms | loop us/req | other us/req |")
    print("|---|---|---|---|---|---|---|")
    for (name, c), fs in sorted(runs.items(), key=lambda kv: (-kv[0][1], kv[0][0])):

        def med(get: Any, fs: list[dict[str, Any]] = fs) -> float:
            return statistics.median(get(f) for f in fs)

        print(f"| {name} | {c} | {med(lambda f: f['throughput_rps']):,.0f} | "
              f"{med(lambda f: f['latency_ms']['p50']):.3f} | "
              f"{med(lambda f: f['latency_ms']['p99']):.3f} | "
              f"{med(lambda f: f['cpu_us']['loop']):.1f} | "
              f"{med(lambda f: f['cpu_us']['other']):.1f} |")  # fmt: skip
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
