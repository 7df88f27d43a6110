"""A plan served on its own trace: the planner's predicted P99 against the served one.

    python bench/planner/served.py [--rate 250] [--slo-ms 40] [--seconds 20] [--repeats 3]
        [--headroom 0.2] [--profile-seconds 15] [--out bench/.work/planner-served.json]

The steps a user takes, in one sitting, on the cascade flow app of
`bench/planner/accuracy_flow.py` (digits-fast for every query, digits-slow for the rows it is
unsure of, scale factor measured on the rows sent):

1. Profile (`headway profile`'s code): the models alone on a worker (warm, batch sizes
   shuffled in rounds), then, on a `headway serve` of the app, the models and the server's
   own time per query under `--rate` queries/s (`headway profile --frontend cascade
   --under-load RATE`: `under_load_of`).
2. Plan (`headway plan`'s planner): the cheapest configuration on `cpu1` (the server's
   one-thread workers) whose simulated P99 on the trace -- gamma arrivals at `--rate`, CV 1,
   a 1 s warm-up and `--seconds` measured -- meets the SLO less `--headroom`, spread
   durations, the frontend stage in front. Its P99 is the prediction.
3. Serve the plan (`headway serve --config ... --plan plan.yaml`) and replay that same trace
   open loop `--repeats` times (the load generator, `POST /apps/cascade/predict`, latency
   from each query's scheduled send); the P99 of the measured part of each against the
   SLO and the prediction.

Prints one line per run and a JSON summary; writes everything to `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
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
    SIZES,
    WARMUP_S,
    ms,
    prepare,
)

from headway.launcher import ServerProcess  # noqa: E402
from headway.loadgen import arrivals as loadgen_arrivals  # noqa: E402
from headway.loadgen import report  # noqa: E402
from headway.loadgen.client import Target, run  # noqa: E402
from headway.planning.description import profiles_from_rows  # noqa: E402
from headway.planning.envelope import envelope, window_lengths  # noqa: E402
from headway.planning.plan_file import plan_document, write_plan  # noqa: E402
from headway.planning.planner import HEADROOM, Planner  # noqa: E402
from headway.planning.profiler import profile_kind, under_load_of  # noqa: E402
from headway.repository import Repository  # noqa: E402


def sitting(
    rate: float, slo_ms: float, seconds: float, repeats: int, profile_s: float, headroom: float
) -> dict[str, Any]:
    began = time.monotonic()
    root, repo, config, rows, pipeline, draws = prepare("headway-served-")
    out: dict[str, Any] = {
        "rate_qps": rate, "slo_ms": slo_ms, "seconds": seconds, "headroom": headroom,
        "share": pipeline.stages[1].scale, "load_average": [os.getloadavg()[0]],
    }  # fmt: skip
    profiling = ServerProcess(
        repo, state=root / "profiling.db", workers=2, grpc_port=0,
        extra=["--config", str(config)], log=root / "profiling.log",
    )  # fmt: skip
    with profiling:
        assert profiling.process is not None
        target, requests = Target.parse(profiling.url), wire(profiling.url, APP)
        run(target, requests, duration=2.0, warmup=0.0, concurrency=4)  # every stage warm
        idle = profiles_from_rows(
            asyncio.run(profile_kind(Repository.scan(repo), CATALOGUE[KIND], batch_sizes=SIZES))
        )
        found = under_load_of(
            profiling.url, profiling.process.pid, APP, rows,
            {m: p[KIND] for m, p in idle.items()}, rate, seconds=profile_s,
        )  # fmt: skip
    out["frontend_ms"] = round(found.frontend * 1e3, 3)
    out["profiles_ms"] = {
        m: {b: round(t * 1e3, 3) for b, t in p.seconds.items()} for m, p in found.profiles.items()
    }
    out["profiles_p99_ms"] = {
        m: {b: round(t * 1e3, 3) for b, t in p.p99.items()} for m, p in found.profiles.items()
    }
    schedule = loadgen_arrivals.schedule(rate, WARMUP_S + seconds, "gamma", cv=1.0, seed=7)
    loaded = {m: {KIND: p} for m, p in found.profiles.items()}
    started = time.perf_counter()
    planner = Planner(
        pipeline, loaded, CATALOGUE, schedule, slo_ms / 1e3, seed=7, spread=True,
        frontend_seconds=found.frontend, headroom=headroom,
    )  # fmt: skip
    plan = planner.plan()
    planning_s = time.perf_counter() - started
    if plan.config is None:
        out["infeasible"] = plan.reason
        return out
    service = {
        s: planner.profile(s, plan.config[s].hardware).latency(plan.config[s].max_batch)
        for s in pipeline.names
    }
    lengths = window_lengths(max(pipeline.critical_path(service), 1e-3))
    document = plan_document(APP, plan, planner, envelope(schedule, lengths), planning_s)
    write_plan(document, root / "plan.yaml")
    window = schedule >= WARMUP_S
    own = planner.simulate(plan.config, draws=draws[np.arange(len(schedule)) % len(draws)])
    out["plan"] = {
        s: f"{c.hardware} b{c.max_batch} x{c.replicas}" for s, c in plan.config.stages.items()
    }
    out["predicted_p99_ms"] = round(plan.p99 * 1e3, 2)
    out["predicted_window_p99_ms"] = ms(own.latencies[window], 99)
    out["planning_s"] = round(planning_s, 2)
    print(f"# plan {out['plan']}: predicted P99 {out['predicted_p99_ms']} ms", flush=True)
    served = ServerProcess(
        repo, state=root / "served.db", grpc_port=0,
        extra=["--config", str(config), "--plan", str(root / "plan.yaml")],
        log=root / "served.log",
    )  # fmt: skip
    out["runs"] = []
    with served:
        target, requests = Target.parse(served.url), wire(served.url, APP)
        run(target, requests, duration=2.0, warmup=0.0, concurrency=4)
        for _ in range(repeats):
            tally = run(
                target, requests, duration=seconds, warmup=WARMUP_S, schedule=schedule,
                drain_timeout=30.0,
            )  # fmt: skip
            figures = report.summarize(tally, seconds)
            p99 = ms(tally.latencies, 99)
            row = {
                "p50_ms": ms(tally.latencies, 50), "p99_ms": p99,
                "meets_slo": p99 <= slo_ms,
                "predicted_over_measured": round(plan.p99 * 1e3 / p99 - 1, 3),
                "window_over_measured": round(out["predicted_window_p99_ms"] / p99 - 1, 3),
                "not_ok": figures["rejected"] + figures["errors"] + figures["timeouts"],
                "send_lateness_p99_ms": figures["send_lateness_ms"]["p99"],
                "load_average_1m": round(os.getloadavg()[0], 2),
            }  # fmt: skip
            out["runs"].append(row)
            print(json.dumps(row), flush=True)
    out["load_average"].append(os.getloadavg()[0])
    out["total_s"] = round(time.monotonic() - began, 1)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=250.0, help="queries/s of the trace")
    parser.add_argument("--slo-ms", type=float, default=40.0)
    parser.add_argument("--seconds", type=float, default=20.0, help="each measured run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--headroom", type=float, default=HEADROOM)
    parser.add_argument("--profile-seconds", type=float, default=15.0)
    parser.add_argument("--out", type=Path, default=Path("bench/.work/planner-served.json"))
    args = parser.parse_args(argv)
    found = sitting(
        args.rate, args.slo_ms, args.seconds, args.repeats, args.profile_seconds, args.headroom
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1))
    print(json.dumps({k: v for k, v in found.items() if k != "profiles_ms"}))


if __name__ == "__main__":
    main()
