"""The tuner against a utilisation autoscaler, in simulation, across burst shapes.

    python bench/planner/tuning.py [--slo-ms 300] [--rate 100] [--startup 2] [--jobs 2]
        [--shapes spike-3x-30s,...] [--out docs/evidence/tuner-autoscaler.png]

The image cascade of compare.py (preprocess on cpu1, two ResNets on GPU-like kinds: assumed
profiles) is planned for `--rate` queries/s (CV 1, 60 s, seed 1; the planner's default
headroom). Each shape (`SHAPES`) is a 180 s test trace at that rate with a burst (seed 2): a
spike of 2, 3 or 5 times the rate for 10 or 30 s, a rise to 3 times the rate and back over
30 or 120 s (InferLine's tuner was shown on rising and falling rates), the gaps' CV from 1 to
4 for 60 s at the same rate, or nothing (steady). Each is replayed through the server's own
controller three ways (`headway.planning.simulate`, `scaling=`): the plan as planned (static),
with InferLine's tuner, and with a reactive autoscaler targeting 70% busy time over 10 s
windows. Both scalers decide every 0.5 s, apply their decisions with `Controller.scale`
(new replicas serve `--startup` s after they are asked for, and are paid from then),
and scale down after a 15 s hold-down.

Figures per shape and policy: SLO attainment (share of queries within the SLO) overall and
during the burst, P99, average $/h, replica changes. Two PNGs: attainment and cost per
shape (`--out`), and one shape over time (`--out` with `-timeline`).
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from compare import CASCADE, load

from headway.planning import Planner, simulate
from headway.planning.envelope import envelope, window_lengths
from headway.planning.plan_file import PlanFile, parse_plan, plan_document
from headway.planning.scaling import TunerScaling, UtilisationScaling
from headway.planning.workloads import ArrivalSpec, arrival_times

BIN = 5.0
SECONDS = 180.0
POLICIES = ("static plan", "InferLine tuner", "utilisation autoscaler")


@dataclass(frozen=True)
class Segment:
    """`seconds` of arrivals whose rate goes from `start` to `end` times the planned rate
    (linearly), with gaps of coefficient of variation `cv`."""

    seconds: float
    start: float
    end: float
    cv: float = 1.0


def spike(factor: float, seconds: float) -> tuple[Segment, ...]:
    return (Segment(60, 1, 1), Segment(seconds, factor, factor), Segment(120 - seconds, 1, 1))


def rise_and_fall(seconds: float) -> tuple[Segment, ...]:
    half = seconds / 2
    rest = (SECONDS - 60 - seconds) / 2
    return (
        Segment(60, 1, 1),
        Segment(half, 1, 3),
        Segment(half, 3, 1),
        Segment(rest * 2, 1, 1),
    )


#: name -> the shape's segments (180 s each) and its burst (from, to seconds)
SHAPES: dict[str, tuple[tuple[Segment, ...], tuple[float, float]]] = {
    "steady": ((Segment(SECONDS, 1, 1),), (60, 90)),
    "spike-2x-10s": (spike(2, 10), (60, 70)),
    "spike-3x-10s": (spike(3, 10), (60, 70)),
    "spike-5x-10s": (spike(5, 10), (60, 70)),
    "spike-2x-30s": (spike(2, 30), (60, 90)),
    "spike-3x-30s": (spike(3, 30), (60, 90)),
    "spike-5x-30s": (spike(5, 30), (60, 90)),
    "rise-fall-30s": (rise_and_fall(30), (60, 90)),
    "rise-fall-120s": (rise_and_fall(120), (60, 180)),
    "cv-1-to-4-60s": ((Segment(60, 1, 1), Segment(60, 1, 1, 4.0), Segment(60, 1, 1)), (60, 120)),
}


def trace(segments: tuple[Segment, ...], rate: float, seed: int) -> np.ndarray:
    """The arrivals of `segments` one after another (each segment's own seed)."""
    times, at = [], 0.0
    for number, s in enumerate(segments):
        if s.seconds <= 0:
            continue
        spec = ArrivalSpec(
            rate * s.start, s.seconds, cv=s.cv,
            ramp_to=None if s.end == s.start else rate * s.end, seed=seed * 100 + number,
        )  # fmt: skip
        times.append(arrival_times(spec) + at)
        at += s.seconds
    return np.concatenate(times)


@cache  # once per process: every replay in it replays the same plan
def plan_for(rate: float, slo: float) -> tuple[Any, PlanFile, dict[str, float]]:
    catalogue, profiles = load()
    planning = arrival_times(ArrivalSpec(rate, 60, cv=1.0, seed=1))
    planner = Planner(CASCADE, profiles, catalogue, planning, slo, seed=1, budget=None)
    plan = planner.plan()
    assert plan.config is not None, plan.reason
    service = {
        s: planner.profile(s, plan.config[s].hardware).latency(plan.config[s].max_batch)
        for s in CASCADE.names
    }
    lengths = window_lengths(CASCADE.critical_path(service))
    plan_file = parse_plan(plan_document("cascade", plan, planner, envelope(planning, lengths), 0))
    prices = {s: catalogue[plan.config[s].hardware].cost_per_hour * 1.0 for s in CASCADE.names}
    return plan, plan_file, prices


def replay(job: tuple[str, str, float, float, float]) -> dict[str, Any]:
    """One (shape, policy) replay's figures."""
    shape, policy, rate, slo, startup = job
    plan, plan_file, prices = plan_for(rate, slo)
    _, profiles = load()
    segments, (burst_from, burst_to) = SHAPES[shape]
    test = trace(segments, rate, seed=2)
    scaling: TunerScaling | UtilisationScaling | None = None
    if policy == "InferLine tuner":
        scaling = TunerScaling(plan_file, prices, startup=startup)
    elif policy == "utilisation autoscaler":
        scaling = UtilisationScaling(prices, startup=startup)
    estimate = simulate(CASCADE, plan.config, profiles, test, seed=2, scaling=scaling)
    within = estimate.latencies <= slo
    bins = np.arange(0, SECONDS + BIN, BIN)
    which = np.digitize(test, bins) - 1
    burst = (test >= burst_from) & (test < burst_to)
    if scaling is None:
        cost = [plan.cost_per_hour] * (len(bins) - 1)
        average = plan.cost_per_hour
    else:
        counts = scaling.replicas_at(bins[:-1] + BIN / 2)
        cost = [float(sum(counts[s][i] * prices[s] for s in prices)) for i in range(len(bins) - 1)]
        average = scaling.cost_per_hour()
    return {
        "shape": shape,
        "policy": policy,
        "queries": len(test),
        "attainment": round(estimate.attainment(slo), 4),
        "burst_attainment": round(float(within[burst].mean()), 4),
        "p99_ms": round(estimate.p99 * 1e3, 1),
        "cost_per_hour": round(average, 3),
        "changes": len(scaling.reasons) if scaling is not None else 0,
        "per_bin": {
            "attainment": [
                float(within[which == b].mean()) if (which == b).any() else 1.0
                for b in range(len(bins) - 1)
            ],
            "cost": cost,
        },
    }


def bars(rows: list[dict[str, Any]], shapes: list[str], slo_ms: float, out: Path) -> None:
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    width = 0.8 / len(POLICIES)
    x = np.arange(len(shapes))
    for i, policy in enumerate(POLICIES):
        found = {r["shape"]: r for r in rows if r["policy"] == policy}
        top.bar(x + i * width, [found[s]["attainment"] * 100 for s in shapes], width, label=policy)
        bottom.bar(x + i * width, [found[s]["cost_per_hour"] for s in shapes], width)
    top.set_ylabel(f"% of queries within {slo_ms:g} ms")
    top.set_ylim(0, 100)
    top.legend(loc="lower left", fontsize=8)
    bottom.set_ylabel("average $ per hour")
    bottom.set_xticks(x + width, shapes, rotation=30, ha="right", fontsize=8)
    top.set_title("image cascade planned for its rate, 180 s traces with a burst (simulated)")
    figure.tight_layout()
    figure.savefig(out, dpi=100)


def timeline(rows: list[dict[str, Any]], shape: str, slo_ms: float, out: Path) -> None:
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    centres = np.arange(0, SECONDS, BIN) + BIN / 2
    for row in rows:
        if row["shape"] == shape:
            top.plot(centres, row["per_bin"]["attainment"], label=row["policy"])
            bottom.plot(centres, row["per_bin"]["cost"], label=row["policy"])
    burst_from, burst_to = SHAPES[shape][1]
    for axis in (top, bottom):
        axis.axvspan(burst_from, burst_to, color="grey", alpha=0.15)
    top.set_ylabel(f"share within {slo_ms:g} ms")
    bottom.set_ylabel("$ per hour")
    bottom.set_xlabel(f"seconds ({shape}, burst shaded)")
    top.legend(loc="lower left")
    figure.tight_layout()
    figure.savefig(out, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slo-ms", type=float, default=300.0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--startup", type=float, default=2.0, help="seconds a new replica takes")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--timeline", default="spike-3x-30s", help="the shape drawn over time")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("docs/evidence/tuner-autoscaler.png"))
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    slo = args.slo_ms / 1e3
    jobs = [(s, p, args.rate, slo, args.startup) for s in shapes for p in POLICIES]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(replay, jobs))
    else:  # in this process: the plan is made once
        rows = [replay(job) for job in jobs]
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k != "per_bin"}), flush=True)
    bars(rows, shapes, args.slo_ms, args.out)
    if args.timeline in shapes:
        timeline(
            rows, args.timeline, args.slo_ms, args.out.with_name(args.out.stem + "-timeline.png")
        )
    plan, _, _ = plan_for(args.rate, slo)
    summary = {
        "plan": {s: str(c) for s, c in plan.config.stages.items()},
        "plan_cost": plan.cost_per_hour,
        "startup_s": args.startup,
        "rows": [{k: v for k, v in r.items() if k != "per_bin"} for r in rows],
    }
    Path("bench/.work").mkdir(parents=True, exist_ok=True)
    Path("bench/.work/planner-tuning.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary["plan"]), plan.cost_per_hour)


if __name__ == "__main__":
    main()
