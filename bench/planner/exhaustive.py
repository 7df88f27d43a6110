"""How far the planner's plan is from the cheapest feasible configuration, and that from CG-Peak.

    python bench/planner/exhaustive.py --pipeline tf-cascade --slo 150 --cv 4 [--pops 3000]

For each (pipeline, SLO, CV) cell of `compare.py` (same planning trace: seed 1, 50,000 queries
at 3,000 queries/s), three figures bracket what any planner could reach:

- **the lower bound** (no simulation): a feasible configuration keeps every stage below its
  throughput, so each stage costs at least the fewest replicas that carry its share of the
  trace's mean rate, on whichever (kind, batch size) does that cheapest; their sum bounds every
  configuration's cost from below, whatever its latency. `bound_slo` is the same with each stage
  at batch sizes whose service time is within the SLO.
- **the exhaustive optimum** (best-first): every shape -- a (kind, batch size) per stage, any
  profiled one, whose critical path at full batches is within the SLO -- starts at the fewest
  replicas below its throughput; a priority queue pops the cheapest (shape, replica counts) of
  all shapes, estimates it on the whole planning trace (the planner's `feasible`: P99 within the
  SLO, every stage below its throughput), and pushes its successors (one replica more at one
  stage) when it misses. More replicas never make a query later, so the first feasible pop is
  the cheapest feasible configuration of that space. Stopped after `--pops` estimates, the cost
  of the next pop is still a lower bound on it (`optimum_at_least`); so with `--seconds`.
- **the planner**: `Planner` as compare.py runs it (5,000-query prefix, confirmed on the whole
  trace), with the restarts (the default) and without (InferLine's search, as the grid ran);
  and CG-Peak (`headway.planning.baselines`, as compare.py builds it).

CG-Peak's cost over the lower bound is the most any plan could save against it.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from compare import PIPELINES, SIZES, describe, load

from headway.planning import Configuration, Planner, StageConfig
from headway.planning.baselines import CoarseGrained, peak_rate
from headway.planning.moves import MAX_REPLICAS
from headway.planning.workloads import ArrivalSpec, arrival_times


def stage_bounds(planner: Planner, slo: float | None) -> dict[str, tuple[float, str]]:
    """Per stage, the least it can cost below its throughput (and where), on any (kind,
    batch) -- or, with `slo`, on batches whose service time is within it."""
    found: dict[str, tuple[float, str]] = {}
    for stage in planner.pipeline.names:
        options = []
        for kind in planner.hardware_for(stage):
            profile = planner.profile(stage, kind)
            for size in profile.batch_sizes:
                if slo is not None and profile.latency(size) > slo:
                    continue
                moved = Configuration({stage: StageConfig(kind, size)})
                count = planner.least_replicas(moved, stage)
                price = planner.catalogue[kind].cost_per_hour
                options.append((count * price, f"{kind} b{size} x{count}"))
        found[stage] = min(options)
    return found


def shapes(planner: Planner) -> list[dict[str, tuple[str, int]]]:
    """Every (kind, batch) per stage whose critical path at full batches is within the SLO."""
    names = planner.pipeline.names
    per_stage = [
        [(k, b) for k in planner.hardware_for(s) for b in planner.profile(s, k).batch_sizes]
        for s in names
    ]
    found = []
    for combo in itertools.product(*per_stage):
        service = {
            s: planner.profile(s, k).latency(b) for s, (k, b) in zip(names, combo, strict=True)
        }
        if planner.pipeline.critical_path(service) <= planner.slo:
            found.append(dict(zip(names, combo, strict=True)))
    return found


def best_first(planner: Planner, pops: int, seconds: float = math.inf) -> dict[str, object]:
    """The cheapest feasible configuration over `shapes`, by cost order (see the module)."""
    names = planner.pipeline.names
    prices = {k: planner.catalogue[k].cost_per_hour for k in planner.catalogue}
    heap: list[tuple[float, int, tuple[int, ...]]] = []
    every = shapes(planner)
    configs = []
    for index, shape in enumerate(every):
        config = Configuration({s: StageConfig(k, b) for s, (k, b) in shape.items()})
        counts = tuple(planner.least_replicas(config, s) for s in names)
        configs.append(config)
        heapq.heappush(heap, (cost_of(shape, counts, prices, names), index, counts))
    seen: set[tuple[int, tuple[int, ...]]] = set()
    made, started = 0, time.perf_counter()
    while heap and made < pops and time.perf_counter() - started < seconds:
        cost, index, counts = heapq.heappop(heap)
        if (index, counts) in seen:
            continue
        seen.add((index, counts))
        config = Configuration(
            {
                s: StageConfig(configs[index][s].hardware, configs[index][s].max_batch, n)
                for s, n in zip(names, counts, strict=True)
            }
        )
        made += 1
        if planner.feasible(config):
            estimate = planner.estimate(config)
            return {
                "optimum": round(cost, 4),
                "config": describe(config),
                "p99_ms": round(estimate.p99 * 1e3, 2),
                "pops": made,
                "shapes": len(every),
            }
        for i in range(len(names)):
            if counts[i] < MAX_REPLICAS:
                more = (*counts[:i], counts[i] + 1, *counts[i + 1 :])
                if (index, more) not in seen:
                    shape = every[index]
                    heapq.heappush(heap, (cost_of(shape, more, prices, names), index, more))
    while heap and (heap[0][1], heap[0][2]) in seen:
        heapq.heappop(heap)
    bound = heap[0][0] if heap else math.inf
    return {"optimum_at_least": round(bound, 4), "pops": made, "shapes": len(every)}


def cost_of(
    shape: dict[str, tuple[str, int]],
    counts: tuple[int, ...],
    prices: dict[str, float],
    names: list[str],
) -> float:
    return sum(prices[shape[s][0]] * n for s, n in zip(names, counts, strict=True))


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
    exact = Planner(pipeline, profiles, catalogue, planning, slo, seed=1, screen=None)
    bounds = stage_bounds(exact, None)
    row["bound"] = round(sum(c for c, _ in bounds.values()), 4)
    row["bound_where"] = {s: w for s, (_, w) in bounds.items()}
    row["bound_slo"] = round(sum(c for c, _ in stage_bounds(exact, slo).values()), 4)
    if pops:
        started = time.perf_counter()
        row["exhaustive"] = best_first(exact, pops, seconds)
        row["exhaustive"]["seconds"] = round(time.perf_counter() - started, 1)  # type: ignore[index]
        print(json.dumps(row), file=sys.stderr, flush=True)  # kept if the planners run long
    for label, restarts in (("planner", True), ("planner_no_restarts", False))[: 2 * plan]:
        started = time.perf_counter()
        found = Planner(pipeline, profiles, catalogue, planning, slo, seed=1, restarts=restarts)
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
