"""Estimator accuracy: simulated vs measured P99 of a two-stage cascade at three loads.

    python bench/planner/accuracy.py [--seconds 20] [--flow] [--out bench/.work/planner-accuracy.json]

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

With `--flow`, the pipeline is the cascade *flow app* (`examples/flows/cascade.py`: its
digits-fast and digits-slow, one worker and max batch 16 each) served by `headway serve` over
HTTP, and the load is the load generator's (`headway.loadgen`, as `headway bench` sends it)
against `POST /apps/cascade/predict`, open loop, latency from each query's scheduled send.
The planner's pipeline is the compiled flow's (`pipeline_from_flow`), its scale factor
measured on the bodies the load generator sends (`measure_scales`). Before each load, with the
server idle, the product measures what it plans with: the models (`headway profile`'s code)
and the server's own time per query outside them (`headway profile --frontend`'s code,
`frontend_of`: queries one at a time, the client's wait less the models' latency on
`/metrics`). The estimate is `headway plan --simulate`'s (`Planner.simulate`): the pipeline
behind a frontend stage of that time per query, each batch at its mean, and with `--spread`;
the models alone are kept for comparison. The loads are shares of the least capacity of the
three (the frontend's 1 / its time, each model's batch-1 throughput over its share), from the
first measurement. `--rounds N` repeats the three loads N times in one sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import joblib
import numpy as np
import yaml
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench.flows and the example flows, as bench/flows.py loads them

from bench.flows import wire  # noqa: E402
from tests.flows.examples import flow, inputs, models  # noqa: E402

from headway.control.controller import Controller  # noqa: E402
from headway.flows import LocalServices  # noqa: E402
from headway.launcher import ServerProcess  # noqa: E402
from headway.loadgen import arrivals as loadgen_arrivals  # noqa: E402
from headway.loadgen import report  # noqa: E402
from headway.loadgen.client import Target, run  # noqa: E402
from headway.planning import (  # noqa: E402
    Catalogue,
    Configuration,
    LatencyProfile,
    Pipeline,
    Planner,
    Stage,
    StageConfig,
    simulate,
)
from headway.planning.description import profiles_from_rows  # noqa: E402
from headway.planning.from_flow import measure_scales, pipeline_from_flow  # noqa: E402
from headway.planning.pipeline import Hardware  # noqa: E402
from headway.planning.profiler import frontend_of, profile_kind  # noqa: E402
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
                await controller.infer(model, {"input-0": rows[:1]}, timeout=10)
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.2

        async def query(i: int) -> None:
            row = {"input-0": rows[i % len(rows)][None, :]}
            await controller.infer("digits-fast", row, timeout=30)
            if unsure[i % len(rows)]:
                await controller.infer("digits-forest", row, timeout=30)
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


FLOW_APP = "cascade"
FLOW_MODELS = ("digits-fast", "digits-slow")
FLOW_SLO_MS = 60_000.0  # far: no query gets the flow's default answer for missing its deadline
WARMUP_S = 1.0


def build_flow(root: Path) -> tuple[Path, Path]:
    """The cascade's two models (max batch 16, one replica each) and a config serving the
    example flow as an app; returns (repository folder, config file)."""
    repo = root / "repo"
    models.build(repo)
    for name in os.listdir(repo):
        if name not in FLOW_MODELS:
            shutil.rmtree(repo / name)
            continue
        settings = {"framework": "sklearn", "max_batch_size": 16, "replicas": 1}
        (repo / name / "model.yaml").write_text(yaml.safe_dump(settings))
    source = ROOT / "examples" / "flows" / "cascade.py"
    apps = {FLOW_APP: {"flow": f"{source}:flow", "slo_ms": FLOW_SLO_MS}}
    config = root / "headway.yaml"
    config.write_text(yaml.safe_dump({"apps": apps}))
    return repo, config


def ms(values: Any, q: float) -> float:
    return round(float(np.percentile(values, q)) * 1e3, 2)


def planned_estimate(
    pipeline: Pipeline,
    config: Configuration,
    profiles: Any,
    schedule: np.ndarray,
    frontend: float,
    spread: bool,
) -> np.ndarray:
    """`headway plan --simulate`'s latencies for this replay (`frontend` seconds per query)."""
    planner = Planner(
        pipeline, profiles, CATALOGUE, schedule, FLOW_SLO_MS / 1e3, seed=7, spread=spread,
        frontend_seconds=frontend,
    )  # fmt: skip
    return planner.simulate(config).latencies


