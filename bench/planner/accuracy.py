"""Estimator accuracy: simulated vs measured P99 of a two-stage cascade at three loads.

    python bench/planner/accuracy.py [--seconds 20] [--out bench/.work/planner-accuracy.json]
    python bench/planner/accuracy.py --flow [accuracy_flow.py's options]

The cascade: a logistic regression on scikit-learn's digits answers every query; the rows it
is unsure of (top probability under 0.9) go on to a random forest (300 trees). Both are real
models on real worker processes, one worker each.

1. `headway profile`'s code measures each model alone (batch 1-16, one worker thread), again
   just before each load's replay (the loads are shares of the first profile's capacity).
2. The share of queries the forest sees (the scale factor) is counted on the query rows.
3. For three loads (a share of the pipeline's capacity without batching: the least of each
   stage's batch-1 throughput over its share), gamma arrivals
   (CV 1) are replayed open loop through the server's own controller: each query is sent to
   the first model, then, if it was unsure, to the second; its latency counts from its
   scheduled arrival.
4. The same arrivals go through `headway.planning.simulate` with the measured profiles (each
   batch takes its measured mean), with each batch taking its measured p99, and with each
   batch drawn from a log-normal of its measured mean and p99 (`simulate(spread=True)`).

The HTTP hop is left out on both sides (the controller is driven in-process).

With `--flow`, the cascade *flow app* served by `headway serve` over HTTP instead
(`bench/planner/accuracy_flow.py`, which takes that run's options).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import joblib
import numpy as np
import yaml
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench.flows and the example flows, as bench/flows.py loads them


from headway.control.controller import Controller  # noqa: E402
from headway.control.request import InferenceRequest  # noqa: E402
from headway.planning import (  # noqa: E402
    Catalogue,
    Configuration,
    LatencyProfile,
    Pipeline,
    Stage,
    StageConfig,
    simulate,
)
from headway.planning.description import profiles_from_rows  # noqa: E402
from headway.planning.pipeline import Hardware  # noqa: E402
from headway.planning.profiler import profile_kind  # noqa: E402
from headway.planning.workloads import ArrivalSpec, arrival_times  # noqa: E402
from headway.repository import Repository  # noqa: E402
from headway.runtime.engines.local import LocalEngine  # noqa: E402

SIZES = (1, 2, 4, 8, 16)
CATALOGUE = Catalogue({"cpu1": Hardware("cpu1", 0.05)})
LOADS = (0.2, 0.4, 0.6)
UNSURE = 0.9


def build(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """The two models' folders; returns (query rows, whether the first model is unsure)."""
    x, y = load_digits(return_X_y=True)
    train, queries = x[:1000], x[1000:]
    fast = LogisticRegression(max_iter=300).fit(train, y[:1000])
    slow = RandomForestClassifier(n_estimators=300, random_state=0).fit(train, y[:1000])
    for name, model in (("digits-fast", fast), ("digits-forest", slow)):
        folder = root / name / "1"
        folder.mkdir(parents=True)
        (root / name / "model.yaml").write_text(
            yaml.safe_dump({"framework": "sklearn", "max_batch_size": 16})
        )
        joblib.dump(model, folder / "model.joblib")
    unsure = fast.predict_proba(queries).max(axis=1) < UNSURE
    return queries.astype(np.float64), unsure


async def replay(
    repository: Repository, rows: np.ndarray, unsure: np.ndarray, arrivals: np.ndarray
) -> np.ndarray:
    """Latency of each query through the real controller (two worker processes)."""
    engine = LocalEngine(2, env={"HEADWAY_WORKER_FRAMEWORKS": "sklearn"})
    controller = Controller(repository, engine)
    await controller.start()
    latencies = np.full(len(arrivals), np.nan)
    try:
        for model in ("digits-fast", "digits-forest"):  # warm both
            for _ in range(20):
                await controller.infer(
                    InferenceRequest(model, inputs={"input-0": rows[:1]}, timeout=10)
                )
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.2

        async def query(i: int) -> None:
            row = {"input-0": rows[i % len(rows)][None, :]}
            await controller.infer(InferenceRequest("digits-fast", inputs=row, timeout=30))
            if unsure[i % len(rows)]:
                await controller.infer(InferenceRequest("digits-forest", inputs=row, timeout=30))
            latencies[i] = loop.time() - (start + arrivals[i])

        tasks = []
        for i, at in enumerate(arrivals):
            delay = start + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(query(i)))
        await asyncio.gather(*tasks)
    finally:
        await controller.stop()
    return latencies


