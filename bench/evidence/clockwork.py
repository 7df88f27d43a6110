"""Clockwork's experiment, simulated, over seeds: thousands of models, a memory budget, 100 ms.

`bench/clockwork/simulated.py`'s experiment, smaller and repeated: real models of
`bench/clockwork/zoo.py` (PyTorch MLPs, scikit-learn forests and logistic regressions) are
built and profiled here (LOAD and INFER at batch sizes 1-16, through Headway's adapters);
each of `models` simulated models gets one of these profiles at random, the workers' memory
holds a tenth of all models, and a trace shaped like the Azure Functions trace
(`headway.traces`) is replayed through the real `Scheduler` with simulated workers
(`headway.sim`), once with Headway's policy and once with the Clipper-style baseline
(FIFO, AIMD batching, no early rejection, plain LRU). Headway's capacity (the highest rate at
which it answers 99.9% within the SLO) is searched once, on the first seed; every seed then
runs at fractions of it. Figures leave out the first seconds (every model starts unloaded).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

CLOCKWORK = Path(__file__).resolve().parent.parent / "clockwork"
sys.path.insert(0, str(CLOCKWORK))

import simulated  # noqa: E402
import zoo  # noqa: E402

LOADS = (0.5, 0.9, 1.2)


def profiles(work: Path, count: int, log: Any = print) -> dict[str, dict[str, Any]]:
    """`count` real models of the zoo, built and profiled once (cached in `work`)."""
    cache = work / f"profiles-{count}-r{zoo.RECIPE}.json"
    if cache.exists():
        return json.loads(cache.read_text())  # type: ignore[no-any-return]
    root = zoo.ensure(count, log=log)
    log(f"  profiling {count} real models in this process")
    measured = zoo.profile(root, sorted(zoo.catalogue(root)), repeats=7)
    for name, entry in measured.items():
        entry["family"] = zoo.catalogue(root)[name]["family"]
    work.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(measured, indent=1))
    return measured


def settings(quick: bool, seed: int) -> argparse.Namespace:
    return argparse.Namespace(
        models=500 if quick else 2_000, workers=4,
        duration=12.0 if quick else 30.0, warmup=4.0 if quick else 10.0, interval=10.0,
        slo_ms=100.0, budget_fraction=0.1, rpc_ms=0.25, target=0.999, seed=seed,
    )  # fmt: skip


def experiment(work: Path, quick: bool, log: Any = print) -> dict[str, Any]:
    measured = profiles(work, 12 if quick else 30, log)
    seeds = (0,) if quick else (0, 1, 2)
    out: dict[str, Any] = {"profiles": measured, "seeds": list(seeds), "loads": list(LOADS),
                           "capacity_rps": {}, "runs": []}  # fmt: skip
    for seed in seeds:
        # each seed is its own trace (popularity, bursts) and so has its own capacity
        args = settings(quick, seed)
        out["settings"] = {k: v for k, v in vars(args).items() if k != "seed"}
        assigned = simulated.assign(measured, args.models, seed)
        estimate = args.workers / simulated.mean_b1(assigned, args)
        base = simulated.Base(args, 2.0 * estimate)
        capacity, _ = simulated.search(assigned, args, base, 0.5 * estimate)
        out["capacity_rps"][str(seed)] = capacity
        log(f"  seed {seed}: capacity {capacity:,.0f} req/s (batch-1 estimate {estimate:,.0f})")
        base = simulated.Base(args, 1.25 * max(LOADS) * capacity)
        for fraction in LOADS:
            for policy in ("headway", "clipper"):
                rate = fraction * capacity
                figures, whole, seconds = simulated.simulate(assigned, args, base, rate, policy)
                out["runs"].append({
                    "seed": seed, "load": fraction, "policy": policy, "rate": rate,
                    "offered_rps": figures["offered_rps"], "requests": figures["requests"],
                    "slo_attainment": figures["slo_attainment"], "goodput_rps": figures["goodput_rps"],
                    "late": figures["late"], "rejected": figures["rejected"], "loads": whole["loads"],
                    "p99_ms": figures["latency_ms"].get("p99"), "seconds": seconds,
                })  # fmt: skip
    return out


def totals(out: dict[str, Any]) -> dict[str, Any]:
    """Answers and late answers of each policy over every run."""
    result: dict[str, Any] = {}
    for policy in ("headway", "clipper"):
        runs = [r for r in out["runs"] if r["policy"] == policy]
        result[policy] = {"requests": sum(r["requests"] for r in runs),
                          "late": sum(r["late"] for r in runs)}  # fmt: skip
    return result


def by_load(out: dict[str, Any], policy: str, key: str) -> dict[float, list[float]]:
    found: dict[float, list[float]] = {}
    for r in out["runs"]:
        if r["policy"] == policy:
            found.setdefault(r["load"], []).append(float(r[key]))
    return found