def model_means(url: str) -> dict[str, tuple[float, float, float, float]]:
    """Per model on the server: (compute seconds, INFER actions, rows, queued seconds) so far."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, list[float]] = {}
    wanted = {
        "headway_compute_seconds_sum": 0, "headway_compute_seconds_count": 1,
        "headway_batch_size_sum": 2, "headway_queue_seconds_sum": 3,
    }  # fmt: skip
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted and "model" in sample.labels:
                row = sums.setdefault(sample.labels["model"], [0.0] * 4)
                row[wanted[sample.name]] = sample.value
    return {m: (v[0], v[1], v[2], v[3]) for m, v in sums.items()}


def under_load(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per model, over a load: the mean INFER time, rows per INFER and queue time per row."""
    out = {}
    for model, (compute, actions, rows, queued) in after.items():
        c0, a0, r0, q0 = before.get(model, (0.0, 0.0, 0.0, 0.0))
        if actions > a0:
            out[model] = {
                "infer_ms": round((compute - c0) / (actions - a0) * 1e3, 3),
                "batch": round((rows - r0) / (actions - a0), 2),
                "queued_ms": round((queued - q0) / max(rows - r0, 1) * 1e3, 3),
            }
    return out


def slowdowns(
    url: str, alone: dict[str, dict[str, float]], loaded: dict[str, dict[str, float]]
) -> dict[str, float]:
    """Per repository model: its stage's mean INFER time under load over that on the idle
    server (the stage model that calls it, from the app's description)."""
    stages = httpx.get(f"{url}/apps/{FLOW_APP}", timeout=10).json()["flow"]["stages"]
    out = {}
    for stage in stages:
        if stage["models"] and stage["served_as"]:
            name = stage["served_as"][0]
            if name in alone and name in loaded:
                out[stage["models"][0]] = loaded[name]["infer_ms"] / alone[name]["infer_ms"]
    return out


def scaled(profile: LatencyProfile, factor: float) -> LatencyProfile:
    return LatencyProfile(
        {b: t * factor for b, t in profile.seconds.items()},
        {b: t * factor for b, t in profile.p99.items()},
    )


def server_cpu(url: str) -> float:
    """The server process's CPU seconds so far (its `/metrics`; 0 from a tree older than
    `process_cpu`, which this script serves for side-by-side runs)."""
    try:
        from headway.planning.frontend import process_cpu
    except ImportError:
        return 0.0
    return process_cpu(httpx.get(f"{url}/metrics", timeout=10).text) or 0.0


