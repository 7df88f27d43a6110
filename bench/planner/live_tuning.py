"""The tuner in a live server: `headway serve --plan --tune` under a 3x spike from the load generator.

    python bench/planner/live_tuning.py [--rate 20] [--slo-ms 300] [--seconds 60]
                                        [--out bench/.work/planner-live-tuning.json]

Everything runs as a user would run it, through the CLI, on real worker processes:

1. a random forest (200 trees) on scikit-learn's digits is written to a model repository;
2. `headway profile` measures it (cpu1, batch 1-8) into a fresh store;
3. `headway trace --app` makes a planning trace (`--rate` queries/s, CV 1, 60 s) and
   `headway plan` plans the one-stage pipeline for `--slo-ms`;
4. `headway serve --plan plan.yaml --tune --tune-max-replicas 4` serves it on a free port (log
   level info; the cap keeps the worker processes within reach of a small machine);
5. `headway trace --app` makes the test trace: `--seconds` at `--rate`, three times the rate
   for a third of it from a third in, and `headway bench --trace` replays it open loop;
6. meanwhile `/metrics` is read every 0.5 s (the tuner's replicas and changes, the live worker
   processes); afterwards the server's log lines about replica changes are kept.

Steps 4-6 run twice in one sitting: the plan served as is (`--no-tune`), then with `--tune`.
The JSON written holds the plan and, per run, the bench's figures, the replicas over time and
the log lines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import joblib
import numpy as np
import yaml
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier

from headway.launcher import ServerProcess

MODEL = "digits-forest"
CONFIG = f"""
hardware:
  cpu1: {{cost_per_hour: 0.05, cpus: 1, threads: 1}}
pipelines:
  forest:
    stages:
      - {{name: forest, model: {MODEL}}}
