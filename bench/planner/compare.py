"""Planner vs coarse-grained baselines, in simulation: cost and SLO misses per (SLO, CV).

    python bench/planner/compare.py [--rate 100] [--seconds 30] [--out bench/.work/planner.json]

For each SLO in {150, 300, 1000} ms and arrival CV in {0.1, 1, 4}:

- **InferLine's planner** (`headway.planning.Planner`) plans the image cascade (preprocess ->
  resnet50 -> resnet152 for 30% of queries) on a planning trace (seed 1);
- **CG-Mean / CG-Peak** (InferLine's coarse-grained baselines): the whole pipeline is one unit
  on one hardware kind, running its models one after the other (a model with no profile on a
  GPU-like kind runs on that machine's CPUs: the cpu4 profile); its batch is the largest whose
  unit latency is at most half the SLO (a query may wait one batch, then run in one); units are
  replicated for the trace's mean rate (CG-Mean) or its peak (the highest rate in any 1 s
  window: CG-Peak), on the kind where that costs least;

then every configuration is simulated on a test trace (seed 2, same rate and CV) and judged by
its cost per hour and the share of queries over the SLO. Profiles and prices:
`bench/planner/profiles.yaml` (assumed GPU-like shapes, not measured) and `catalogue.yaml`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from headway.planning import (
    Catalogue,
    Configuration,
    LatencyProfile,
    Pipeline,
    Planner,
    Profiles,
    Stage,
    StageConfig,
    simulate,
)
from headway.planning.description import (
    parse_catalogue,
    profiles_from_rows,
    read_document,
    read_profile_rows,
)
from headway.planning.envelope import max_count
from headway.planning.workloads import ArrivalSpec, arrival_times

HERE = Path(__file__).parent
SLOS_MS = (150, 300, 1000)
CVS = (0.1, 1.0, 4.0)
SIZES = (1, 2, 4, 8, 16, 32)
CASCADE = Pipeline(
    "image-cascade",
    (
        Stage("preprocess", "preprocess"),
        Stage("resnet50", "resnet50", ("preprocess",)),
        Stage("resnet152", "resnet152", ("resnet50",), 0.3),
    ),
)


def load() -> tuple[Catalogue, Profiles]:
    catalogue = parse_catalogue(read_document(HERE / "catalogue.yaml")["hardware"])
    return catalogue, profiles_from_rows(read_profile_rows(HERE / "profiles.yaml"))


def unit_profile(pipeline: Pipeline, profiles: Profiles, kind: str) -> LatencyProfile:
    """The whole pipeline as one unit on `kind`: its models one after the other, each on
    `kind` (or on the machine's CPUs, cpu4, when it has no profile there)."""
    seconds = {}
    for b in SIZES:
        total = 0.0
        for stage in pipeline.stages:
            on = profiles[stage.model]
            profile = on.get(kind) or on["cpu4"]
            total += profile.latency(max(1, math.ceil(stage.scale * b)))
        seconds[b] = total
    return LatencyProfile(seconds)


def coarse(
    pipeline: Pipeline,
    profiles: Profiles,
    catalogue: Catalogue,
    slo: float,
    rate: float,
) -> tuple[str, int, int, float] | None:
    """(kind, batch, units, cost) of the cheapest coarse-grained deployment for `rate`."""
    best: tuple[str, int, int, float] | None = None
    for kind in catalogue:
        unit = unit_profile(pipeline, profiles, kind)
        fitting = [b for b in SIZES if unit.latency(b) <= slo / 2]
        if not fitting:
            continue
        batch = fitting[-1]
        units = max(1, math.ceil(rate / unit.throughput(batch)))
        cost = units * catalogue[kind].cost_per_hour
        if best is None or cost < best[3]:
            best = (kind, batch, units, cost)
    return best


def judge(
    pipeline: Pipeline,
    config: Configuration,
    profiles: Profiles,
    catalogue: Catalogue,
    test: np.ndarray,
    slo: float,
) -> dict[str, float]:
    estimate = simulate(pipeline, config, profiles, test, seed=2)
    return {
        "cost_per_hour": round(config.cost(catalogue), 4),
        "miss_rate": round(1.0 - estimate.attainment(slo), 6),
        "p99_ms": round(estimate.p99 * 1e3, 2),
    }


def cell(
    catalogue: Catalogue, profiles: Profiles, slo_ms: int, cv: float, rate: float, seconds: float
) -> dict[str, object]:
    slo = slo_ms / 1e3
    planning = arrival_times(ArrivalSpec(rate, seconds, cv=cv, seed=1))
    test = arrival_times(ArrivalSpec(rate, seconds, cv=cv, seed=2))
    started = time.perf_counter()
    planner = Planner(CASCADE, profiles, catalogue, planning, slo, seed=1)
    plan = planner.plan()
    planning_seconds = time.perf_counter() - started
    row: dict[str, object] = {"slo_ms": slo_ms, "cv": cv, "planning_s": round(planning_seconds, 2)}
    if plan.config is not None:
        row["planner"] = judge(CASCADE, plan.config, profiles, catalogue, test, slo)
        row["planner"]["config"] = {  # type: ignore[index]
            s: f"{c.hardware} b{c.max_batch} x{c.replicas}" for s, c in plan.config.stages.items()
        }
    else:
        row["planner"] = {"infeasible": plan.reason}
    peak = max_count(planning, 1.0) / 1.0
    mean = len(planning) / seconds
    for name, target in (("cg_mean", mean), ("cg_peak", peak)):
        chosen = coarse(CASCADE, profiles, catalogue, slo, target)
        if chosen is None:
            row[name] = {"infeasible": "no kind runs the unit within half the SLO"}
            continue
        kind, batch, units, _cost = chosen
        unit = Pipeline("unit", (Stage("unit", "unit"),))
        unit_profiles = {"unit": {kind: unit_profile(CASCADE, profiles, kind)}}
        config = Configuration({"unit": StageConfig(kind, batch, units)})
        row[name] = judge(unit, config, unit_profiles, catalogue, test, slo)
        row[name]["config"] = f"{kind} b{batch} x{units}"  # type: ignore[index]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=Path("bench/.work/planner-compare.json"))
    args = parser.parse_args()
    catalogue, profiles = load()
    rows = []
    for slo_ms in SLOS_MS:
        for cv in CVS:
            row = cell(catalogue, profiles, slo_ms, cv, args.rate, args.seconds)
            print(json.dumps(row), flush=True)
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rate": args.rate, "seconds": args.seconds, "rows": rows}))


if __name__ == "__main__":
    main()
