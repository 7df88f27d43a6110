"""Trace replay against a real `headway serve` with a handful of tiny Python models.

Each stamp model `s0000<k>` logs, per row it runs, the row's first value (k + 1, sent in its
body) and the wall-clock time, so the server side shows which model each request reached and
when. Tolerances: a request reaches its model soon after its scheduled time: median under
`REACH_MEDIAN_MS`, 90th percentile under `REACH_P90_MS`, none later than `REACH_MAX_MS` (a
replayer that waited for answers before sending, or a server that serialised the models, would
be seconds late). The client sends within the event loop's 1 ms timer resolution, the rest is
the server's parse, queue and RPC to a worker, on 2 cores that a CI machine may stall for 100+ ms.
Counts are exact and checked against the server's own counters.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from headway.launcher import ServerProcess
from headway.loadgen.trace import TraceResult, command, reason_of, replay_trace
from headway.loadgen.workload import Request, Tensor
from headway.traces import TraceSpec, generate, write

pytestmark = pytest.mark.integration

STAMPS = 4
REACH_MEDIAN_MS = 15.0
REACH_P90_MS = 60.0
REACH_MAX_MS = 1000.0

MODELS = """
import time
from pathlib import Path

import numpy as np


class Stamp:
    def load(self, path):
        self.log = open(Path(path) / "stamps.log", "a", buffering=1)

    def predict(self, batch):
        now = time.time()
        self.log.write("".join(f"{now:.6f} {row[0]:g}\\n" for row in batch))
        return batch * 2


class Sleeper:
    def load(self, path):
        self.seconds = float((Path(path) / "seconds.txt").read_text())

    def predict(self, batch):
        time.sleep(self.seconds)
        return batch
"""


def stamp(k: int) -> str:
    return f"s{k:05d}"  # the names `headway.traces` gives with prefix "s"


def model(root: Path, name: str, entry: str, extra: str = "") -> Path:
    version = root / name / "1"
    version.mkdir(parents=True)
    (root / name / "model.yaml").write_text(
        f"framework: python\nentrypoint: models.py:{entry}\n"
        "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n" + extra
    )
    (version / "models.py").write_text(MODELS)
    return version


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> tuple[ServerProcess, Path]:
    root = tmp_path_factory.mktemp("trace-repo")
    for k in range(STAMPS):
        model(root, stamp(k), "Stamp")
    (model(root, "slow", "Sleeper") / "seconds.txt").write_text("0.15")
    (model(root, "narrow", "Sleeper", "max_queue: 1\n") / "seconds.txt").write_text("0.05")
    state = tmp_path_factory.mktemp("trace-state")
    with ServerProcess(root, state=state / "s.db", workers=2, log=state / "server.log") as srv:
        yield srv, root


def body(value: float) -> Request:
    return Request([Tensor("input-0", "FP32", np.full((1, 4), value, dtype=np.float32))])


def counters(url: str) -> tuple[Counter[str], Counter[str]]:
    """The server's requests per model and failed requests per reason."""
    text = httpx.get(f"{url}/metrics").text
    requests: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for name, value in re.findall(r'^headway_requests_total\{model="([^"]+)"\} (\S+)$', text, re.M):
        requests[name] += int(float(value))
    for reason, value in re.findall(
        r'^headway_errors_total\{model="[^"]+",reason="([^"]+)"\} (\S+)$', text, re.M
    ):
        reasons[reason] += int(float(value))
    return requests, reasons


def stamp_rows(seed: int, each: int) -> list[tuple[float, str, float]]:
    rng = np.random.default_rng(seed)
    return [
        (float(t), stamp(k), 1000.0) for k in range(STAMPS) for t in rng.uniform(0.05, 2.5, each)
    ]


def count(rows: list[tuple[float, str, float]], model: str) -> int:
    return sum(1 for row in rows if row[1] == model)


def replay_and_count(
    url: str, rows: list[tuple[float, str, float]], bodies: dict[str, Request]
) -> tuple[TraceResult, dict[str, Any], Counter[str]]:
    """Replay `rows`; check that every request is counted once and as the server counted it.
    Returns the result, its summary and the server's failures by reason during the replay."""
    before, failed_before = counters(url)
    result = replay_trace(url, rows, bodies, max_connections=64, duration=2.5)
    after, failed_after = counters(url)
    figures = result.summary()
    assert figures["requests"] == len(result) == len(rows)
    assert figures["ok"] + figures["rejected"] + sum(figures["errors"].values()) == len(rows)
    assert figures["transport_errors"] == figures["timeouts"] == 0
    assert figures["on_time"] + figures["late"] == figures["ok"]
    assert figures["slo_attainment"] == pytest.approx(figures["on_time"] / len(rows), abs=1e-6)
    served = Counter(model for _, model, _ in rows if model != "ghost")
    assert {m: after[m] - before[m] for m in served} == dict(served)
    ok = Counter(m for m, s in zip(result.models, result.status.tolist(), strict=True) if s == 200)
    assert all(ok[stamp(k)] == count(rows, stamp(k)) for k in range(STAMPS))
    return result, figures, failed_after - failed_before


