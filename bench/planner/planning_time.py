"""Planning time for a 4-stage pipeline, and the estimator's simulated queries per second.

    python bench/planner/planning_time.py [--rate 50] [--seconds 30] [--slo-ms 500]

The pipeline (video monitoring, InferLine's shape): preprocess -> yolo -> resnet50 (60% of
queries) and resnet152 (30%), both after yolo; profiles and prices as in compare.py.
"""

from __future__ import annotations

import argparse
import json
import time

from compare import load

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
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--slo-ms", type=float, default=500.0)
    parser.add_argument("--cv", type=float, default=1.0)
    args = parser.parse_args()
    catalogue, profiles = load()
    trace = arrival_times(ArrivalSpec(args.rate, args.seconds, cv=args.cv, seed=1))
    started = time.perf_counter()
    planner = Planner(VIDEO, profiles, catalogue, trace, args.slo_ms / 1e3, seed=1)
    plan = planner.plan()
    seconds = time.perf_counter() - started
    assert plan.config is not None, plan.reason
    started = time.perf_counter()
    simulate(VIDEO, plan.config, profiles, trace, seed=1)
    one = time.perf_counter() - started
    print(
        json.dumps(
            {
                "queries": len(trace),
                "planning_s": round(seconds, 2),
                "estimates": plan.estimates,
                "s_per_estimate": round(seconds / plan.estimates, 3),
                "cost_per_hour": plan.cost_per_hour,
                "p99_ms": round(plan.p99 * 1e3, 1),
                "config": {
                    s: f"{c.hardware} b{c.max_batch} x{c.replicas}"
                    for s, c in plan.config.stages.items()
                },
                "simulated_queries_per_s": round(len(trace) / one),
                "stage_requests_per_query": round(sum(s.scale for s in VIDEO.stages), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
