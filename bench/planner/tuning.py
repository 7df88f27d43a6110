"""The tuner vs a utilisation-based autoscaler on a 3x rate spike, in simulation.

    python bench/planner/tuning.py [--slo-ms 300] [--rate 100] [--out bench/planner-tuning.png]

The image cascade of compare.py is planned for `--rate` queries/s (CV 1, 60 s, seed 1). The
test trace: 180 s at the same rate, three times it from 60 s to 90 s (CV 1, seed 2). The plan
is replayed three ways: as planned (static), with InferLine's tuner, and with a reactive
autoscaler targeting 70% busy time over 10 s windows (both: decisions every 0.5 s, new replicas
serve 2 s after they are asked for, scale-down after a 15 s hold-down). Figures: SLO
attainment and cost per 5 s of arrivals, and over the whole trace; a PNG of both over time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from compare import CASCADE, load

from headway.planning import Planner, simulate
from headway.planning.envelope import envelope, window_lengths
from headway.planning.plan_file import parse_plan, plan_document
from headway.planning.scaling import TunerScaling, UtilisationScaling
from headway.planning.workloads import ArrivalSpec, arrival_times

BIN = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slo-ms", type=float, default=300.0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=Path("bench/planner-tuning.png"))
    args = parser.parse_args()
    slo = args.slo_ms / 1e3
    catalogue, profiles = load()
    planning = arrival_times(ArrivalSpec(args.rate, 60, cv=1.0, seed=1))
    planner = Planner(CASCADE, profiles, catalogue, planning, slo, seed=1)
    plan = planner.plan()
    assert plan.config is not None, plan.reason
    service = {
        s: planner.profile(s, plan.config[s].hardware).latency(plan.config[s].max_batch)
        for s in CASCADE.names
    }
    lengths = window_lengths(CASCADE.critical_path(service))
    plan_file = parse_plan(plan_document("cascade", plan, planner, envelope(planning, lengths), 0))
    prices = {s: catalogue[plan.config[s].hardware].cost_per_hour * 1.0 for s in CASCADE.names}
    test = arrival_times(
        ArrivalSpec(args.rate, 180, cv=1.0, spike_at=60, spike_factor=3, spike_seconds=30, seed=2)
    )
    bins = np.arange(0, 180 + BIN, BIN)
    runs = {}
    for name, scaling in (
        ("static plan", None),
        ("InferLine tuner", TunerScaling(plan_file, prices)),
        ("utilisation autoscaler", UtilisationScaling(prices)),
    ):
        estimate = simulate(CASCADE, plan.config, profiles, test, seed=2, scaling=scaling)
        within = estimate.latencies <= slo
        which = np.digitize(test, bins) - 1
        attainment = [float(within[which == b].mean()) for b in range(len(bins) - 1)]
        if scaling is None:
            cost = [plan.cost_per_hour] * (len(bins) - 1)
            average = plan.cost_per_hour
        else:
            counts = scaling.replicas_at(bins[:-1] + BIN / 2)
            cost = [
                float(sum(counts[s][i] * prices[s] for s in prices)) for i in range(len(bins) - 1)
            ]
            average = scaling.cost_per_hour()
        runs[name] = {
            "attainment": round(estimate.attainment(slo), 4),
            "spike_attainment": round(float(within[(test >= 60) & (test < 90)].mean()), 4),
            "p99_ms": round(estimate.p99 * 1e3, 1),
            "cost_per_hour": round(average, 3),
            "changes": len(scaling.reasons) if scaling is not None else 0,
            "first_changes": [
                f"{t:.1f}s {s}: {b}->{a} ({r})" for t, s, b, a, r in scaling.reasons[:3]
            ]
            if scaling is not None
            else [],
            "per_bin": {"attainment": attainment, "cost": cost},
        }
        print(name, json.dumps({k: v for k, v in runs[name].items() if k != "per_bin"}), flush=True)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    centres = bins[:-1] + BIN / 2
    for name, run in runs.items():
        top.plot(centres, run["per_bin"]["attainment"], label=name)  # type: ignore[index]
        bottom.plot(centres, run["per_bin"]["cost"], label=name)  # type: ignore[index]
    for axis in (top, bottom):
        axis.axvspan(60, 90, color="grey", alpha=0.15)
    top.set_ylabel(f"share within {args.slo_ms:g} ms")
    bottom.set_ylabel("$ per hour")
    bottom.set_xlabel("seconds (3x spike shaded)")
    top.legend(loc="lower left")
    top.set_title(f"image cascade, {args.rate:g} q/s planned, CV 1 (simulated)")
    figure.tight_layout()
    figure.savefig(args.out, dpi=100)
    summary = {
        "plan": {s: str(c) for s, c in plan.config.stages.items()},
        "plan_cost": plan.cost_per_hour,
        "runs": {k: {kk: vv for kk, vv in v.items() if kk != "per_bin"} for k, v in runs.items()},
    }
    Path("bench/.work").mkdir(parents=True, exist_ok=True)
    Path("bench/.work/planner-tuning.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary["plan"]), plan.cost_per_hour)


if __name__ == "__main__":
    main()
