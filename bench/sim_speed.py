"""How fast the simulator replays a trace, and what it answers: one synthetic trace (50 models in
a Zipf mix, 4 workers of 500 MB, 20,000 requests over 20 s, 100 ms SLO) through
`ServerSimulation` (the server's controller), or with ``--scheduler-only`` through
`Simulation.drive` (the scheduler alone, as the planner runs it), in wall and CPU seconds (on a
shared machine the CPU time is the steadier figure). Compare two trees with
``PYTHONPATH=/other/src python bench/sim_speed.py NAME``; a tree from before `ServerSimulation`
was exported (2c56fcf, 9ea22ff) runs its own `Simulation.run`."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import headway.sim
from headway.sim import ModelProfile, Simulation

PROFILE = ModelProfile({1: 0.002, 2: 0.0025, 4: 0.003, 8: 0.004}, 0.02, 50.0, max_batch=8)
PROFILES = {f"m{i}": PROFILE for i in range(50)}
SLO = 0.1


def through_the_controller(times: np.ndarray, models: list[str]) -> dict[str, Any]:
    server = getattr(headway.sim, "ServerSimulation", None)
    if server is None:  # an older tree: its own Simulation.run
        old = Simulation(PROFILES, workers=4, memory_mb=500.0, rpc_seconds=0.0002)
        return old.run(times, models, slo=SLO, drain=2.0).summary()  # type: ignore[attr-defined,no-any-return]
    with server(
        PROFILES, workers=4, memory_mb=500.0, rpc_seconds=0.0002, seed_profiles=True
    ) as sim:
        return sim.run(times, models, slo=SLO, drain=2.0).summary()  # type: ignore[no-any-return]


def scheduler_only(times: np.ndarray, models: list[str]) -> dict[str, Any]:
    from headway.control.request import Request

    sim = Simulation(PROFILES, workers=4, memory_mb=500.0, rpc_seconds=0.0002)
    for name in PROFILES:
        sim.register(name)
    counts = {"on_time": 0, "rejected": 0, "late": 0}

    def answered(request: Request, now: float) -> None:
        counts["on_time" if now <= request.deadline else "late"] += 1

    def rejected(request: Request, error: Exception, now: float) -> None:
        counts["rejected"] += 1

    sim.drive(
        times,
        lambda i, now: Request(models[i], {}, 1, now, now + SLO, token=i),
        answered,
        rejected,
        drain=2.0,
    )
    return {**counts, "loads": sim.scheduler.counters.loads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", nargs="?", default="this tree")
    parser.add_argument("--scheduler-only", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = 20_000
    times = np.sort(rng.uniform(0, 20.0, n))
    models = [f"m{int(i)}" for i in rng.zipf(1.3, n) % 50]
    started, cpu = time.perf_counter(), time.process_time()
    summary = (scheduler_only if args.scheduler_only else through_the_controller)(times, models)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"{args.name}: {n} requests in {wall:.2f} s ({n / wall:.0f} req/s), {cpu:.2f} s of CPU "
        f"({n / cpu:.0f} req/s); on time {summary['on_time']}, rejected {summary['rejected']}, "
        f"late {summary['late']}, loads {summary['loads']}"
    )


if __name__ == "__main__":
    main()
