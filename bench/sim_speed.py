"""How fast the simulator replays a trace, and what it answers, in wall and CPU seconds (on a
shared machine the CPU time is the steadier figure).

- default: one synthetic trace of single requests (50 models in a Zipf mix, 4 workers of
  500 MB, 20,000 requests over 20 s, 100 ms SLO) through `ServerSimulation.run`;
- ``--pipeline``: the planner's estimator (`headway.planning.simulate`) on a three-stage
  cascade (every query through two stages, 30% through a third; batch 4, two replicas each),
  20,000 queries over 100 s.

Compare two trees with ``PYTHONPATH=/other/src python bench/sim_speed.py NAME [--pipeline]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from headway.sim import ModelProfile, ServerSimulation

PROFILE = ModelProfile({1: 0.002, 2: 0.0025, 4: 0.003, 8: 0.004}, 0.02, 50.0, max_batch=8)
PROFILES = {f"m{i}": PROFILE for i in range(50)}
SLO = 0.1
REQUESTS = 20_000


def single_requests() -> tuple[int, dict[str, Any]]:
    rng = np.random.default_rng(0)
    times = np.sort(rng.uniform(0, 20.0, REQUESTS))
    models = [f"m{int(i)}" for i in rng.zipf(1.3, REQUESTS) % 50]
    with ServerSimulation(
        PROFILES, workers=4, memory_mb=500.0, rpc_seconds=0.0002, seed_profiles=True
    ) as sim:
        summary = sim.run(times, models, slo=SLO, drain=2.0).summary()
    return REQUESTS, summary


def pipeline() -> tuple[int, dict[str, Any]]:
    from headway.planning import (
        Configuration,
        LatencyProfile,
        Pipeline,
        Stage,
        StageConfig,
        simulate,
    )

    stages = (Stage("a", "a"), Stage("b", "b", ("a",)), Stage("c", "c", ("b",), 0.3))
    cascade = Pipeline("cascade", stages)
    seconds = {"a": 0.004, "b": 0.006, "c": 0.012}  # batch 1; 4 rows take twice as long
    profiles = {
        name: {"cpu": LatencyProfile({1: s, 2: 1.4 * s, 4: 2 * s})} for name, s in seconds.items()
    }
    config = Configuration({name: StageConfig("cpu", 4, 2) for name in seconds})
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(100.0 / REQUESTS, REQUESTS))
    estimate = simulate(cascade, config, profiles, arrivals, seed=1)
    requests = sum(estimate.reached.values())
    return requests, {"p99_ms": round(estimate.p99 * 1e3, 3), "queries": REQUESTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", nargs="?", default="this tree")
    parser.add_argument("--pipeline", action="store_true", help="the planner's estimator")
    args = parser.parse_args()
    started, cpu = time.perf_counter(), time.process_time()
    requests, summary = (pipeline if args.pipeline else single_requests)()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if args.pipeline:
        said = f"p99 {summary['p99_ms']} ms over {summary['queries']} queries"
    else:
        said = (
            f"on time {summary['on_time']}, rejected {summary['rejected']}, "
            f"late {summary['late']}, loads {summary['loads']}"
        )
    print(
        f"{args.name}: {requests} requests in {wall:.2f} s ({requests / wall:.0f} req/s), "
        f"{cpu:.2f} s of CPU ({requests / cpu:.0f} req/s); {said}"
    )


if __name__ == "__main__":
    main()