"""
GAUGES = re.compile(
    r"^(headway_tuner_replicas|headway_tuner_changes_total|headway_workers)(\{[^}]*\})? (\S+)$"
)


def headway(*args: str, **options: object) -> subprocess.CompletedProcess[str]:
    """Run the `headway` CLI of this interpreter; fail loudly with its output."""
    done = subprocess.run(
        [sys.executable, "-m", "headway.cli.main", *args],
        capture_output=True,
        text=True,
        check=False,
        **options,  # type: ignore[call-overload]
    )
    if done.returncode != 0:
        raise SystemExit(f"headway {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def build(root: Path) -> Path:
    """The model repository; returns a request body (a digit) for the load generator."""
    x, y = load_digits(return_X_y=True)
    model = RandomForestClassifier(n_estimators=200, random_state=0).fit(x[:1000], y[:1000])
    folder = root / "repo" / MODEL / "1"
    folder.mkdir(parents=True)
    (root / "repo" / MODEL / "model.yaml").write_text(
        yaml.safe_dump(
            {
                "framework": "sklearn",
                "max_batch_size": 8,
                "inputs": [{"name": "input-0", "datatype": "FP64", "shape": [-1, 64]}],
            }
        )
    )
    joblib.dump(model, folder / "model.joblib")
    body = root / "request.json"
    row = x[1000].astype(np.float64).tolist()
    tensor = {"name": "input-0", "datatype": "FP64", "shape": [1, 64], "data": row}
    body.write_text(json.dumps({"inputs": [tensor]}))
    return body


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as answer:
        text = answer.read().decode()
    figures: dict[str, float] = {}
    for line in text.splitlines():
        found = GAUGES.match(line)
        if found:
            figures[found.group(1) + (found.group(2) or "")] = float(found.group(3))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="planned queries/s")
    parser.add_argument("--slo-ms", type=float, default=300.0)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the test trace")
    parser.add_argument(
        "--max-replicas", type=int, default=4, help="the tuner's cap (--tune-max-replicas)"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/.work/planner-live-tuning.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="headway-live-tuning-"))
    body = build(root)
    config = root / "headway.yaml"
    config.write_text(CONFIG)
    state = root / "state.db"
    repo = str(root / "repo")
    profiled = headway(
        "profile", "--repository", repo, "--config", str(config), "--batch-sizes", "1,2,4,8",
        "--iterations", "20", "--state", str(state),
    )  # fmt: skip
    headway(
        "trace", "--app", MODEL, "--rate", str(args.rate), "--duration", "60", "--cv", "1",
        "--seed", "1", "-o", str(root / "planning.json"),
    )  # fmt: skip
    headway(
        "plan", "--config", str(config), "--app", "forest", "--slo-ms", str(args.slo_ms),
        "--trace", str(root / "planning.json"), "--state", str(state), "-o",
        str(root / "plan.yaml"),
    )  # fmt: skip
    plan = yaml.safe_load((root / "plan.yaml").read_text())
    third = args.seconds / 3
    headway(
        "trace", "--app", MODEL, "--rate", str(args.rate), "--duration", str(args.seconds),
        "--cv", "1", "--spike-at", str(third), "--spike-factor", "3", "--spike-seconds",
        str(third), "--slo-ms", str(args.slo_ms), "--seed", "2", "-o", str(root / "spike.csv"),
    )  # fmt: skip
    runs = {}
    for name, tune in (("static plan", False), ("tuner", True)):
        runs[name] = serve_and_replay(root, repo, body, tune, args.max_replicas)
        print(name, json.dumps(summary(runs[name]["bench"])), flush=True)  # type: ignore[arg-type]
    report = {
        "rate_qps": args.rate,
        "slo_ms": args.slo_ms,
        "seconds": args.seconds,
        "spike": {"from_s": third, "to_s": 2 * third, "factor": 3},
        "max_replicas": args.max_replicas,
        "profile": profiled.stdout.strip().splitlines(),
        "plan": plan,
        "runs": runs,
        "load_average": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print("\n".join(report["profile"]))  # type: ignore[arg-type]
    print(json.dumps({k: plan[k] for k in plan if k != "envelope"}))
    print("\n".join(runs["tuner"]["tuner_log"]))  # type: ignore[arg-type]
    for t, replicas, workers in replica_steps(runs["tuner"]["timeline"]):  # type: ignore[arg-type]
        print(f"{t:6.2f} s: {replicas} replicas asked for, {workers} worker processes")


def summary(bench: dict[str, object]) -> dict[str, object]:
    figures = {k: v for k, v in bench.items() if not isinstance(v, (dict, list))}
    figures["latency_ms"] = bench.get("latency_ms")
    return figures


def replica_steps(timeline: list[dict[str, float]]) -> list[tuple[float, float, float]]:
    """(t, replicas asked for, worker processes) at each sample where either changed."""
    steps: list[tuple[float, float, float]] = []
    for row in timeline:
        asked = next((v for k, v in row.items() if k.startswith("headway_tuner_replicas")), 0.0)
        now = (row["t"], asked, row.get("headway_workers", 0.0))
        if not steps or now[1:] != steps[-1][1:]:
            steps.append(now)
    return steps


def serve_and_replay(
    root: Path, repo: str, body: Path, tune: bool, max_replicas: int
) -> dict[str, object]:
    """Serve the plan (with or without the tuner), replay the spike trace, read /metrics."""
    log_path = root / f"server-{'tuned' if tune else 'static'}.log"
    extra = ["--plan", str(root / "plan.yaml"), "--log-level", "info"]
    if tune:
        extra += ["--tune", "--tune-max-replicas", str(max_replicas)]
    timeline: list[dict[str, object]] = []
    stop = threading.Event()
    server = ServerProcess(
        Path(repo), state=root / f"serve-{tune}.db", grpc_port=0, extra=extra, log=log_path
    )
    with server:
        url = server.url
        started = time.monotonic()

        def poll() -> None:
            while not stop.is_set():
                try:
                    figures: dict[str, object] = dict(scrape(url))
                except OSError as exc:
                    figures = {"error": str(exc)}
                timeline.append({"t": round(time.monotonic() - started, 2), **figures})
                stop.wait(0.5)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()  # t = 0: the load generator is launched (its trace starts ~1 s later)
        try:
            bench = headway(
                "bench", "--url", url, "--trace", str(root / "spike.csv"), "--input-data",
                str(body), "--timeout", "30", "--json",
            )  # fmt: skip
            time.sleep(1.0)
        finally:
            stop.set()
            poller.join()
    changes = [line for line in log_path.read_text().splitlines() if "replicas (" in line]
    return {"bench": json.loads(bench.stdout), "tuner_log": changes, "timeline": timeline}


if __name__ == "__main__":
    main()
