"""What a refusal costs Headway's frontend against a served request: frontend CPU per answer.

Under open-loop overload the frontend (one Python thread) must read and answer every request,
serving what it can and refusing the rest; a refusal that costs nearly as much as a served
request leaves no core to serve with. Each server here serves a no-op Python model (one row
of four FP32 per request, OIP JSON over REST), closed loop at 32 connections from ``wrk``
(``bench/wrk.py``), with two bodies:

- ``served``: no deadline of its own (the model's 1,000 ms): every request is answered 200;
- ``refused, late``: ``parameters.slo_ms`` of 0.001 ms: every request has waited longer than
  its deadline by the time it is read, and is answered 503;

Each server's HTTP process (the leader; its worker's CPU is apart) is read from ``/proc``
before and after each run: CPU microseconds per answer. Servers of both engines, in
interleaved rounds; medians over rounds.

    PYTHONPATH=src python bench/refusal_cost.py [--rounds 3] [--duration 3] [--engines local,inline]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import wrk
from grpc_vs_rest import MODEL, ROW, repository

from headway.launcher import ServerProcess

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (its threads included, its children not)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def body(slo_ms: float | None) -> bytes:
    request: dict[str, Any] = {
        "inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                    "data": ROW.ravel().tolist()}]
    }  # fmt: skip
    if slo_ms is not None:
        request["parameters"] = {"slo_ms": slo_ms}
    return orjson.dumps(request)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--engines", default="local,inline")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    started = load_average()
    cases = {"served": body(None), "refused, late": body(0.001)}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        root = repository(folder / "repository")
        scripts = {label: wrk.script(b, folder / label.replace(", ", "-")) for label, b in
                   cases.items()}  # fmt: skip
        servers = {
            engine: ServerProcess(root, state=folder / f"{engine}.db", grpc_port=0,
                                  extra=["--engine", engine], log=folder / f"{engine}.log")
            for engine in engines
        }  # fmt: skip
        try:
            for server in servers.values():
                server.start()
            for number in range(args.rounds):
                for label, lua in scripts.items():
                    for engine, server in servers.items():
                        runs.setdefault((engine, label), []).append(measure(server, lua, args))
                print(f"round {number + 1}: load average {load_average()}", file=sys.stderr)
        finally:
            for server in servers.values():
                server.stop()
    print(f"{os.cpu_count()} cores, python {sys.version.split()[0]}; wrk -t1 -c32, "
          f"{args.duration:g} s x {args.rounds} interleaved rounds; load average {started} at "
          f"start, {load_average()} at end")  # fmt: skip
    print("\n| engine | requests | answers/s | frontend CPU us per answer | ÷ served | "
          "frontend cores | 503s | us per answer, each round |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for engine in engines:
        base = statistics.median(r["cpu_us"] for r in runs[engine, "served"])
        for label in cases:
            figures = runs[engine, label]
            cpu = statistics.median(r["cpu_us"] for r in figures)
            rps = statistics.median(r["throughput_rps"] for r in figures)
            cores = statistics.median(r["cores"] for r in figures)
            bad = sum(r["requests"] - r["ok"] for r in figures)
            each = " / ".join(f"{r['cpu_us']:.0f}" for r in figures)
            print(f"| {engine} | {label} | {rps:,.0f} | {cpu:.1f} | {cpu / base:.2f} | "
                  f"{cores:.2f} | {bad} | {each} |")  # fmt: skip


def measure(server: ServerProcess, lua: Path, args: argparse.Namespace) -> dict[str, Any]:
    assert server.process is not None
    pid = server.process.pid
    url = f"{server.url}/v2/models/{MODEL}/infer"
    before = cpu_seconds(pid)
    result = wrk.closed(url, lua, 32, args.duration)
    used = cpu_seconds(pid) - before
    # wrk's count covers its whole run, the CPU the same span (plus its start and stop)
    result["cpu_us"] = used / max(result["requests"], 1) * 1e6
    result["cores"] = used / max(round(args.duration), 1)
    return result


if __name__ == "__main__":
    main()