def flow_accuracy(seconds: float, rounds: int, capacity: float | None = None) -> dict[str, Any]:
    """Simulated vs measured P99 of the cascade flow app over HTTP, at each of `LOADS`, for
    `rounds` rounds in one sitting (one server); `capacity`: queries/s the loads are shares of
    (default: the first measurement's)."""
    root = Path(tempfile.mkdtemp(prefix="headway-accuracy-flow-"))
    repo, config = build_flow(root)
    compiled = flow(FLOW_APP).compile()
    rows = inputs(FLOW_APP, 64)  # the bodies `wire` rotates through
    scales = measure_scales(compiled, rows, LocalServices(repository=repo))
    pipeline = pipeline_from_flow(compiled, scales)
    config_ = Configuration({s.name: StageConfig("cpu1", 16, 1) for s in pipeline.stages})
    fast, slow = pipeline.stages
    report_: dict[str, Any] = {"share": slow.scale, "seconds": seconds, "loads": []}
    server = ServerProcess(
        repo, state=root / "state.db", workers=2, grpc_port=0,
        extra=["--config", str(config)], log=root / "server.log",
    )  # fmt: skip
    report_["capacity_qps"] = capacity
    with server:
        target, requests = Target.parse(server.url), wire(server.url, FLOW_APP)
        run(target, requests, duration=2.0, warmup=0.0, concurrency=4)  # every stage measured
        for round_ in range(rounds):
            for load in LOADS:
                # the server idle: the models alone (`headway profile`), then the server's own
                # time per query (`headway profile --frontend`), as the product measures them
                measured = asyncio.run(
                    profile_kind(Repository.scan(repo), Hardware("cpu1", 0.05), batch_sizes=SIZES)
                )
                profiles = profiles_from_rows(measured)
                idle = model_means(server.url)
                frontend = frontend_of(server.url, FLOW_APP, rows, seconds=3.0, warmup=0.5).mean
                alone = under_load(idle, model_means(server.url))  # the stages, idle server
                if capacity is None:  # the loads are shares of the first measured capacity
                    capacity = min(
                        1 / frontend,
                        profiles[fast.model]["cpu1"].throughput(1),
                        profiles[slow.model]["cpu1"].throughput(1) / slow.scale,
                    )
                    report_["capacity_qps"] = capacity
                rate = load * capacity
                schedule = loadgen_arrivals.schedule(
                    rate, WARMUP_S + seconds, "gamma", cv=1.0, seed=7
                )
                cpu_before, models_before = server_cpu(server.url), model_means(server.url)
                tally = run(
                    target, requests, duration=seconds, warmup=WARMUP_S, schedule=schedule,
                    drain_timeout=30.0,
                )  # fmt: skip
                cpu_used = server_cpu(server.url) - cpu_before
                loaded = under_load(models_before, model_means(server.url))
                window = schedule >= WARMUP_S  # the load generator's window: warm-up left out

                replay_ = (pipeline, config_, profiles, schedule)
                models_only = planned_estimate(*replay_, 0.0, False)[window]
                fronted = planned_estimate(*replay_, frontend, False)[window]
                fronted_spread = planned_estimate(*replay_, frontend, True)[window]
                # a diagnostic, not the product's: each model's profile scaled by how much
                # slower its stage's INFER ran under this load than on the idle server
                slowdown = slowdowns(server.url, alone, loaded)
                slowed = {
                    m: {"cpu1": scaled(p["cpu1"], slowdown.get(m, 1.0))}
                    for m, p in profiles.items()
                }
                as_loaded = planned_estimate(pipeline, config_, slowed, schedule, frontend, False)
                as_loaded = as_loaded[window]
                figures = report.summarize(tally, seconds)
                row: dict[str, Any] = {
                    "round": round_,
                    "load": load,
                    "rate_qps": round(rate, 1),
                    "queries": int(window.sum()),
                    "ok": figures["ok"],
                    "not_ok": figures["rejected"] + figures["errors"] + figures["timeouts"],
                    "real_p50_ms": ms(tally.latencies, 50),
                    "real_p99_ms": ms(tally.latencies, 99),
                    "send_lateness_p99_ms": figures["send_lateness_ms"]["p99"],
                    "frontend_ms": round(frontend * 1e3, 3),
                    # the server process's CPU under this load (warm-up included): per query
                    # sent, and its share of one core
                    "server_cpu_per_query_ms": round(cpu_used / len(schedule) * 1e3, 3),
                    "server_cpu_busy": round(cpu_used / (WARMUP_S + seconds), 3),
                    "sim_models_p99_ms": ms(models_only, 99),
                    "sim_p50_ms": ms(fronted, 50),
                    "sim_p99_ms": ms(fronted, 99),
                    "sim_spread_p50_ms": ms(fronted_spread, 50),
                    "sim_spread_p99_ms": ms(fronted_spread, 99),
                    "slowdown": {m: round(f, 3) for m, f in slowdown.items()},
                    "sim_slowed_p50_ms": ms(as_loaded, 50),
                    "sim_slowed_p99_ms": ms(as_loaded, 99),
                    "load_average_1m": os.getloadavg()[0],
                    "under_load": loaded,
                    "profiles_ms": {
                        m: {b: round(s * 1e3, 3) for b, s in p["cpu1"].seconds.items()}
                        for m, p in profiles.items()
                    },
                }
                for key in (
                    "sim_models_p99_ms", "sim_p99_ms", "sim_spread_p99_ms", "sim_slowed_p99_ms"
                ):  # fmt: skip
                    row[key.replace("_ms", "_error")] = round(row[key] / row["real_p99_ms"] - 1, 3)
                print(json.dumps({k: v for k, v in row.items() if k != "profiles_ms"}), flush=True)
                print("  profiles:", json.dumps(row["profiles_ms"]), flush=True)
                report_["loads"].append(row)
    return report_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--flow", action="store_true", help="the cascade flow app over HTTP on `headway serve`"
    )
    parser.add_argument("--rounds", type=int, default=1, help="--flow: rounds of the 3 loads")
    parser.add_argument(
        "--capacity", type=float, default=None,
        help="--flow: queries/s the loads are shares of (default: the first measurement's)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.flow:
        out = args.out or Path("bench/.work/planner-accuracy-flow.json")
        report_ = flow_accuracy(args.seconds, args.rounds, args.capacity)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report_, indent=1))
        return
    args.out = args.out or Path("bench/.work/planner-accuracy.json")
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
