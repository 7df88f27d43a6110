"""How long `headway plan` takes, run as a user runs it, on the cases issue 40 cites.

    python bench/planner/plan_seconds.py [--cases digits-600-20,...] [--out FILE]

Each case is one `python -m headway.cli.main plan` process on a 60 s trace that
`headway trace --app` writes (gamma arrivals, CV 1, seed 0), timed from its start to its exit:

- `digits-*`: a 2-stage pipeline (digits-fast, then the 200-tree forest) on two CPU kinds,
  with the profiles `wide-tail-profiles.yaml` holds: measured on this machine by the profiler
  before it warmed up first and shuffled the batch sizes, their batch-1 p99 2-20x their p50
  (the profiles issue 40 was filed with). 600 queries/s at a 20 ms SLO, 250 at 10 and 12 ms,
  and 600 at 3 ms (below the critical path: refused from a bound); each of the first three
  also at `--headroom 0` (the SLO itself, as the issue's runs planned).
- `video-*`: InferLine's 4-stage video monitoring pipeline (`planning_time.VIDEO`) on the
  bench's assumed profiles and catalogue (`profiles.yaml`, `catalogue.yaml`), at 50 queries/s
  (500 ms) and 300 (300 and 150 ms); and the 3-stage image cascade `tuning.py` plans (100
  queries/s, 300 ms).

Every case plans with `headway plan`'s defaults (spread durations, restarts, the 5,000-query
screen, 20% headroom unless the case says, the 10 s search budget; the `-unbounded` cases
without it, to show what the budget costs). Prints one JSON line per case: wall seconds, the plan's own "planned
in" figure, and its verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CPUS = {
    "cpu1": {"cost_per_hour": 0.05, "cpus": 1, "threads": 1},
    "cpu2": {"cost_per_hour": 0.10, "cpus": 2, "threads": 2},
}
DIGITS = [
    {"name": "pre", "model": "digits-fast"},
    {"name": "forest", "model": "digits-forest", "parents": ["pre"]},
]
VIDEO = [
    {"name": "preprocess", "model": "preprocess"},
    {"name": "yolo", "model": "yolo", "parents": ["preprocess"]},
    {"name": "resnet50", "model": "resnet50", "parents": ["yolo"], "scale": 0.6},
    {"name": "resnet152", "model": "resnet152", "parents": ["yolo"], "scale": 0.3},
]
CASCADE = [
    {"name": "preprocess", "model": "preprocess"},
    {"name": "resnet50", "model": "resnet50", "parents": ["preprocess"]},
    {"name": "resnet152", "model": "resnet152", "parents": ["resnet50"], "scale": 0.3},
]
#: name -> (pipeline, queries/s, SLO ms, headroom: None for the default); a name ending in
#: "-unbounded" is the case before it planned with no time budget (`--budget-s 0`)
CASES: dict[str, tuple[str, float, float, float | None]] = {
    "digits-600-20": ("digits", 600.0, 20.0, None),
    "digits-250-10": ("digits", 250.0, 10.0, None),
    "digits-250-12": ("digits", 250.0, 12.0, None),
    "digits-600-20-h0": ("digits", 600.0, 20.0, 0.0),
    "digits-250-10-h0": ("digits", 250.0, 10.0, 0.0),
    "digits-250-12-h0": ("digits", 250.0, 12.0, 0.0),
    "digits-600-3": ("digits", 600.0, 3.0, None),
    "video-50-500": ("video", 50.0, 500.0, None),
    "video-300-300": ("video", 300.0, 300.0, None),
    "video-300-150": ("video", 300.0, 150.0, None),
    "cascade-100-300": ("cascade", 100.0, 300.0, None),
}
CASES |= {
    f"{name}-unbounded": CASES[name]
    for name in ("video-50-500", "video-300-300", "video-300-150", "cascade-100-300")
}


def headway(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "headway.cli.main", *args]
    environment = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=environment)


def case(name: str, root: Path) -> dict[str, object]:
    pipeline, rate, slo_ms, headroom = CASES[name]
    trace = root / f"{pipeline}-{rate:g}.json"
    if not trace.exists():
        made = headway(
            "trace", "--app", pipeline, "--rate", f"{rate:g}", "--duration", "60",
            "--cv", "1", "--seed", "0", "--out", str(trace), cwd=root,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    if pipeline == "digits":
        config = {"hardware": CPUS, "pipelines": {"digits": {"stages": DIGITS}}}
        extra = ["--profiles", str(HERE / "wide-tail-profiles.yaml")]
    else:
        stages = VIDEO if pipeline == "video" else CASCADE
        config = {"pipelines": {pipeline: {"stages": stages}}}
        extra = [
            "--catalogue", str(HERE / "catalogue.yaml"),
            "--profiles", str(HERE / "profiles.yaml"),
        ]  # fmt: skip
    if headroom is not None:
        extra += ["--headroom", f"{headroom:g}"]
    if name.endswith("-unbounded"):
        extra += ["--budget-s", "0"]
    (root / "headway.yaml").write_text(yaml.safe_dump(config))
    began = time.perf_counter()
    done = headway(
        "plan", "--config", "headway.yaml", "--app", pipeline, "--slo-ms", f"{slo_ms:g}",
        "--trace", str(trace), "--state", str(root / f"{name}.db"),
        "-o", str(root / f"{name}.yaml"), *extra, cwd=root,
    )  # fmt: skip
    wall = time.perf_counter() - began
    said = " ".join((done.stdout + done.stderr).split())
    verdict = re.search(r"(simulated p99 .*?planned in [0-9.]+ s( \([^)]*\))?|Error: .*)", said)
    planned = re.search(r"planned in ([0-9.]+) s", said)
    p99 = re.search(r"simulated p99 ([0-9.]+) ms", said)
    cost = re.search(r"; \$([0-9.]+)/h;", said)
    return {
        "case": name,
        "pipeline": pipeline,
        "rate_qps": rate,
        "slo_ms": slo_ms,
        "queries": len(json.loads(trace.read_text())),
        "wall_s": round(wall, 1),
        "planned_in_s": float(planned.group(1)) if planned else None,
        "exit": done.returncode,
        "p99_ms": float(p99.group(1)) if p99 else None,
        "cost_per_hour": float(cost.group(1)) if cost else None,
        "headroom": headroom,
        "said": verdict.group(1)[:400] if verdict else said[-400:],
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", type=Path, default=Path("bench/.work/planner-plan-seconds.json"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="headway-plan-seconds-") as scratch:
        for name in args.cases.split(","):
            rows.append(case(name, Path(scratch)))
            print(json.dumps(rows[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