def main() -> None:
    if "--flow" in sys.argv[1:]:  # the run on the real server: its own script and options
        from bench.planner.accuracy_flow import main as flow_main

        flow_main([a for a in sys.argv[1:] if a != "--flow"])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("bench/.work/planner-accuracy.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="headway-accuracy-"))
    rows, unsure = build(root)
    repository = Repository.scan(root)
    share = float(unsure.mean())
    pipeline = Pipeline(
        "cascade",
        (
            Stage("fast", "digits-fast"),
            Stage("forest", "digits-forest", ("fast",), share),
        ),
    )
    config = Configuration(
        {"fast": StageConfig("cpu1", 16, 1), "forest": StageConfig("cpu1", 16, 1)}
    )
    report: dict[str, object] = {"share": share, "loads": []}
    capacity: float | None = None
    for load in LOADS:
        # profiled just before each replay: on a shared machine the contention the profile
        # sees drifts within minutes, and the replay should meet the machine the profile saw
        measured = asyncio.run(profile_kind(repository, Hardware("cpu1", 0.05), batch_sizes=SIZES))
        profiles = profiles_from_rows(measured)
        tails = {
            m: {k: LatencyProfile(dict(p.p99)) for k, p in on.items()} for m, on in profiles.items()
        }
        if capacity is None:  # the loads are shares of the first profile's capacity
            capacity = min(  # queries/s without batching
                profiles["digits-fast"]["cpu1"].throughput(1),
                profiles["digits-forest"]["cpu1"].throughput(1) / share,
            )
            report["capacity_qps"] = capacity
        rate = load * capacity
        arrivals = arrival_times(ArrivalSpec(rate, args.seconds, cv=1.0, seed=7))
        real = asyncio.run(replay(repository, rows, unsure, arrivals))
        started = time.perf_counter()
        # the simulator's reach draws stand in for the rows' own uncertainty (same share)
        estimate = simulate(pipeline, config, profiles, arrivals, seed=7)
        sim_seconds = time.perf_counter() - started
        # the same with each batch taking its measured p99 instead of its mean: a bound
        pessimistic = simulate(pipeline, config, tails, arrivals, seed=7)
        # each action drawn from a log-normal with the measured mean and p99
        spread = simulate(pipeline, config, profiles, arrivals, seed=7, spread=True)
        row = {
            "load": load,
            "rate_qps": round(rate, 1),
            "queries": len(arrivals),
            "real_p50_ms": round(float(np.nanpercentile(real, 50)) * 1e3, 2),
            "real_p99_ms": round(float(np.nanpercentile(real, 99)) * 1e3, 2),
            "sim_p50_ms": round(estimate.percentile(50) * 1e3, 2),
            "sim_p99_ms": round(estimate.p99 * 1e3, 2),
            "sim_from_p99s_p99_ms": round(pessimistic.p99 * 1e3, 2),
            "sim_spread_p50_ms": round(spread.percentile(50) * 1e3, 2),
            "sim_spread_p99_ms": round(spread.p99 * 1e3, 2),
            "sim_queries_per_s": round(len(arrivals) / sim_seconds),
            "load_average_1m": os.getloadavg()[0],
            "profiles_ms": {
                m: {b: round(s * 1e3, 3) for b, s in p["cpu1"].seconds.items()}
                for m, p in profiles.items()
            },
        }
        row["p99_error"] = round(row["sim_p99_ms"] / row["real_p99_ms"] - 1, 3)  # type: ignore[operator]
        row["spread_p99_error"] = round(row["sim_spread_p99_ms"] / row["real_p99_ms"] - 1, 3)  # type: ignore[operator]
        print(json.dumps(row), flush=True)
        report["loads"].append(row)  # type: ignore[attr-defined]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
