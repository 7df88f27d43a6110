"""Where the Headway frontend's time goes under load: py-spy on the ``headway serve`` PID.

``record`` samples the frontend process (not its worker) with ``py-spy record --nonblocking
--format raw`` while this process drives the overhead load (32 connections; 1 as well);
``summarize`` turns the collapsed stacks into the top functions by own ("self") and inclusive
time and the share of each part of the stack (uvicorn, Headway's api/control/runtime, the event
loop), as shares of the samples in which the frontend was running (py-spy drops idle samples),
plus how busy it was.

    python bench/pyspy.py --seconds 10    # starts Headway on the LR model itself
    python bench/pyspy.py --offered 12000 # open loop (Poisson) at that rate instead
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from harness import Endpoint, bodies, closed, open_loop
from peers.common import Server, SetupError

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _short(frame: str) -> str:
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "/src/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match['func']} ({path})"


#: Where a frame's code lives -> the part of the stack it stands for (first match wins).
PARTS = (
    ("headway/api/", "headway.api: HTTP routing, OIP decode/encode"),
    ("headway/control/", "headway.control: controller, scheduler, profiles"),
    ("headway/runtime/", "headway.runtime: engine, wire (sockets to the worker)"),
    ("headway/", "headway: other"),
    ("uvicorn/", "uvicorn: HTTP protocol, ASGI glue"),
    ("zmq/", "pyzmq"),
    ("asyncio/", "event loop (uvloop, socket I/O in C, asyncio)"),
    ("numpy/", "numpy"),
)


def part(frame: str) -> str:
    return next((name for marker, name in PARTS if marker in frame), "other (stdlib, click, ...)")


def summarize(raw: str, seconds: float, rate: int, top: int = 25) -> dict[str, Any]:
    """Top functions by self and inclusive share of the samples in which the process ran."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        calls = [_short(f) for f in stack.split(";") if f.strip()]
        if not calls:
            continue
        total += count
        own[calls[-1]] += count
        parts[part(calls[-1])] += count
        for name in set(calls):
            inclusive[name] += count
    if not total:
        return {"samples": 0, "busy": 0.0, "self": [], "inclusive": [], "parts": []}

    def share(counter: Counter[str], count: int = top) -> list[tuple[str, float]]:
        return [(name, round(100.0 * n / total, 1)) for name, n in counter.most_common(count)]

    return {
        "samples": total,
        "busy": round(total / (seconds * rate), 2),  # of one core
        "self": share(own),
        "inclusive": share(inclusive, 2 * top),
        "parts": share(parts),
    }


def record(
    pyspy: Path,
    server: Server,
    endpoint: Endpoint,
    payloads: list[bytes],
    out: Path,
    seconds: float = 10.0,
    rate: int = 200,
    concurrency: int = 32,
    offered: float | None = None,
) -> dict[str, Any]:
    """py-spy the server's leader (the frontend) for ``seconds`` under a closed-loop load of
    ``concurrency`` connections, or, with ``offered``, Poisson arrivals at that rate."""
    seconds = max(1, int(seconds))
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen(
        [str(pyspy), "record", "--pid", str(server.pid), "--duration", str(int(seconds)),
         "--rate", str(rate), "--format", "raw", "--nonblocking", "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        if offered is None:
            load = closed(endpoint, payloads, concurrency, duration=seconds + 1.0, warmup=0.5,
                          server=server)  # fmt: skip
        else:
            load = open_loop(endpoint, payloads, offered, duration=seconds + 1.0, warmup=0.5,
                             slo_ms=50.0, server=server)  # fmt: skip
        log, _ = spy.communicate(timeout=seconds + 30.0)
    finally:
        if spy.poll() is None:
            spy.kill()
            spy.wait()
    if spy.returncode != 0 or not out.exists():
        text = log.decode(errors="replace").strip().splitlines()
        raise SetupError(f"py-spy failed ({spy.returncode}): {' | '.join(text[-4:])}")
    summary = summarize(out.read_text(), seconds, rate)
    summary.update({
        "concurrency": None if offered else concurrency, "offered_rps": offered,
        "load_rps": load["throughput_rps"], "load_response_rps": load["response_rps"],
        "load_p50_ms": load["latency_ms"]["p50"], "load_server_cores": load["server_cores"],
        "load_frontend_cores": load["server_leader_cores"],
        "load_worker_cores": load["server_children_cores"], "load_other_cores": load["other_cores"],
        # from /proc (exact), per answer of any status: the frontend's CPU cost of a request
        "cpu_us_per_request": round(1e6 * load["server_leader_cores"] / load["response_rps"], 1)
        if load["response_rps"] else None,
        "seconds": seconds, "rate": rate, "file": str(out),
    })  # fmt: skip
    return summary


def main() -> None:
    import models
    from peers.common import WORK, ensure_venv
    from systems import BY_NAME

    from headway.launcher import free_port

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--offered", type=float, default=None, help="Poisson arrivals at this rate instead"
    )
    args = parser.parse_args()
    paths = models.ensure()
    pyspy = ensure_venv("tools", WORK / "logs" / "venv-tools.log").with_name("py-spy")
    port = free_port()
    server = BY_NAME["headway"].server("lr", paths, port, WORK / "pyspy")
    rows = models.dataset()[0][100:116]
    payloads = bodies(rows, "FP64", "probabilities")
    server.start()
    try:
        endpoint = Endpoint(f"http://127.0.0.1:{port}", "lr")
        if args.offered is not None:
            summaries = [
                record(pyspy, server, endpoint, payloads,
                       WORK / "pyspy" / f"profile-headway-open-{int(args.offered)}.txt",
                       args.seconds, offered=args.offered)
            ]  # fmt: skip
        else:
            summaries = [
                record(pyspy, server, endpoint, payloads,
                       WORK / "pyspy" / f"profile-headway-c{c}.txt", args.seconds, concurrency=c)
                for c in (32, 1)
            ]  # fmt: skip
    finally:
        server.stop()
    for summary in summaries:
        print(f"== {summary['concurrency']} connection(s): {summary['load_rps']} req/s; frontend "
              f"{summary['load_frontend_cores']} cores = {summary['cpu_us_per_request']} us per "
              f"answer; worker {summary['load_worker_cores']} cores")  # fmt: skip
        for title in ("parts", "self", "inclusive"):
            print(f"-- {title}")
            for name, pct in summary[title][:15]:
                print(f"{pct:6.1f}%  {name}")


if __name__ == "__main__":
    main()
