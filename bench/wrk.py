"""A closed loop measured with ``wrk`` (the Debian package): a client no one here wrote.

``wrk -t1 -cN -dS --latency`` posts one OIP JSON body (a Lua script sets method, body and
content type) and its latency distribution (50/75/90/99%) and Requests/sec are parsed from its
report. One thread, as the issue measures: the client then takes one core at most, like
``headway bench``'s one process.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}
LATENCY = re.compile(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s|m)\s*$", re.M)
RATE = re.compile(r"^Requests/sec:\s+([\d.]+)", re.M)
TOTAL = re.compile(r"^\s+(\d+) requests in", re.M)
NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")


def script(payload: bytes, folder: Path) -> Path:
    """The Lua script that makes wrk post `payload` as JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "post.lua"
    body = payload.decode()
    path.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = [==[{body}]==]\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    return path


def parse(report: str) -> dict[str, Any]:
    """Throughput and latency percentiles (ms) from wrk's `--latency` report."""
    latency = {f"p{p}": float(v) * UNITS[u] for p, v, u in LATENCY.findall(report)}
    rate, total = RATE.search(report), TOTAL.search(report)
    if rate is None or total is None or "p50" not in latency or "p99" not in latency:
        raise ValueError(f"not a wrk --latency report: {report[-500:]!r}")
    errors = NON_2XX.search(report)
    sockets = SOCKET_ERRORS.search(report)
    failed = (int(errors.group(1)) if errors else 0) + (
        sum(int(n) for n in sockets.groups()) if sockets else 0
    )
    return {"throughput_rps": float(rate.group(1)), "latency_ms": latency,
            "requests": int(total.group(1)), "ok": int(total.group(1)) - failed}  # fmt: skip


def closed(url: str, lua: Path, concurrency: int, duration: float) -> dict[str, Any]:
    """`concurrency` connections on one wrk thread for `duration` seconds."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    done = subprocess.run(
        [wrk, "-t1", f"-c{concurrency}", f"-d{max(1, round(duration))}s", "--latency",
         "--timeout", "10s", "-s", str(lua), url],
        capture_output=True, text=True, timeout=duration + 60, check=True,
    )  # fmt: skip
    return {**parse(done.stdout), "concurrency": concurrency}
