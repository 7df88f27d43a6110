"""A closed loop of gRPC unary calls measured with ``h2load`` (Debian's ``nghttp2-client``).

h2load speaks HTTP/2 and posts one body over and over; a gRPC unary call is exactly that: a
POST to ``/<service>/<method>`` with ``content-type: application/grpc``, ``te: trailers`` and
the message as one length-prefixed frame (`frame`). It is written in C, like ``wrk`` for REST
(``bench/wrk.py``), so the two protocols are loaded by equally cheap clients.

h2load cannot see gRPC's status (it travels in trailers, and every call answers HTTP 200), so
the caller checks the server's own success count instead. Latency percentiles come from its
``--log-file`` (one line per request: start µs, HTTP status, duration µs).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from headway.loadgen.report import percentiles_ms

RATE = re.compile(r"finished in [\d.]+\w+, ([\d.]+) req/s")
COUNTS = re.compile(
    r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout"
)


def frame(message: bytes) -> bytes:
    """One gRPC message on the wire: not compressed, its length (big-endian), the bytes."""
    return struct.pack(">?I", False, len(message)) + message


def parse(report: str, log: str) -> dict[str, Any]:
    """Throughput, counts and latency percentiles (ms) from h2load's report and log file."""
    rate, counts = RATE.search(report), COUNTS.search(report)
    if rate is None or counts is None:
        raise ValueError(f"not an h2load report: {report[-500:]!r}")
    _, _, done, succeeded, failed, errored, timeout = (int(n) for n in counts.groups())
    durations = [int(line.split()[2]) / 1e6 for line in log.splitlines() if line.strip()]
    return {"throughput_rps": float(rate.group(1)), "latency_ms": percentiles_ms(durations),
            "requests": done, "ok": succeeded, "failed": failed + errored + timeout}  # fmt: skip


def closed(
    address: str,
    path: str,
    message: bytes,
    *,
    connections: int,
    streams: int = 1,
    duration: float,
    warmup: float = 1.0,
) -> dict[str, Any]:
    """`connections` times `streams` calls in flight on one h2load thread for `duration` seconds."""
    h2load = shutil.which("h2load")
    if h2load is None:
        raise SystemExit("h2load is not installed (Debian: apt-get install nghttp2-client)")
    with tempfile.TemporaryDirectory() as folder:
        body, log = Path(folder) / "body", Path(folder) / "log"
        body.write_bytes(frame(message))
        done = subprocess.run(
            [h2load, "-t1", f"-c{connections}", f"-m{streams}", f"-D{round(duration * 1000)}ms",
             f"--warm-up-time={round(warmup * 1000)}ms", "-d", str(body), "--log-file", str(log),
             "-H", "content-type: application/grpc", "-H", "te: trailers",
             f"http://{address}{path}"],
            capture_output=True, text=True, timeout=duration + warmup + 60, check=True,
        )  # fmt: skip
        figures = parse(done.stdout, log.read_text())
    return {**figures, "concurrency": connections * streams}
