"""Planning time for a 4-stage pipeline, and the estimator's simulated queries per second.

    python bench/planner/planning_time.py [--rate 50] [--seconds 30] [--slo-ms 500]
    python bench/planner/planning_time.py --pipeline image-cascade --rate 3000 --queries 10000 \
        --slo-ms 150 --cv 0.1 [--no-restarts]

The default pipeline (video monitoring, InferLine's shape): preprocess -> yolo -> resnet50 (60%
of queries) and resnet152 (30%), both after yolo; `--pipeline` takes one of compare.py's
instead. Profiles and prices as in compare.py. Run with another tree's `src` on PYTHONPATH to
compare (`--restarts`, `--screen` and `--margin` are left out for a planner without them). Reports the estimates made, how
many stopped early (their P99 known to be over the SLO) and the seconds they took, and one
complete replay of the plan in simulated queries per second.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from typing import Any

from compare import PIPELINES, describe, load

from headway.planning import Pipeline, Planner, Stage, simulate
from headway.planning.workloads import ArrivalSpec, arrival_times

VIDEO = Pipeline(
    "video-monitoring",
    (
        Stage("preprocess", "preprocess"),
        Stage("yolo", "yolo", ("preprocess",)),
        Stage("resnet50", "resnet50", ("yolo",), 0.6),
        Stage("resnet152", "resnet152", ("yolo",), 0.3),
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeline", choices=list(PIPELINES), default=None)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--queries", type=int, default=None, help="instead of --seconds")
    parser.add_argument("--slo-ms", type=float, default=500.0)
    parser.add_argument("--cv", type=float, default=1.0)
    parser.add_argument("--restarts", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--screen", type=int, default=None, help="Planner(screen=...); 0: none")
    parser.add_argument("--margin", type=float, default=None, help="Planner(margin=...)")
    args = parser.parse_args()
    catalogue, profiles = load()
    pipeline = PIPELINES[args.pipeline] if args.pipeline else VIDEO
    seconds = args.queries / args.rate if args.queries else args.seconds
    trace = arrival_times(ArrivalSpec(args.rate, seconds, cv=args.cv, seed=1))
    options: dict[str, Any] = {"seed": 1}
    accepted = inspect.signature(Planner).parameters
    if "restarts" in accepted:
        options["restarts"] = args.restarts
    if args.screen is not None and "screen" in accepted:
        options["screen"] = args.screen or None
    if args.margin is not None and "margin" in accepted:
        options["margin"] = args.margin
    planner = Planner(pipeline, profiles, catalogue, trace, args.slo_ms / 1e3, **options)
    replays = {"complete": [0, 0.0], "stopped early": [0, 0.0]}
    simulate_one = planner.simulate

    def timed(*a: Any, **k: Any) -> Any:
        began = time.perf_counter()
        estimate = simulate_one(*a, **k)
        kept = replays["complete" if estimate.complete else "stopped early"]
        kept[0] += 1
        kept[1] += time.perf_counter() - began
        return estimate

    planner.simulate = timed  # type: ignore[method-assign]
    started = time.perf_counter()
    plan = planner.plan()
    planning = time.perf_counter() - started
    assert plan.config is not None, plan.reason
    started = time.perf_counter()
    simulate(pipeline, plan.config, profiles, trace, seed=1)
    one = time.perf_counter() - started
    print(
        json.dumps(
            {
                "pipeline": pipeline.name,
                "queries": len(trace),
                "planning_s": round(planning, 2),
                "estimates": plan.estimates,
                "screened": getattr(plan, "screened", len(trace)),
                "replays": {k: [n, round(t, 1)] for k, (n, t) in replays.items()},
                "s_per_estimate": round(planning / plan.estimates, 3),
                "cost_per_hour": round(plan.cost_per_hour, 4),
                "p99_ms": round(plan.p99 * 1e3, 1),
                "config": describe(plan.config),
                "simulated_queries_per_s": round(len(trace) / one),
                "stage_requests_per_query": round(sum(s.scale for s in pipeline.stages), 2),
                **options,
            }
        )
    )


if __name__ == "__main__":
    main()
