"""Issue 41's evidence: each paper's headline result on Headway, as JSON figures and PNG plots.

    python bench/evidence/run.py clipper [--parts ensemble,stragglers] [--quick]
    python bench/evidence/run.py cloudflow|inferline|clockwork [--quick]
    python bench/evidence/run.py all [--quick]

Writes `<out>/<paper>.json` (what docs/evidence.md quotes: per-seed or per-round figures,
medians and spreads, the machine, the date, the command) and `<out>/<paper>-*.png`. The default
`--out` is `docs/evidence/` for a full run and `bench/.work/evidence-quick/` with `--quick`
(a smoke check: fewer seeds, rounds and sizes, under a minute per paper). Scratch files
(models, servers' logs, raw latencies) go to `bench/.work/evidence/`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.evidence import clipper, clockwork, cloudflow, inferline, plots  # noqa: E402

PAPERS = ("clipper", "cloudflow", "inferline", "clockwork")
WORK = ROOT / "bench" / ".work" / "evidence"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(
            (ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), cpu
        )
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "commit": commit, "load_average_start": round(os.getloadavg()[0], 2)}  # fmt: skip


def note(meta: dict[str, Any]) -> str:
    m = meta["machine"]
    return (f"Headway {m['commit']} · {meta['date']} · {m['cpus']} CPUs ({m['cpu']}) · load average "
            f"{m['load_average_start']:.1f} → {m['load_average_end']:.1f} · {meta['command']}")  # fmt: skip


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def stripped(value: Any) -> Any:
    """The figures without per-answer lists (kept in the raw file only)."""
    if isinstance(value, dict):
        return {k: stripped(v) for k, v in value.items() if k != "latencies_ms"}
    if isinstance(value, list):
        return [stripped(v) for v in value]
    return value


def run_paper(paper: str, args: argparse.Namespace) -> Path:
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "machine": machine(),
        "date": _now(),
        "command": "python bench/evidence/run.py " + paper + (" --quick" if args.quick else "")
                   + (f" --parts {args.parts}" if paper == "clipper" and args.parts else ""),
        "quick": args.quick,
    }  # fmt: skip
    work = WORK / ("quick" if args.quick else "full") / paper
    work.mkdir(parents=True, exist_ok=True)
    log(f"{paper}: started, load average {meta['machine']['load_average_start']}")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{paper}.json"
    if paper == "clipper":
        parts = tuple(args.parts.split(",")) if args.parts else clipper.PARTS
        data, measured = {}, {}
        for part in parts:  # each part's own machine, date and load (parts can be rerun alone)
            own = {"machine": machine(), "date": _now(), "quick": args.quick,
                   "command": f"python bench/evidence/run.py clipper --parts {part}"
                   + (" --quick" if args.quick else "")}  # fmt: skip
            data.update(clipper.experiment(work, args.quick, (part,), log))
            own["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
            measured[part] = own
        if target.exists() and args.parts:  # keep the other parts' last figures
            old = json.loads(target.read_text())
            data = {**{k: v for k, v in old.items() if k != "meta"}, **data}
            measured = {**old.get("meta", {}).get("parts", {}), **measured}
        meta["parts"] = measured
    elif paper == "cloudflow":
        data = cloudflow.experiment(work, args.quick, log)
        data["summary"] = cloudflow.summary(data)
    elif paper == "inferline":
        data = inferline.experiment(work, args.quick, log)
        for key in ("assumed", "measured"):  # profile rows are dataclasses
            data[key] = json.loads(json.dumps(data[key], default=str))
    else:
        data = clockwork.experiment(work, args.quick, log)
        data["totals"] = clockwork.totals(data)
        data.pop("profiles")
    meta["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
    meta["seconds"] = round(time.perf_counter() - started, 1)
    (work / "raw.json").write_text(json.dumps({"meta": meta, **data}, default=str))
    data = stripped(data)
    target.write_text(json.dumps({"meta": meta, **data}, indent=1, default=str) + "\n")
    draw(paper, json.loads(target.read_text()), out)
    log(
        f"{paper}: done in {meta['seconds']:.0f} s, load average {meta['machine']['load_average_end']}"
    )
    return target


def draw(paper: str, data: dict[str, Any], out: Path) -> list[Path]:
    text = note(data["meta"])
    if paper == "clipper":
        makers = {"ensemble": plots.ensemble, "recovery": plots.recovery, "personal": plots.personal,
                  "stragglers": plots.stragglers, "batching": plots.batching}  # fmt: skip
        parts = data["meta"].get("parts", {})
        return [make(data[part], out / f"clipper-{part}.png",
                     note(parts[part]) if isinstance(parts.get(part), dict) else text)
                for part, make in makers.items() if part in data]  # fmt: skip
    if paper == "cloudflow":
        return [plots.cloudflow(data, data["summary"], out / "cloudflow.png", text)]
    if paper == "inferline":
        return [plots.inferline(data, out / "inferline.png", text)]
    return [plots.clockwork(data, out / "clockwork.png", text)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paper", choices=[*PAPERS, "all"])
    parser.add_argument(
        "--quick", action="store_true", help="a smoke check: under a minute per paper"
    )
    parser.add_argument(
        "--parts", default="", help=f"clipper only: some of {','.join(clipper.PARTS)}"
    )
    parser.add_argument("--out", type=Path, default=None, help="where the JSON and PNGs go")
    parser.add_argument(
        "--redraw", action="store_true", help="only draw the plots from <out>/<paper>.json"
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = WORK.parent / "evidence-quick" if args.quick else ROOT / "docs" / "evidence"
    for paper in PAPERS if args.paper == "all" else (args.paper,):
        if args.redraw:
            draw(paper, json.loads((args.out / f"{paper}.json").read_text()), args.out)
        else:
            run_paper(paper, args)


if __name__ == "__main__":
    main()
