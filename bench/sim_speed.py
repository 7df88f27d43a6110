"""How fast the simulator replays a trace, and what it answers: one synthetic trace through
`ServerSimulation` (50 models in a Zipf mix, 4 workers of 500 MB, 20,000 requests over 20 s,
100 ms SLO), in wall and CPU seconds (on a shared machine the CPU time is the steadier
figure). Compare two trees with ``PYTHONPATH=/other/src python bench/sim_speed.py NAME``."""

from __future__ import annotations

import sys
import time

import numpy as np

from headway.sim import ModelProfile, ServerSimulation


def main() -> None:
    rng = np.random.default_rng(0)
    profile = ModelProfile({1: 0.002, 2: 0.0025, 4: 0.003, 8: 0.004}, 0.02, 50.0, max_batch=8)
    profiles = {f"m{i}": profile for i in range(50)}
    n = 20_000
    times = np.sort(rng.uniform(0, 20.0, n))
    models = [f"m{int(i)}" for i in rng.zipf(1.3, n) % 50]
    started, cpu = time.perf_counter(), time.process_time()
    with ServerSimulation(
        profiles, workers=4, memory_mb=500.0, rpc_seconds=0.0002, seed_profiles=True
    ) as sim:
        summary = sim.run(times, models, slo=0.1, drain=2.0).summary()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    name = sys.argv[1] if len(sys.argv) > 1 else "this tree"
    print(
        f"{name}: {n} requests in {wall:.2f} s ({n / wall:.0f} req/s), {cpu:.2f} s of CPU "
        f"({n / cpu:.0f} req/s); on time "
        f"{summary['on_time']}, rejected {summary['rejected']}, late {summary['late']}, "
        f"loads {summary['loads']}"
    )


if __name__ == "__main__":
    main()