def test_requests_reach_their_models_on_schedule(server: tuple[ServerProcess, Path]) -> None:
    srv, root = server
    rows = stamp_rows(7, 60)
    bodies = {stamp(k): body(k + 1) for k in range(STAMPS)}
    logs = [root / stamp(k) / "1" / "stamps.log" for k in range(STAMPS)]
    seen = [log.stat().st_size for log in logs]
    woken: list[float] = []
    bare = threading.Thread(target=wake_on_schedule, args=([t for t, _, _ in rows], woken))
    bare.start()
    result, figures, failed = replay_and_count(srv.url, rows, bodies)
    bare.join()
    assert figures["ok"] == figures["on_time"] == len(rows) and not failed
    # The replay's own share of its lateness: beyond what the machine gives a bare thread that
    # wakes on the same schedule at the same time (a busy machine stalls both alike).
    machine_p99 = float(np.percentile(woken, 99))
    assert figures["send_lateness_ms"]["p99"] < machine_p99 + 10.0, machine_p99
    # Each stamp model ran exactly its own 60 rows, each soon after its scheduled time.
    reach: list[float] = []
    for k in range(STAMPS):
        lines = logs[k].read_bytes()[seen[k] :].decode().split()
        stamps = np.asarray(lines[0::2], dtype=float)
        values = np.asarray(lines[1::2], dtype=float)
        real = values != 0  # warm-up runs are zeros
        assert set(values[real].tolist()) <= {float(k + 1)}
        assert int(real.sum()) == 60
        mine = np.asarray(result.models) == stamp(k)
        due = np.sort(result.started_at + result.scheduled[mine])
        got = np.sort(stamps[real]) - due
        assert got.min() > -0.002, "a request ran before it was due"
        reach += (got * 1e3).tolist()
    assert float(np.median(reach)) < REACH_MEDIAN_MS, float(np.median(reach))
    assert float(np.percentile(reach, 90)) < REACH_P90_MS, sorted(reach)[-30:]
    assert max(reach) < REACH_MAX_MS, sorted(reach)[-5:]


def wake_on_schedule(offsets: list[float], lateness_ms: list[float]) -> None:
    """Sleep until each offset (seconds from now) and record how late the thread woke, in ms."""
    start = time.monotonic()
    for offset in sorted(offsets):
        time.sleep(max(0.0, start + offset - time.monotonic()))
        lateness_ms.append((time.monotonic() - start - offset) * 1e3)


def test_rejections_and_errors_are_counted_by_reason(server: tuple[ServerProcess, Path]) -> None:
    srv, _ = server
    rows = stamp_rows(8, 10)
    rows += [(0.6 + 0.2 * i, "slow", 100.0) for i in range(8)]  # 150 ms > 100 ms: rejected
    rows += [(1.0, "narrow", 5000.0)] * 6 + [(2.0, "narrow", 5000.0)] * 6  # bursts: queue of 1
    rows += [(0.3, "ghost", 1000.0), (1.3, "ghost", 1000.0)]  # not in the repository: 404
    bodies = {stamp(k): body(k + 1) for k in range(STAMPS)}
    bodies |= {name: body(9) for name in ("slow", "narrow", "ghost")}
    result, figures, failed = replay_and_count(srv.url, rows, bodies)
    assert figures["errors"] == {"404": 2}
    by_reason = figures["rejected_by_reason"]
    assert by_reason == {r: failed[r] for r in by_reason}
    assert by_reason.get("deadline", 0) >= 7 and by_reason.get("overloaded", 0) >= 2
    assert figures["rejected"] == sum(by_reason.values())
    reasons = result.reasons()
    assert all(reasons[i] == "deadline" for i, m in enumerate(result.models)
               if m == "slow" and result.status[i] == 503)  # fmt: skip


def test_the_command_replays_a_generated_trace_file(
    server: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    srv, _ = server
    spec = TraceSpec(models=STAMPS, duration=1.0, rate=100.0, interval=0.5, prefix="s", seed=3)
    trace = generate(spec)
    path = tmp_path / "trace.csv"
    write(trace, path)  # bodies come from each model's metadata, fetched before the run
    result = CliRunner().invoke(command, ["--url", srv.url, "--trace", str(path), "--json"])
    assert result.exit_code == 0, result.output
    figures = orjson.loads(result.stdout)
    assert figures["requests"] == len(trace)
    assert figures["ok"] == len(trace)
    assert figures["spec"]["seed"] == 3
    assert figures["offered_rps"] == pytest.approx(len(trace) / 1.0)


def test_reasons_follow_the_servers_error_texts() -> None:
    assert reason_of(429, "model 'm@1': queue is full (1 requests)") == "overloaded"
    assert reason_of(503, "model 'm@1': deadline cannot be met: ...") == "deadline"
    text = "model 'm@1': rejected before running: the model could not be loaded in time"
    assert reason_of(503, text) == "cold_start"
    assert reason_of(503, "model 'm@1': deadline cannot be met: the model is not loaded and "
                          "loading it takes ~40 ms; 12.0 ms left") == "cold_start"  # fmt: skip
    assert reason_of(503, "model 'm' is loading") == "not_ready"
