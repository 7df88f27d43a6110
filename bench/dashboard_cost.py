"""What one open dashboard costs the server: the overhead workload with a page polling and
without, on the same server in alternating rounds, and the frontend's CPU per poll.

A page polls `GET /dashboard/data.json` and `GET /dashboard/history/<last>.json` once a
second (`static/dashboard.js`); `Page` below does the same from a thread, after the page's
first load (its static files and the whole history). The server's recorder reads its records
once a second whether or not a page is open: its cost is in both columns (compare commits
with `bench/ab.py` for it), and its mean tick is reported from `data.json`.

- Overhead: `wrk` (1 thread) posting the overhead workload's OIP JSON body (one row of the
  LogisticRegression's 20 features) at `--connections`, `--rounds` rounds of `--duration`
  seconds, without and with a page, the order alternating; medians and ranges, and the ratio
  with / without.
- CPU per poll: the idle server's frontend CPU time (/proc) over `--cpu-seconds` with no page,
  then with `--cpu-polls` polls a second; the difference over the polls made.
- Bytes: the page's own files, its first history, and one poll's answers.

    python bench/dashboard_cost.py [--rounds 4] [--duration 5] [--connections 32]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import models
import wrk
from ab import start
from harness import bodies
from peers.common import WORK

STATIC = Path(__file__).resolve().parent.parent / "src/headway/api/dashboard/static"
TICKS = os.sysconf("SC_CLK_TCK")


class Page:
    """What an open dashboard asks of the server: its files and whole history once, then each
    `period` seconds the tables and the history's new samples."""

    def __init__(self, url: str, period: float = 1.0) -> None:
        self.url, self.period = url, period
        self.polls = 0
        self.poll_bytes: list[int] = []
        self.first_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Page:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            for name in ("", "/dashboard.css", "/charts.js", "/pictures.js", "/dashboard.js"):
                self.first_bytes += len(client.get(f"/dashboard{name}").content)
            history = client.get("/dashboard/history/0.json")
            self.first_bytes += len(history.content)
            last = history.json()["last"]
            due = time.monotonic()
            while not self._stop.is_set():
                data = client.get("/dashboard/data.json")
                newer = client.get(f"/dashboard/history/{last}.json")
                last = newer.json()["last"]
                self.polls += 1
                self.poll_bytes.append(len(data.content) + len(newer.content))
                due += self.period
                self._stop.wait(max(0.0, due - time.monotonic()))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_per_poll(url: str, pid: int, seconds: float, rate: float) -> dict[str, float]:
    """The frontend's CPU seconds per poll: idle with no page, then with `rate` polls a second."""
    before = cpu_seconds(pid)
    time.sleep(seconds)
    idle = cpu_seconds(pid) - before
    with Page(url, period=1.0 / rate) as page:
        time.sleep(0.5)  # past its first load
        start, polls = cpu_seconds(pid), page.polls
        time.sleep(seconds)
        busy, made = cpu_seconds(pid) - start, page.polls - polls
    return {"idle_cpu_s": idle, "polled_cpu_s": busy, "polls": made,
            "cpu_ms_per_poll": 1e3 * max(0.0, busy - idle) / max(1, made)}  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    rps = [r["throughput_rps"] for r in runs]
    return {"rps": statistics.median(rps), "lo": min(rps), "hi": max(rps),
            "p50": statistics.median(r["latency_ms"]["p50"] for r in runs),
            "p99": statistics.median(r["latency_ms"]["p99"] for r in runs),
            "failed": sum(r["requests"] - r["ok"] for r in runs)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--cpu-seconds", type=float, default=10.0)
    parser.add_argument("--cpu-polls", type=float, default=20.0, help="polls a second")
    args = parser.parse_args()
    paths = models.ensure()
    x, _ = models.dataset()
    payload = bodies(x[100:101], "FP64", "probabilities")[0]
    work = WORK / "dashboard-cost"
    lua = wrk.script(payload, work / "wrk")
    load = [os.getloadavg()[0]]
    began = time.perf_counter()
    server, _ = start("dashboard", Path(__file__).resolve().parent.parent, paths, work)
    runs: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    try:
        url = server.ready_url.split("/v2/")[0]
        infer = f"{url}/v2/models/lr/infer"
        wrk.closed(infer, lua, args.connections, 1.0)  # warm
        for r in range(args.rounds):
            for mode in ("without", "with") if r % 2 == 0 else ("with", "without"):
                with Page(url) if mode == "with" else contextlib.nullcontext():
                    found = wrk.closed(infer, lua, args.connections, args.duration)
                runs[mode].append(found)
                print(f"round {r + 1} {mode} a page: {found['throughput_rps']:,.0f} req/s, p50 "
                      f"{found['latency_ms']['p50']:.3f} p99 {found['latency_ms']['p99']:.3f} ms",
                      flush=True)  # fmt: skip
        polling = cpu_per_poll(url, server.pid, args.cpu_seconds, args.cpu_polls)
        with Page(url) as page:
            time.sleep(2.5)
        tick = httpx.get(f"{url}/dashboard/data.json").json()["history"]["tick_ms"]
    finally:
        with contextlib.suppress(Exception):
            server.stop()
    load.append(os.getloadavg()[0])
    from machine import machine

    m = machine()
    files = {p.name: p.stat().st_size for p in sorted(STATIC.iterdir())}
    without, with_page = summary(runs["without"]), summary(runs["with"])
    result = {"machine": m, "load": load, "rounds": args.rounds, "duration_s": args.duration,
              "connections": args.connections, "without": without, "with": with_page,
              "ratio": with_page["rps"] / without["rps"], "polling": polling, "tick_ms": tick,
              "files": files, "first_load_bytes": page.first_bytes,
              "poll_bytes": statistics.median(page.poll_bytes)}  # fmt: skip
    (work / "dashboard-cost.json").write_text(json.dumps(result, indent=1))
    print()
    print(f"{m['date']}, nproc {m['nproc']}, {m['cpu']}; {args.rounds} alternating rounds of "
          f"{args.duration:g} s at {args.connections} connections; load average {load[0]:.1f} -> "
          f"{load[1]:.1f}; {time.perf_counter() - began:.0f} s")  # fmt: skip
    print()
    print("| one dashboard | req/s (range) | p50 ms | p99 ms | failed |")
    print("|---|---|---|---|---|")
    for name, s in (("without", without), ("with", with_page)):
        print(f"| {name} | {s['rps']:,.0f} ({s['lo']:,.0f}-{s['hi']:,.0f}) | {s['p50']:.3f} | "
              f"{s['p99']:.3f} | {s['failed']:.0f} |")  # fmt: skip
    print(f"\nwith / without: {result['ratio']:.3f}x")
    print(f"frontend CPU per poll (data.json + new history): {polling['cpu_ms_per_poll']:.2f} ms "
          f"({polling['polls']} polls in {args.cpu_seconds:g} s); the recorder's tick: "
          f"{tick:.2f} ms a second")  # fmt: skip
    print(f"page: files {sum(files.values()):,} bytes ({files}); first history "
          f"{page.first_bytes - sum(files.values()):,} bytes; a poll {result['poll_bytes']:,.0f} "
          "bytes")  # fmt: skip


if __name__ == "__main__":
    main()
