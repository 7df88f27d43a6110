"""How far the planner's plan is from the cheapest feasible configuration, and that from CG-Peak.

    python bench/planner/exhaustive.py --pipeline tf-cascade --slo 150 --cv 4 [--pops 3000]

For each (pipeline, SLO, CV) cell of `compare.py` (same planning trace: seed 1, 50,000 queries
at 3,000 queries/s), three figures bracket what any planner could reach:

- **the lower bound** (`headway.planning.exhaustive.lower_bound`, no simulation): each stage's
  fewest replicas below its throughput on its cheapest (kind, batch size), summed; `bound_slo`
  with each stage at batch sizes whose service time is within the SLO.
- **the exhaustive optimum** (`headway.planning.exhaustive.cheapest`, best-first over every
  (kind, batch size, replicas) per stage whose critical path at full batches is within the
  SLO), estimated on the whole planning trace. Stopped after `--pops` configurations or
  `--seconds`, the next one's cost is still a lower bound on it (`optimum_at_least`).
- **the planner**: `Planner` as compare.py runs it (5,000-query prefix, confirmed on the whole
  trace), with the restarts (the default) and without (InferLine's search, as the grid ran);
  and CG-Peak (`headway.planning.baselines`, as compare.py builds it).

CG-Peak's cost over the lower bound is the most any plan could save against it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from compare import PIPELINES, SIZES, describe, load

from headway.planning import Planner
from headway.planning.baselines import CoarseGrained, peak_rate
from headway.planning.exhaustive import Cheapest, cheapest, lower_bound
from headway.planning.workloads import ArrivalSpec, arrival_times


def searched(result: Cheapest, started: float) -> dict[str, object]:
    row: dict[str, object] = {"estimates": result.estimates, "shapes": result.shapes}
    if result.config is not None:
        row["optimum"] = round(result.at_least, 4)
        row["config"] = describe(result.config)
    else:
        row["optimum_at_least"] = round(result.at_least, 4)
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def cell(
    name: str,
    slo_ms: int,
    cv: float,
    pops: int,
    rate: float,
    queries: int,
    plan: bool = True,
    seconds: float = math.inf,
) -> dict[str, object]:
    catalogue, profiles = load()
    pipeline, slo = PIPELINES[name], slo_ms / 1e3
    planning = arrival_times(ArrivalSpec(rate, queries / rate, cv=cv, seed=1))
    row: dict[str, object] = {"pipeline": name, "slo_ms": slo_ms, "cv": cv}
    # held to the SLO itself, as the grid's plans are (bench/planner/compare.py)
    exact = Planner(
        pipeline, profiles, catalogue, planning, slo, seed=1, screen=None, headroom=0, budget=None
    )
    bounds = lower_bound(exact)
    row["bound"] = round(sum(c for c, _ in bounds.values()), 4)
    row["bound_where"] = {
        s: f"{c.hardware} b{c.max_batch} x{c.replicas}" for s, (_, c) in bounds.items()
    }
    row["bound_slo"] = round(sum(c for c, _ in lower_bound(exact, slo).values()), 4)
    if pops:
        started = time.perf_counter()
        row["exhaustive"] = searched(cheapest(exact, pops, seconds), started)
        print(json.dumps(row), file=sys.stderr, flush=True)  # kept if the planners run long
    for label, restarts in (("planner", True), ("planner_no_restarts", False))[: 2 * plan]:
        started = time.perf_counter()
        found = Planner(
            pipeline, profiles, catalogue, planning, slo, seed=1, restarts=restarts, headroom=0,
            budget=None,
        )  # fmt: skip
        made = found.plan()
        row[label] = (
            {"cost": round(made.cost_per_hour, 4), "config": describe(made.config)}
            if made.config is not None
            else {"infeasible": made.reason}
        )
        row[label]["seconds"] = round(time.perf_counter() - started, 1)  # type: ignore[index]
    units = CoarseGrained(pipeline, profiles, catalogue, SIZES, fallback="cpu4")
    peak = units.deployment(slo, peak_rate(planning, slo), "fastest")
    if peak is not None:
        row["cg_peak"] = {"cost": round(peak.cost(catalogue), 4), "config": describe(peak)}
        row["cg_peak_over_bound"] = round(peak.cost(catalogue) / float(row["bound"]), 3)  # type: ignore[arg-type]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeline", nargs="+", default=["tf-cascade"], choices=list(PIPELINES))
    parser.add_argument("--slo", type=int, nargs="+", default=[150])
    parser.add_argument("--cv", type=float, nargs="+", default=[4.0])
    parser.add_argument("--pops", type=int, default=3000, help="most estimates per cell")
    parser.add_argument(
        "--plan", action=argparse.BooleanOptionalAction, default=True, help="run the planner too"
    )
    parser.add_argument("--seconds", type=float, default=math.inf, help="most search s per cell")
    parser.add_argument("--rate", type=float, default=3000.0)
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--out", type=Path, default=Path("bench/.work/planner-exhaustive.json"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.pipeline:
        for slo_ms in args.slo:
            for cv in args.cv:
                rows.append(
                    cell(
                        name,
                        slo_ms,
                        cv,
                        args.pops,
                        args.rate,
                        args.queries,
                        args.plan,
                        args.seconds,
                    )
                )
                print(json.dumps(rows[-1]), flush=True)
                args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
