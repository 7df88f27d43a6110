"""Estimator accuracy in one short sitting: the cascade flow app's real P99 at three loads,
each load measured several times, against the estimate from profiles taken in that sitting.

    python bench/planner/accuracy_sitting.py [--repeats 3] [--seconds 15]
        [--profile-seconds 15] [--capacity Q] [--out bench/.work/planner-accuracy-sitting.json]

Sized for a few minutes on a quiet machine (the defaults fit in 7 on 2 cores). One
`headway serve` of the cascade flow app (`accuracy_flow.prepare`: digits-fast for every query,
digits-slow for the rows it is unsure of; one worker and max batch 16 each), then:

1. Idle: the models alone (`headway profile`'s code), the frontend (`frontend_of`, as
   `headway profile --frontend`), and the CPU a query takes of all the processes (the
   server's loop, its workers, the client: the kernel's run times, queries sent one at a
   time). The loads are shares of the least capacity (each stage's, and the machine's cores
   over that CPU: the stages share the cores), or of `--capacity`.
2. Per load, a profiling run at its rate (`--profile-seconds`, its own arrivals:
   `under_load_of`, as `headway profile --frontend APP --under-load QPS`), then `--repeats`
   measured runs of one trace (gamma arrivals, CV 1, 1 s warm-up, `--seconds` measured): the
   real P99 of each, so its spread at one load is seen.
3. With the server stopped, that trace through `Planner.simulate` (as `headway plan
   --simulate`) with the profiles under load, each query reaching the stages its body
   reached in the server; variants: the product's (`--spread`: each size's p99 from the
   shape of its run times under the load, its batches' persistence from the statistics
   read every half second), the same with each batch drawn independently, with the cruder
   tail from the worker's
   waits for a core, with each batch size at its own mean however few times it ran (no
   prior), each batch at its mean, and the idle profiles (the estimate without a
   run under load); and a diagnostic per measured run, the model given that run's own times
   (its batch statistics, run-time histograms and loop time): what is left is the model's.

Prints a table (load, real P99 of each repeat, simulated P99, error against the repeats'
median and range) and writes the rows as JSON to `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.flows import wire  # noqa: E402
from bench.planner.accuracy_flow import (  # noqa: E402
    APP,
    CATALOGUE,
    KIND,
    LOADS,
    SIZES,
    WARMUP_S,
    Server,
    estimate,
    loop_seconds,
    ms,
    per_query,
    prepare,
    stage_figures,
)

from headway.errors import ConfigError  # noqa: E402
from headway.launcher import ServerProcess  # noqa: E402
from headway.loadgen import arrivals as loadgen_arrivals  # noqa: E402
from headway.loadgen import report  # noqa: E402
from headway.loadgen.client import Target, run  # noqa: E402
from headway.planning import Configuration, StageConfig  # noqa: E402
from headway.planning.description import profiles_from_rows  # noqa: E402
from headway.planning.in_place import (  # noqa: E402
    WAIT_TAIL,
    batch_seconds,
    between,
    lag1,
    loaded_profiles,
    persistence_in,
    shapes_between,
    waits_per_action,
    window_means,
)
from headway.planning.pipeline import LatencyProfile  # noqa: E402
from headway.planning.profiler import (  # noqa: E402
    StatsWindows,
    frontend_of,
    profile_kind,
    under_load_of,
)
from headway.repository import Repository  # noqa: E402


def sitting(
    repeats: int, seconds: float, profile_seconds: float, capacity: float | None
) -> dict[str, Any]:
    """Measure every load (profiling run, then `repeats` runs of one trace) on one server,
    then estimate each trace; returns the rows."""
    began = time.monotonic()
    root, repo, config, rows, pipeline, bodies = prepare("headway-accuracy-sitting-")
    fast, slow = pipeline.stages
    out: dict[str, Any] = {"share": slow.scale, "seconds": seconds, "repeats": repeats}
    measured_loads = []
    process = ServerProcess(
        repo, state=root / "state.db", workers=2, grpc_port=0,
        extra=["--config", str(config)], log=root / "server.log",
    )  # fmt: skip
    with process:
        assert process.process is not None
        pid = process.process.pid
        server = Server(process.url, pid)
        target, requests = Target.parse(process.url), wire(process.url, APP)
        run(target, requests, duration=2.0, warmup=0.0, concurrency=4)  # every stage measured
        served_as = server.served_as()
        measured = asyncio.run(
            profile_kind(Repository.scan(repo), CATALOGUE[KIND], batch_sizes=SIZES)
        )
        idle = profiles_from_rows(measured)
        frontend = frontend_of(process.url, APP, rows, seconds=3.0, warmup=0.5).mean
        # the CPU a query takes of every process (the loop, the workers, this client), sent
        # one at a time: the cores run out before any stage does once the stages share them
        sched0, client0 = server.sched(), time.process_time()
        alone = run(target, requests, duration=2.0, warmup=0.0, concurrency=1)
        sched1, client1 = server.sched(), time.process_time()
        ran = sum(sched1[k][0] - sched0[k][0] for k in sched1 if k in sched0)
        cpu = (ran + client1 - client0) / max(alone.ok, 1)
        capacities = {
            "frontend": 1 / frontend,
            "fast": idle[fast.model][KIND].throughput(1),
            "forest": idle[slow.model][KIND].throughput(1) / slow.scale,
            "cores": len(os.sched_getaffinity(0)) / cpu,
        }
        out["capacities_qps"] = {k: round(v, 1) for k, v in capacities.items()}
        out["cpu_per_query_ms"] = round(cpu * 1e3, 3)
        if capacity is None:
            capacity = min(capacities.values())
        out["capacity_qps"] = round(capacity, 1)
        out["idle_frontend_ms"] = round(frontend * 1e3, 3)
        print(f"# {time.monotonic() - began:.0f} s: idle measured, capacities {capacities}")
        for load in LOADS:
            rate = load * capacity
            on_kind = {m: p[KIND] for m, p in idle.items()}
            stats0 = server.stats()
            try:
                found = under_load_of(
                    process.url, pid, APP, rows, on_kind, rate, seconds=profile_seconds
                )
            except ConfigError as error:  # keep the other loads of the sitting
                print(f"# load {load}: no profile under load: {error}", flush=True)
                continue
            raw = loaded_profiles(  # each size at its own mean, however few times it ran
                on_kind, stats0, server.stats(), served_as, prior=0,
                waits={served_as.get(m, m): w for m, w in found.waits.items()},
                sigmas={served_as.get(m, m): v for m, v in found.sigmas.items()},
            )  # fmt: skip
            schedule = loadgen_arrivals.schedule(rate, WARMUP_S + seconds, "gamma", cv=1.0, seed=7)
            runs = []
            for _ in range(repeats):
                before = server.stats(), server.metrics(), server.sched()
                client = time.process_time()
                with StatsWindows(process.url) as polled:
                    tally = run(
                        target, requests, duration=seconds, warmup=WARMUP_S,
                        schedule=schedule, drain_timeout=30.0,
                    )  # fmt: skip
                client = time.process_time() - client
                after = server.stats(), server.metrics(), server.sched()
                figures = report.summarize(tally, seconds)
                runs.append({
                    "p50_ms": ms(tally.latencies, 50), "p99_ms": ms(tally.latencies, 99),
                    "not_ok": figures["rejected"] + figures["errors"] + figures["timeouts"],
                    "send_lateness_p99_ms": figures["send_lateness_ms"]["p99"],
                    "load_average_1m": os.getloadavg()[0],
                    "stages": stage_figures(before[0], after[0]),
                    # ms run and waited for a core per query: the loop, each worker; the client
                    "sched_ms_per_query": per_query(before[2], after[2], len(schedule)),
                    "client_cpu_ms_per_query": round(client / len(schedule) * 1e3, 3),
                    "burstiness": burstiness(polled),
                    "own": own_times(on_kind, served_as, before, after, len(schedule)),
                })  # fmt: skip
            print(f"# {time.monotonic() - began:.0f} s: load {load} measured", flush=True)
            measured_loads.append((load, rate, schedule, found, raw, runs))
    out["measured_s"] = round(time.monotonic() - began, 1)
    config_ = Configuration({s.name: StageConfig(KIND, 16, 1) for s in pipeline.stages})
    out["loads"] = []
    for load, rate, schedule, found, raw, runs in measured_loads:
        window = schedule >= WARMUP_S
        own = bodies[np.arange(len(schedule)) % len(bodies)]
        loaded = {m: {KIND: p} for m, p in found.profiles.items()}
        waited = {  # the tail before the fitted shape: mean + (ln 100 - 1) x the worker's wait
            m: {KIND: LatencyProfile(p.seconds, {b: t + WAIT_TAIL * found.waits.get(m, 0.0)
                                                 for b, t in p.seconds.items()})}
            for m, p in found.profiles.items()
        }  # fmt: skip
        variants = {  # name: (profiles, frontend seconds, draws, spread)
            "loaded": (loaded, found.frontend, own, True),
            "loaded_waits": (waited, found.frontend, own, True),
            "loaded_raw": ({m: {KIND: p} for m, p in raw.items()}, found.frontend, own, True),
            "loaded_independent": (  # each batch drawn independently (before the persistence)
                {m: {KIND: replace(p, persistence=0.0)} for m, p in found.profiles.items()},
                found.frontend,
                own,
                True,
            ),
            "loaded_means": (loaded, found.frontend, own, False),
            "idle": (idle, frontend, None, True),
        }
        for r in runs:  # a diagnostic: each run's own times, the model given them exactly
            profiles, front = r.pop("own")
            latencies, batch = estimate(pipeline, config_, profiles, schedule, front, True, own)
            r["sim_own_p99_ms"] = ms(latencies[window], 99)
            r["sim_own_rows_per_action"] = {k: round(v, 3) for k, v in batch.items()}
            r["own_frontend_ms"] = round(front * 1e3, 3)
            r["own_profiles_ms"] = {
                m: {b: round(t * 1e3, 3) for b, t in p[KIND].seconds.items() if b in (1, 2, 4)}
                for m, p in profiles.items()
            }
            r["own_p99_ms"] = {
                m: round(p[KIND].tail(1) or 0.0, 6) * 1e3 for m, p in profiles.items()
            }
        real = [r["p99_ms"] for r in runs]
        row: dict[str, Any] = {
            "load": load, "rate_qps": round(rate, 1), "queries": int(window.sum()),
            "runs": runs, "real_p99_median_ms": round(float(np.median(real)), 2),
            "loaded_frontend_ms": round(found.frontend * 1e3, 3),
            "sigmas": {m: round(v, 3) for m, v in found.sigmas.items()},
            "persistence": {m: p.persistence for m, p in found.profiles.items()},
            "waits_ms": {m: round(v * 1e3, 3) for m, v in found.waits.items()},
            "loaded_profiles_ms": {
                m: {b: round(s * 1e3, 3) for b, s in p.seconds.items() if b in (1, 2, 4)}
                for m, p in found.profiles.items()
            },
        }  # fmt: skip
        for name, (profiles, front, draws, spread) in variants.items():
            latencies, _ = estimate(pipeline, config_, profiles, schedule, front, spread, draws)
            p99 = ms(latencies[window], 99)
            row[f"sim_{name}_p99_ms"] = p99
            row[f"sim_{name}_error"] = round(p99 / row["real_p99_median_ms"] - 1, 3)
            row[f"sim_{name}_error_range"] = [
                round(p99 / max(real) - 1, 3),
                round(p99 / min(real) - 1, 3),
            ]
        out["loads"].append(row)
    out["total_s"] = round(time.monotonic() - began, 1)
    return out


def burstiness(windows: StatsWindows) -> dict[str, dict[str, float]]:
    """Per served model, its mean time per action in each window between the run's reads:
    their coefficient of variation, their lag-1 correlation (about 0 when each batch's time is
    independent of the last's) and the per-batch persistence the product takes from it."""
    out = {}
    for name in windows.reads[-1] if windows.reads else {}:
        means, per_window = window_means(windows.reads, name)
        correlation = lag1(means)
        if correlation is None:
            continue
        out[name] = {
            "windows": len(means), "per_window": round(per_window, 1),
            "cv": round(float(means.std() / means.mean()), 3),
            "lag1": round(correlation, 3),
            "persistence": round(persistence_in(windows.reads, name), 3),
        }  # fmt: skip
    return out


Reads = tuple[dict[str, Any], str, dict[str, tuple[float, float]]]


def own_times(
    idle: dict[str, LatencyProfile],
    served_as: dict[str, str],
    before: Reads,
    after: Reads,
    queries: int,
) -> tuple[dict[str, dict[str, LatencyProfile]], float]:
    """The profiles and loop time per query of one measured run, from the server's reads
    around it (stats, /metrics, the kernel's accounting), as `under_load_of` takes them."""
    workers = {
        int(k): (after[2][k][0] - before[2][k][0], after[2][k][1] - before[2][k][1])
        for k in after[2]
        if k != "loop" and k in before[2]
    }
    waits = waits_per_action(between(batch_seconds(before[0]), batch_seconds(after[0])), workers)
    profiles = loaded_profiles(
        idle, before[0], after[0], served_as, waits=waits,
        sigmas=shapes_between(before[1], after[1]),
    )  # fmt: skip
    return {m: {KIND: p} for m, p in profiles.items()}, loop_seconds(before[2], after[2], queries)


def table(found: dict[str, Any]) -> str:
    """The sitting as a markdown table."""
    lines = [
        f"capacity {found['capacity_qps']} queries/s (of {found['capacities_qps']}; "
        f"{found['cpu_per_query_ms']} ms of CPU per query), forest share {found['share']:.3f}, "
        f"{found['repeats']} x {found['seconds']:.0f} s per load, {found['total_s']:.0f} s in all",
        "",
        "| load | queries/s | real P99 per repeat | median | send lateness p99 | load avg "
        "| simulated P99 (`--spread`) | error (range) | batches independent | error "
        "| tails from waits | error "
        "| sizes at their own means | error | means | error "
        "| idle profiles | error | each run's own times (diagnostic) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in found["loads"]:
        real = ", ".join(f"{r['p99_ms']:.1f}" for r in row["runs"])
        loads = "-".join(f"{r['load_average_1m']:.1f}" for r in row["runs"])
        late = ", ".join(f"{r['send_lateness_p99_ms']:.1f}" for r in row["runs"])
        own = ", ".join(
            f"{r['sim_own_p99_ms']:.1f} ({r['sim_own_p99_ms'] / r['p99_ms'] - 1:+.0%})"
            for r in row["runs"]
        )
        low, high = row["sim_loaded_error_range"]
        lines.append(
            f"| {row['load']} | {row['rate_qps']} | {real} ms | {row['real_p99_median_ms']:.1f} ms "
            f"| {late} ms | {loads} | {row['sim_loaded_p99_ms']:.1f} ms | {row['sim_loaded_error']:+.0%} "
            f"({low:+.0%} to {high:+.0%}) | {row['sim_loaded_independent_p99_ms']:.1f} ms "
            f"| {row['sim_loaded_independent_error']:+.0%} | {row['sim_loaded_waits_p99_ms']:.1f} ms "
            f"| {row['sim_loaded_waits_error']:+.0%} | {row['sim_loaded_raw_p99_ms']:.1f} ms "
            f"| {row['sim_loaded_raw_error']:+.0%} | {row['sim_loaded_means_p99_ms']:.1f} ms "
            f"| {row['sim_loaded_means_error']:+.0%} | {row['sim_idle_p99_ms']:.1f} ms "
            f"| {row['sim_idle_error']:+.0%} | {own} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per load")
    parser.add_argument("--seconds", type=float, default=15.0, help="each measured run")
    parser.add_argument("--profile-seconds", type=float, default=15.0)
    parser.add_argument("--capacity", type=float, default=None, help="queries/s of load 1.0")
    parser.add_argument(
        "--out", type=Path, default=Path("bench/.work/planner-accuracy-sitting.json")
    )
    args = parser.parse_args(argv)
    found = sitting(args.repeats, args.seconds, args.profile_seconds, args.capacity)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1))
    print(table(found))


if __name__ == "__main__":
    main()
