"""What OpenTelemetry tracing costs Headway, off and on: the overhead workload (a no-op Python
model, one row of four FP32 per request, OIP JSON over REST) closed loop at 32 and 1
connections, measured by ``wrk`` (``bench/wrk.py``) on three servers side by side:

- ``off``: tracing off, the default (OpenTelemetry installed, no ``OTEL_TRACES_EXPORTER``);
- ``not installed``: the same, with every ``opentelemetry`` import refused (a
  ``sitecustomize`` on the server's path), as without the ``tracing`` extra;
- ``on``: ``OTEL_TRACES_EXPORTER=console``, every request traced, spans written to the
  server's log in batches (the cost of tracing itself, for reference).

``off`` against ``not installed`` is the cost of the disabled checks. All three serve at once
and are measured in interleaved rounds; figures are medians over rounds.

    PYTHONPATH=src python bench/tracing_cost.py [--rounds 3] [--duration 4]
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

#: Refuses `import opentelemetry...` in the process whose path it is on.
BLOCKER = """
import importlib.abc
import sys


class NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name} is not installed (bench/tracing_cost.py)")
        return None


sys.meta_path.insert(0, NoOpenTelemetry())
"""


def environments(folder: Path) -> dict[str, dict[str, str]]:
    blocker = folder / "no-opentelemetry"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    path = os.environ.get("PYTHONPATH", "")
    quiet = {"OTEL_TRACES_EXPORTER": "none"}
    return {
        "off": quiet,
        "not installed": {**quiet, "PYTHONPATH": f"{path}{os.pathsep}{blocker}"},
        "on (console exporter)": {"OTEL_TRACES_EXPORTER": "console"},
    }


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0)
    args = parser.parse_args()
    started = load_average()
    body = orjson.dumps({"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32",
                                     "data": ROW.ravel().tolist()}]})  # fmt: skip
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        root = repository(folder / "repository")
        lua = wrk.script(body, folder / "wrk")
        servers = {
            label: ServerProcess(
                root, state=folder / f"s{i}.db", grpc_port=0, env=env, log=folder / f"log{i}.txt"
            )
            for i, (label, env) in enumerate(environments(folder).items())
        }
        try:
            for server in servers.values():
                server.start()
            for number in range(args.rounds):
                for c in (32, 1):
                    for label, server in servers.items():
                        url = f"{server.url}/v2/models/{MODEL}/infer"
                        runs.setdefault((label, c), []).append(
                            wrk.closed(url, lua, c, args.duration)
                        )
                print(f"round {number + 1}: load average {load_average()}", file=sys.stderr)
        finally:
            for server in servers.values():
                server.stop()
        blocked = (folder / "log1.txt").read_text()
    assert "Traceback" not in blocked, blocked[-2000:]
    print(f"{os.cpu_count()} cores, python {sys.version.split()[0]}; wrk -t1, "
          f"{args.duration:g} s x {args.rounds} interleaved rounds; load average {started} at "
          f"start, {load_average()} at end")  # fmt: skip
    print(
        "\n| c | tracing | req/s | ÷ not installed | p50 ms | p99 ms | not 2xx | req/s each round |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for c in (32, 1):
        base = statistics.median(r["throughput_rps"] for r in runs["not installed", c])
        for label in servers:
            figures = runs[label, c]
            rps = statistics.median(r["throughput_rps"] for r in figures)
            p50 = statistics.median(r["latency_ms"]["p50"] for r in figures)
            p99 = statistics.median(r["latency_ms"]["p99"] for r in figures)
            bad = sum(r["requests"] - r["ok"] for r in figures)
            each = " / ".join(f"{r['throughput_rps']:,.0f}" for r in figures)
            print(f"| {c} | {label} | {rps:,.0f} | {rps / base:.3f} | {p50:.2f} | {p99:.2f} | "
                  f"{bad} | {each} |")  # fmt: skip


if __name__ == "__main__":
    main()
