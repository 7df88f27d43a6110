"""Clockwork's experiment at scale, simulated: 10,000 models on 32 workers, profiles measured here.

    python bench/clockwork/simulated.py                 # ~15 min on 2 cores
    python bench/clockwork/simulated.py --duration 30 --loads 0.5,1.2

1. **Profiles**: a sample of the real models of ``zoo.py`` (every ``1000 / --sample``-th, so
   the families keep their shares) is measured in this process through Headway's adapters:
   LOAD (from disk, page cache warm) and INFER at batch sizes 1, 2, 4, 8, 16 (medians of 15).
   Each of the 10,000 simulated models gets one of these profiles at random, and its memory.
2. **Memory**: the budget holds a tenth of all models' memory, split evenly over the workers.
3. **Capacity**: the highest offered rate at which Headway still answers at least
   ``--target`` (99.9%) of the requests within their SLO, found by a search over offered rates
   (steps of 25% from half the batch-1 estimate ``workers / E[batch-1 INFER]`` over the trace's
   request mix, then two bisections). For reference, Headway's goodput when the trace offers
   ``--saturate`` x that estimate (the goodput at which it saturates) is measured too: it is
   much higher, because an overwhelmed Headway sheds the expensive requests (cold starts, each
   a LOAD first) and answers the cheap ones, so it is not a load it can serve.
4. **Runs**: one trace (``headway.traces``, 10,000 models) generated at the highest rate
   needed and thinned to each lower one (``Base``: every level replays the same trace), at
   each fraction of capacity in ``--loads``, through the real ``Scheduler`` with simulated
   workers (``headway.sim``), for both policies. Figures leave out the first ``--warmup``
   seconds (every model starts unloaded); whole-trace figures are kept in the JSON.

Writes ``bench/.work/clockwork/simulated.json`` and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import zoo

from headway.control.policy import POLICIES
from headway.sim import ModelProfile, ServerSimulation
from headway.traces import TraceSpec, base_rates, generate, popularity


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--slo-ms", type=float, default=100.0)
    parser.add_argument("--sample", type=int, default=60, help="real models profiled")
    parser.add_argument("--budget-fraction", type=float, default=0.1)
    parser.add_argument("--rpc-ms", type=float, default=0.25, help="one-way RPC delay")
    parser.add_argument("--loads", default="0.5,0.9,1.2", help="fractions of capacity")
    parser.add_argument("--saturate", type=float, default=3.0)
    parser.add_argument("--target", type=float, default=0.999)
    parser.add_argument("--capacity", type=float, default=None, help="skip measuring it")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reprofile", action="store_true")
    parser.add_argument("--out", type=Path, default=zoo.WORK / "simulated.json")
    return parser.parse_args()


def measured_profiles(count: int, refresh: bool) -> dict[str, dict[str, Any]]:
    cache = zoo.WORK / f"profiles-{count}-r{zoo.RECIPE}.json"
    if cache.exists() and not refresh:
        return json.loads(cache.read_text())  # type: ignore[no-any-return]
    root = zoo.ensure(1000, log=common.log)
    names = [f"m{i:05d}" for i in np.linspace(0, 999, count).astype(int)]
    common.log(f"profiling {len(names)} real models in this process")
    profiles = zoo.profile(root, names)
    for name, entry in profiles.items():
        entry["family"] = zoo.catalogue(root)[name]["family"]
    common.log(f"a full gc.collect() here takes {zoo.gc_seconds() * 1e3:.0f} ms")
    cache.write_text(json.dumps(profiles, indent=1))
    return profiles


def assign(measured: dict[str, dict[str, Any]], models: int, seed: int) -> dict[str, ModelProfile]:
    rng = np.random.default_rng(seed)
    table = list(measured.values())
    out = {}
    for index, pick in enumerate(rng.integers(len(table), size=models).tolist()):
        entry = table[pick]
        durations = {int(b): float(s) for b, s in entry["infer_s"].items()}
        out[f"m{index:05d}@1"] = ModelProfile(durations, entry["load_s"], entry["size_mb"], 16)
    return out


class Base:
    """One trace at a high rate; a lower rate keeps each request with probability rate / base
    (the same uniform draw per request at every rate), so every load level replays the same
    trace, thinned: the lower levels are subsets of the higher ones, with the same popularity,
    bursts and diurnal wave. (Traces generated at two rates with one seed differ in their
    bursts and noise: the generator's random stream depends on the rate.)"""

    def __init__(self, args: argparse.Namespace, rate: float) -> None:
        self.spec = TraceSpec(models=args.models, duration=args.duration, rate=rate,
                              interval=args.interval, slo_ms=args.slo_ms, seed=args.seed)  # fmt: skip
        self.trace = generate(self.spec)
        self.draws = np.random.default_rng([args.seed, 1]).random(len(self.trace))

    def at(self, rate: float) -> tuple[np.ndarray, list[str]]:
        if rate > self.spec.rate:
            raise ValueError(f"{rate:.0f} req/s is above the base trace's {self.spec.rate:.0f}")
        keep = self.draws < rate / self.spec.rate
        return self.trace.times[keep], [f"m{m:05d}@1" for m in self.trace.models[keep].tolist()]


def simulate(
    profiles: dict[str, ModelProfile],
    args: argparse.Namespace,
    base: Base,
    rate: float,
    policy: str,
) -> tuple[dict[str, Any], dict[str, Any], float]:
    times, keys = base.at(rate)
    memory = args.budget_fraction * sum(p.size_mb for p in profiles.values()) / args.workers
    chosen = POLICIES[policy]
    started = time.perf_counter()
    # Headway starts from measured profiles (as Clockwork does); the baseline learns
    with ServerSimulation(profiles, workers=args.workers, memory_mb=memory, policy=chosen,
                          rpc_seconds=args.rpc_ms / 1e3, seed_profiles=chosen.profile_batching,
                          seed=args.seed) as sim:  # fmt: skip
        result = sim.run(times, keys, slo=args.slo_ms / 1e3)
    elapsed = time.perf_counter() - started
    measured = result.summary(start=args.warmup)
    measured["offered_rps"] = measured["requests"] / (args.duration - args.warmup)
    whole = result.summary()
    whole["utilisation"] = result.extra["utilisation"]
    common.log(f"  {policy:8} at {rate:8.0f} req/s: attainment {common.pct(measured['slo_attainment'])}"
               f", goodput {measured['goodput_rps']:8.0f}, late {measured['late']}, loads "
               f"{whole['loads']} ({len(times):,} requests in {elapsed:.0f} s)")  # fmt: skip
    return measured, whole, elapsed


def search(
    profiles: dict[str, ModelProfile], args: argparse.Namespace, base: Base, start: float
) -> tuple[float, list[dict[str, Any]]]:
    """The highest offered rate at which Headway meets `args.target`, within about 6%."""
    tried: list[dict[str, Any]] = []

    def good(rate: float) -> bool:
        figures, whole, _ = simulate(profiles, args, base, rate, "headway")
        tried.append({"rate": rate, "measured": figures, "whole": whole})
        return figures["slo_attainment"] >= args.target

    lo, hi, rate = 0.0, float("inf"), start
    while hi == float("inf") or lo == 0.0:
        if good(rate):
            lo, rate = rate, rate * 1.25
        else:
            hi, rate = rate, rate / 1.25
        if (lo and hi != float("inf")) or rate < 1.0:
            break
    for _ in range(2):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if good(mid) else (lo, mid)
    return lo, sorted(tried, key=lambda t: t["rate"])


def mean_b1(profiles: dict[str, ModelProfile], args: argparse.Namespace) -> float:
    """E[batch-1 INFER] over the trace's request mix (each model weighted by its base rate)."""
    spec = TraceSpec(models=args.models, seed=args.seed)
    rates = base_rates(spec, np.random.default_rng(args.seed))  # as `generate` draws them
    b1 = np.array([profiles[f"m{i:05d}@1"].durations[1] for i in range(args.models)])
    return float((rates * b1).sum() / rates.sum())


def table(runs: list[dict[str, Any]], key: str) -> str:
    header = ["load", "offered (req/s): nominal (realised)"]
    for policy in common.POLICIES:
        header += [f"{policy}: {c}" for c in ("attainment", "goodput", "late", "rejected",
                                              "p50/p99/p99.9/max ms", "loads")]  # fmt: skip
    rows = []
    for run in runs:
        realised = run["headway"]["measured"]["offered_rps"]
        row = [f"{run['fraction']:.0%}", f"{run['rate']:,.0f} ({realised:,.0f})"]
        for policy in common.POLICIES:
            s = run[policy][key]
            lat = s["latency_ms"]
            row += [
                common.pct(s["slo_attainment"]), f"{s['goodput_rps']:,.0f}", f"{s['late']:,}",
                f"{s['rejected']:,}",
                "/".join(common.num(lat.get(p), 1) for p in ("p50", "p99", "p99.9", "max")),
                f"{run[policy]['whole']['loads']:,}",
            ]  # fmt: skip
        rows.append(row)
    return common.markdown(header, rows)


def main() -> None:
    args = arguments()
    measured = measured_profiles(args.sample, args.reprofile)
    profiles = assign(measured, args.models, args.seed)
    out: dict[str, Any] = {
        "machine": common.machine(), "command": " ".join(["python", *sys.argv]),
        "args": {k: str(v) for k, v in vars(args).items()}, "profiles": measured,
        "total_memory_mb": sum(p.size_mb for p in profiles.values()),
    }  # fmt: skip
    estimate = args.workers / mean_b1(profiles, args)
    out["capacity_estimate_b1"] = estimate
    fractions = [float(f) for f in args.loads.split(",")]
    top = args.saturate * estimate if args.capacity is None else max(fractions) * args.capacity
    base = Base(args, top)
    out["base_trace"] = {"spec": base.spec.__dict__, "requests": len(base.trace),
                         "popularity": popularity(base.trace)}  # fmt: skip
    common.log(f"base trace: {len(base.trace):,} requests at {top:,.0f} req/s; batch-1 "
               f"estimate {estimate:,.0f} req/s")  # fmt: skip
    if args.capacity is None:
        sat, whole, _ = simulate(profiles, args, base, top, "headway")
        out["saturation"] = {"offered": top, "headway": sat, "whole": whole}
        args.capacity, out["search"] = search(profiles, args, base, 0.5 * estimate)
    out["capacity"] = args.capacity
    common.log(f"capacity = {args.capacity:,.0f} req/s")
    out["runs"] = []
    for fraction in fractions:
        rate = fraction * args.capacity
        run: dict[str, Any] = {"fraction": fraction, "rate": rate}
        for policy in common.POLICIES:
            measured_fig, whole, elapsed = simulate(profiles, args, base, rate, policy)
            run[policy] = {"measured": measured_fig, "whole": whole, "seconds": elapsed}
        out["runs"].append(run)
        args.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"\nAfter the {args.warmup:g} s warm-up (loads: whole trace):\n")
    print(table(out["runs"], "measured"))
    print("\nWhole trace:\n")
    print(table(out["runs"], "whole"))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
