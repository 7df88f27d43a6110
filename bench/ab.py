"""Headway at two commits side by side: the overhead workload over REST and gRPC, interleaved.

For a change on the request path (a protocol bound, a new check), the question is whether it
costs anything measurable. This starts the same server from two source trees at once (the
commit before, checked out into ``bench/.work/ab/<rev>``, and this tree), and measures them in
alternating rounds so a change in the machine's speed lands on both alike:

- REST, ``wrk`` (1 thread) posting the overhead workload's OIP JSON body (one row of the
  LogisticRegression's 20 features, ``predict_proba``) at 32 connections and at 1;
- gRPC, ``h2load`` (1 thread) posting the same row as a ModelInfer message on one connection of
  32 streams, and on one connection of one stream.

Each figure is the median over rounds, with the range; the ratio is after / before.

    python bench/ab.py --before 597c791 [--after .] [--rounds 5] [--duration 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import h2load
import models
import numpy as np
import wrk
from harness import bodies
from peers.common import WORK, Server
from systems import THREADS, headway_repository

from headway.api.grpc import messages
from headway.launcher import free_port

REPOSITORY = Path(__file__).resolve().parent.parent
MODES = (("rest", 32), ("rest", 1), ("grpc", 32), ("grpc", 1))


def tree(rev: str) -> Path:
    """A source tree of `rev`: this checkout for '.', else a worktree under bench/.work/ab."""
    if rev == ".":
        return REPOSITORY
    folder = WORK / "ab" / rev
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(REPOSITORY), "worktree", "add", "--detach",
                        str(folder), rev], check=True, capture_output=True)  # fmt: skip
    return folder


def infer_message(row: np.ndarray) -> bytes:
    """ModelInfer for the LR model, the row in raw_input_contents, as tritonclient sends it."""
    request = messages.ModelInferRequest(model_name="lr")
    request.inputs.add(name="input-0", datatype="FP64", shape=[1, row.size])
    request.outputs.add(name="probabilities")
    request.raw_input_contents.append(np.ascontiguousarray(row, np.float64).tobytes())
    return request.SerializeToString()


def check_grpc(grpc_port: int, message: bytes) -> None:
    """One ModelInfer through grpcio: h2load cannot see a call's status, so make sure the
    message is answered OK before timing it."""
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        call = channel.unary_unary(f"/{messages.SERVICE}/ModelInfer")
        answer = messages.ModelInferResponse.FromString(call(message, timeout=10))
    if not answer.raw_output_contents and not answer.outputs:
        raise SystemExit(f"ModelInfer answered no outputs: {answer}")


def start(label: str, source: Path, paths: models.ModelPaths, work: Path) -> tuple[Server, int]:
    port, grpc_port = free_port(), free_port()
    repo = headway_repository("lr", paths, work / label)
    state = work / f"{label}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state}{suffix}").unlink(missing_ok=True)
    server = Server(
        name=label,
        argv=[sys.executable, "-m", "headway.cli.main", "serve", "--repository", str(repo),
              "--port", str(port), "--grpc-port", str(grpc_port), "--workers", "1",
              "--state", str(state)],
        ready_url=f"http://127.0.0.1:{port}/v2/models/lr/ready",
        log=work / "logs" / f"{label}.log",
        env={**THREADS, "PYTHONPATH": str(source / "src")},
    )  # fmt: skip
    server.start()
    return server, grpc_port


def measure(mode: str, c: int, port: int, grpc_port: int, lua: Path, message: bytes,
            duration: float) -> dict[str, Any]:  # fmt: skip
    if mode == "rest":
        url = f"http://127.0.0.1:{port}/v2/models/lr/infer"
        return wrk.closed(url, lua, c, duration)
    path = f"/{messages.SERVICE}/ModelInfer"
    return h2load.closed(f"127.0.0.1:{grpc_port}", path, message, connections=1, streams=c,
                         duration=duration)  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    rps = [r["throughput_rps"] for r in runs]
    p50 = [r["latency_ms"]["p50"] for r in runs]
    p99 = [r["latency_ms"]["p99"] for r in runs]
    return {"rps": statistics.median(rps), "rps_lo": min(rps), "rps_hi": max(rps),
            "p50": statistics.median(p50), "p99": statistics.median(p99),
            "failed": sum(r["requests"] - r["ok"] for r in runs)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="the commit to compare against")
    parser.add_argument("--after", default=".", help="a commit, or '.' for this tree (default)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args()
    paths = models.ensure()
    x, _ = models.dataset()
    row = x[100]
    payload = bodies(x[100:101], "FP64", "probabilities")[0]
    work = WORK / "ab-run"
    lua = wrk.script(payload, work / "wrk")
    message = infer_message(row)
    labels = {"before": args.before, "after": args.after}
    servers: dict[str, tuple[Server, int]] = {}
    runs: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    load = [os.getloadavg()[0]]
    began = time.perf_counter()
    try:
        for label, rev in labels.items():
            servers[label] = start(label, tree(rev), paths, work)
            check_grpc(servers[label][1], message)
        for r in range(args.rounds):
            order = list(labels) if r % 2 == 0 else list(reversed(labels))
            for mode, c in MODES:
                for label in order:
                    server, grpc_port = servers[label]
                    port = int(server.ready_url.split(":")[2].split("/")[0])
                    f = measure(mode, c, port, grpc_port, lua, message, args.duration)
                    runs.setdefault((label, mode, c), []).append(f)
                    print(f"round {r + 1} {mode} c={c} {label}: {f['throughput_rps']:,.0f} "
                          f"req/s p50 {f['latency_ms']['p50']:.3f} p99 "
                          f"{f['latency_ms']['p99']:.3f} ms", flush=True)  # fmt: skip
    finally:
        for server, _ in servers.values():
            with contextlib.suppress(Exception):
                server.stop()
    load.append(os.getloadavg()[0])
    from machine import machine

    m = machine()
    print()
    print(f"{m['date']}, nproc {m['nproc']}, {m['cpu']}; before {args.before}, after "
          f"{args.after}; {args.rounds} alternating rounds of {args.duration:g} s; load average "
          f"{load[0]:.1f} -> {load[1]:.1f}; {time.perf_counter() - began:.0f} s")  # fmt: skip
    print()
    print("| protocol | in flight | before req/s (range) | after req/s (range) | after / before "
          "| p50 ms before / after | p99 ms before / after | failed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for mode, c in MODES:
        b, a = summary(runs[("before", mode, c)]), summary(runs[("after", mode, c)])
        print(f"| {mode} | {c} | {b['rps']:,.0f} ({b['rps_lo']:,.0f}-{b['rps_hi']:,.0f}) | "
              f"{a['rps']:,.0f} ({a['rps_lo']:,.0f}-{a['rps_hi']:,.0f}) | "
              f"{a['rps'] / b['rps']:.2f}x | {b['p50']:.3f} / {a['p50']:.3f} | "
              f"{b['p99']:.3f} / {a['p99']:.3f} | {b['failed']:.0f} / {a['failed']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
