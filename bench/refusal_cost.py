"""What a refusal costs Headway's frontend against a served request: frontend CPU per answer.

Under open-loop overload the frontend (one Python thread) must read and answer every request,
serving what it can and refusing the rest; a refusal that costs nearly as much as a served
request leaves no core to serve with. Each server here serves a no-op Python model and one
that sleeps 20 ms per batch of one (one row of four FP32 per request, OIP JSON over REST),
closed loop at 32 connections from ``wrk`` (``bench/wrk.py``), with four bodies:

- ``served``: the no-op model, no deadline of its own (the model's 1,000 ms): answered 200;
- ``refused, too short``: the no-op model with ``parameters.slo_ms`` of 0.001 ms, shorter than
  one row takes: answered 503 by admission, after the request is decoded;
- ``refused, backlog``: the sleeping model with ``slo_ms`` 30: one request runs at a time, and
  the other connections' requests are refused for the work ahead (by admission, or since
  the refusals under overload, mostly before they are decoded: ``backlog``);
- ``refused unread``: the no-op model with ``slo_ms`` 0.001 at 1,024 connections: a turn of
  reads takes longer than the lag's target, the frontend sheds, and nearly every request is
  refused before it is decoded (``late`` or ``shed``): what a quick refusal costs a whole
  server, its reads, writes and event loop included.

Each server's HTTP process (the leader; its worker's CPU is apart) is read from ``/proc``
before and after each run: CPU microseconds per answer. Servers of both engines, and with
``--old-src`` the same from another checkout's ``src`` (e.g. the commit before a change),
in interleaved rounds; medians over rounds.

    PYTHONPATH=src python bench/refusal_cost.py [--rounds 3] [--duration 3] [--old-src DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson
import wrk
from grpc_ceiling import cpu_seconds
from grpc_vs_rest import MODEL, ROW, repository

from headway.launcher import ServerProcess

SLEEPER = "sleep20"
#: Connections of the ``refused unread`` case: enough that a turn of reads outlasts the lag's
#: target (`control.admission.overload.TARGET_S`) at ~10 us a refusal.
UNREAD_CONNECTIONS = 1024
SLEEP = """
import time


class Sleep:
    def load(self, path):
        pass

    def predict(self, batch):
        time.sleep(0.02)
        return batch
"""


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


def with_sleeper(root: Path) -> Path:
    folder = root / SLEEPER / "1"
    folder.mkdir(parents=True)
    (root / SLEEPER / "model.yaml").write_text(
        "framework: python\nentrypoint: sleep.py:Sleep\nmax_batch_size: 1\n"
        "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n"
    )
    (folder / "sleep.py").write_text(SLEEP)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--engines", default="local,inline")
    parser.add_argument("--old-src", type=Path, help="also serve from this checkout's src")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    started = load_average()
    cases = {"served": (MODEL, body(None)), "refused, too short": (MODEL, body(0.001)),
             "refused, backlog": (SLEEPER, body(30)),
             "refused unread": (MODEL, body(0.001))}  # fmt: skip
    trees = {"new": {}} if args.old_src is None else {
        "old": {"PYTHONPATH": str(args.old_src.resolve())}, "new": {}}  # fmt: skip
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        root = with_sleeper(repository(folder / "repository"))
        scripts = {label: (model, wrk.script(b, folder / label.replace(", ", "-")))
                   for label, (model, b) in cases.items()}  # fmt: skip
        servers = {
            f"{engine} {tree}": ServerProcess(
                root, state=folder / f"{engine}-{tree}.db", grpc_port=0, env=env,
                extra=["--engine", engine], log=folder / f"{engine}-{tree}.log")
            for engine in engines for tree, env in trees.items()
        }  # fmt: skip
        try:
            for server in servers.values():
                server.start()
            for number in range(args.rounds):
                for label, (model, lua) in scripts.items():
                    for name, server in servers.items():
                        runs.setdefault((name, label), []).append(measure(server, model, lua, args))
                print(f"round {number + 1}: load average {load_average()}", file=sys.stderr)
        finally:
            for server in servers.values():
                server.stop()
    print(f"{os.cpu_count()} cores, python {sys.version.split()[0]}; wrk -t1 -c32 (refused "
          f"unread: -c{UNREAD_CONNECTIONS}), {args.duration:g} s x {args.rounds} interleaved rounds; load average {started} at "
          f"start, {load_average()} at end")  # fmt: skip
    print("\n| server | requests | answers/s | frontend CPU us per answer | ÷ served | "
          "frontend cores | not 200 | of them refused unread | us per answer, each round |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name in servers:
        base = statistics.median(r["cpu_us"] for r in runs[name, "served"])
        for label in cases:
            figures = runs[name, label]
            cpu = statistics.median(r["cpu_us"] for r in figures)
            rps = statistics.median(r["throughput_rps"] for r in figures)
            cores = statistics.median(r["cores"] for r in figures)
            bad = sum(r["requests"] - r["ok"] for r in figures)
            unread = sum(r["unread"] for r in figures)
            each = " / ".join(f"{r['cpu_us']:.0f}" for r in figures)
            print(f"| {name} | {label} | {rps:,.0f} | {cpu:.1f} | {cpu / base:.2f} | "
                  f"{cores:.2f} | {bad} | {unread / max(bad, 1):.0%} | {each} |")  # fmt: skip


def measure(
    server: ServerProcess, model: str, lua: Path, args: argparse.Namespace
) -> dict[str, Any]:
    assert server.process is not None
    pid = server.process.pid
    url = f"{server.url}/v2/models/{model}/infer"
    unread = refused_unread(server.url)
    before = cpu_seconds(pid)
    connections = UNREAD_CONNECTIONS if lua.parent.name == "refused unread" else 32
    result = wrk.closed(url, lua, connections, args.duration)
    used = cpu_seconds(pid) - before
    result["unread"] = refused_unread(server.url) - unread
    # wrk's count covers its whole run, the CPU the same span (plus its start and stop)
    result["cpu_us"] = used / max(result["requests"], 1) * 1e6
    result["cores"] = used / max(round(args.duration), 1)
    return result


def refused_unread(url: str) -> float:
    """Requests refused before they were decoded so far (0 where the tree has no such count)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("headway_refused_unread_total{"))  # fmt: skip


if __name__ == "__main__":
    main()
