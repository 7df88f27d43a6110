"""Estimator accuracy over HTTP: simulated vs measured P99 of the cascade flow app at three loads.

    python bench/planner/accuracy_flow.py [--seconds 20] [--rounds 1] [--capacity Q]
        [--profile-seconds 20] [--out bench/.work/planner-accuracy-flow.json]

(`python bench/planner/accuracy.py --flow` runs the same.) The pipeline is the cascade *flow
app* (`examples/flows/cascade.py`: digits-fast for every query, digits-slow for the rows it
is unsure of; one worker and max batch 16 each) served by `headway serve` over HTTP; the load
is the load generator's (`headway.loadgen`, as `headway bench` sends it) against
`POST /apps/cascade/predict`, open loop, gamma arrivals (CV 1), latency from each query's
scheduled send. The planner's pipeline is the compiled flow's (`pipeline_from_flow`), its scale
factor measured on the bodies the load generator sends (`measure_scales`).

For each load:

1. With the server idle, the product's measurements: the models alone (`headway profile`'s
   code) and the server's own time per query outside them (`frontend_of`, as `headway profile
   --frontend`).
2. A profiling run at the load's rate (`--profile-seconds`, its own arrivals;
   `headway.planning.profiler.under_load_of`): the models' times per batch size as the server
   saw them under it (`GET /v2/models/stats` before and after), and the event loop's wall
   time per query (its run and its waits for a core, `/proc/PID/schedstat`).
3. The measured run (`--seconds`, after a 1 s warm-up): the real P99, and what each stage did
   (batches formed, time per batch, hop, queue per row) for comparison with the simulation's.
4. The estimates (`Planner.simulate`, as `headway plan --simulate`), each behind a frontend
   stage, with `--spread` and with each batch at its mean: `idle`, the idle profiles and
   frontend time with random reach draws (the product's estimate without a run under load);
   `loaded`, the profiles and the loop's time under the profiling run, each query reaching
   the stages its body reaches in the server (the load generator rotates through 64 bodies;
   `own_draws`); `loaded_models` and `loaded_random`, one term at a time; and a diagnostic,
   `same_run`, with the measured run's own times (what the model does given them exactly).

Loads are shares of the least capacity of the three (the frontend's 1 / its time, each model's
batch-1 throughput over its share) from the first measurement, or of `--capacity`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench.flows and the example flows, as bench/flows.py loads them

from bench.flows import wire  # noqa: E402
from tests.flows.examples import flow, inputs, models  # noqa: E402

from headway.flows import LocalServices  # noqa: E402
from headway.launcher import ServerProcess  # noqa: E402
from headway.loadgen import arrivals as loadgen_arrivals  # noqa: E402
from headway.loadgen import report  # noqa: E402
from headway.loadgen.client import Target, run  # noqa: E402
from headway.planning import Catalogue, Configuration, Pipeline, Planner, StageConfig  # noqa: E402
from headway.planning.description import profiles_from_rows  # noqa: E402
from headway.planning.from_flow import measure_scales, pipeline_from_flow  # noqa: E402
from headway.planning.frontend import process_cpu  # noqa: E402
from headway.planning.in_place import (  # noqa: E402
    batch_seconds,
    between,
    loaded_profiles,
    waits_per_action,
)
from headway.planning.pipeline import Hardware, Profiles  # noqa: E402
from headway.planning.profiler import frontend_of, profile_kind, under_load_of  # noqa: E402
from headway.planning.schedstat import children, scheduled  # noqa: E402
from headway.repository import Repository  # noqa: E402

SIZES = (1, 2, 4, 8, 16)
KIND = "cpu1"  # the server's workers run one thread each, as the profiler's cpu1 worker does
CATALOGUE = Catalogue({KIND: Hardware(KIND, 0.05)})
LOADS = (0.2, 0.4, 0.6)
APP = "cascade"
MODELS = ("digits-fast", "digits-slow")
SLO_MS = 60_000.0  # far: no query gets the flow's default answer for missing its deadline
WARMUP_S = 1.0


def build(root: Path) -> tuple[Path, Path]:
    """The cascade's two models (max batch 16, one replica each) and a config serving the
    example flow as an app; returns (repository folder, config file)."""
    repo = root / "repo"
    models.build(repo)
    for name in os.listdir(repo):
        if name not in MODELS:
            shutil.rmtree(repo / name)
            continue
        settings = {"framework": "sklearn", "max_batch_size": 16, "replicas": 1}
        (repo / name / "model.yaml").write_text(yaml.safe_dump(settings))
    shutil.copy(ROOT / "examples" / "flows" / "cascade.py", root)  # beside the config
    config = root / "headway.yaml"
    config.write_text(
        yaml.safe_dump({"apps": {APP: {"flow": "cascade.py:flow", "slo_ms": SLO_MS}}})
    )
    return repo, config


def ms(values: Any, q: float) -> float:
    return round(float(np.percentile(values, q)) * 1e3, 2)


class Server:
    """The served app's reads: its stats, its process's CPU, its stage models."""

    def __init__(self, url: str, pid: int) -> None:
        self.url = url
        self.pid = pid

    def sched(self) -> dict[str, tuple[float, float]]:
        """(run, wait-for-a-core) seconds so far of the server's loop thread and each worker."""
        found = {"loop": scheduled(self.pid)}
        for child in children(self.pid):
            found[str(child)] = scheduled(child)
        return found

    def stats(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.url}/v2/models/stats", timeout=10).json()
        return body

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def cpu(self) -> float:
        return process_cpu(self.metrics()) or 0.0

    def served_as(self) -> dict[str, str]:
        """Repository model -> the stage model that runs it."""
        stages = httpx.get(f"{self.url}/apps/{APP}", timeout=10).json()["flow"]["stages"]
        return {s["models"][0]: s["served_as"][0] for s in stages if s["models"] and s["served_as"]}


def stage_figures(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per served model between two stats reads: INFER actions, rows per action, mean time per
    action (dispatch to answer) and of its hop (the round trip less the run), queue per row."""
    ran = between(batch_seconds(before), batch_seconds(after))
    queued = {
        m["name"]: (m["inference_stats"]["queue"]["count"], m["inference_stats"]["queue"]["ns"])
        for m in after["model_stats"]
    }
    queued0 = {
        m["name"]: (m["inference_stats"]["queue"]["count"], m["inference_stats"]["queue"]["ns"])
        for m in before["model_stats"]
    }
    hops = _hops(before, after)
    out = {}
    for name, sizes in ran.items():
        actions = sum(c for c, _ in sizes.values())
        if not actions:
            continue
        rows = sum(size * c for size, (c, _) in sizes.items())
        (n1, q1), (n0, q0) = queued[name], queued0.get(name, (0, 0))
        out[name] = {
            "actions": actions,
            "rows_per_action": round(rows / actions, 3),
            "ms_per_action": round(sum(s for _, s in sizes.values()) / actions * 1e3, 3),
            "hop_ms": round(hops.get(name, 0.0) * 1e3, 3),
            "queued_ms_per_row": round((q1 - q0) / max(n1 - n0, 1) / 1e6, 3),
            "by_size_ms": {b: round(s / c * 1e3, 3) for b, (c, s) in sorted(sizes.items())},
        }
    return out


def _hops(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """Per served model, the mean round trip less the run per INFER action between two reads."""

    def sums(body: dict[str, Any]) -> dict[str, tuple[int, int]]:
        return {
            m["name"]: (
                sum(e["compute_input"]["count"] for e in m["batch_stats"]),
                sum(e["compute_input"]["ns"] for e in m["batch_stats"]),
            )
            for m in body["model_stats"]
        }

    first, last = sums(before), sums(after)
    out = {}
    for name, (count, ns) in last.items():
        count0, ns0 = first.get(name, (0, 0))
        if count > count0:
            out[name] = (ns - ns0) / (count - count0) / 1e9
    return out


def per_query(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], queries: int
) -> dict[str, list[float]]:
    """Per thread (the loop, each worker): ms run and ms waited for a core, per query."""
    return {
        name: [
            round((a - b) / queries * 1e3, 3)
            for a, b in zip(after[name], before[name], strict=True)
        ]
        for name in after
        if name in before
    }


def loop_seconds(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], queries: int
) -> float:
    """The event loop's wall time per query: its run and its waits for a core."""
    return sum(after["loop"]) / queries - sum(before["loop"]) / queries


def estimate(
    pipeline: Pipeline,
    config: Configuration,
    profiles: Profiles,
    schedule: np.ndarray,
    frontend: float,
    spread: bool,
    draws: np.ndarray | None,
) -> tuple[np.ndarray, dict[str, float]]:
    """`headway plan --simulate`'s latencies for this replay (`frontend` seconds per query;
    `draws`: which stages each query reaches, None: random), and each stage's rows per INFER."""
    planner = Planner(
        pipeline, profiles, CATALOGUE, schedule, SLO_MS / 1e3, seed=7, spread=spread,
        frontend_seconds=frontend,
    )  # fmt: skip
    found = planner.simulate(config, draws=draws)
    return found.latencies, found.batch


def own_draws(
    pipeline: Pipeline, compiled: Any, rows: list[Any], services: LocalServices
) -> np.ndarray:
    """Per body the load generator rotates through, the reach draw that sends it where the
    server sends it: the largest share of a stage it does not reach (0: it reaches all)."""
    draws = []
    for row in rows:
        alone = pipeline_from_flow(compiled, measure_scales(compiled, [row], services))
        missed = [
            s.scale for s, a in zip(pipeline.stages, alone.stages, strict=True) if a.scale < 0.5
        ]
        draws.append(max(missed, default=0.0))
    return np.array(draws)


def prepare(prefix: str) -> tuple[Path, Path, Path, list[Any], Pipeline, np.ndarray]:
    """A scratch folder (`prefix`), the cascade's repository and config in it (`build`), the
    rows the load generator rotates through, the compiled flow's pipeline with its measured
    share, and each row's reach draw (`own_draws`)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    repo, config = build(root)
    compiled = flow(APP).compile()
    rows = inputs(APP, 64)  # the bodies `wire` rotates through
    services = LocalServices(repository=repo)
    pipeline = pipeline_from_flow(compiled, measure_scales(compiled, rows, services))
    return root, repo, config, rows, pipeline, own_draws(pipeline, compiled, rows, services)


def accuracy(
    seconds: float, rounds: int, capacity: float | None = None, profile_seconds: float = 20.0
) -> dict[str, Any]:
    """Simulated vs measured P99 of the cascade flow app over HTTP, at each of `LOADS`, for
    `rounds` rounds in one sitting (one server); `capacity`: queries/s the loads are shares of
    (default: the first measurement's)."""
    root, repo, config, rows, pipeline, bodies = prepare("headway-accuracy-flow-")
    config_ = Configuration({s.name: StageConfig(KIND, 16, 1) for s in pipeline.stages})
    fast, slow = pipeline.stages
    out: dict[str, Any] = {"share": slow.scale, "seconds": seconds, "loads": []}
    process = ServerProcess(
        repo, state=root / "state.db", workers=2, grpc_port=0,
        extra=["--config", str(config)], log=root / "server.log",
    )  # fmt: skip
    out["capacity_qps"] = capacity
    with process:
        assert process.process is not None
        server = Server(process.url, process.process.pid)
        target, requests = Target.parse(process.url), wire(process.url, APP)
        run(target, requests, duration=2.0, warmup=0.0, concurrency=4)  # every stage measured
        served_as = server.served_as()
        for round_ in range(rounds):
            for load in LOADS:
                measured = asyncio.run(
                    profile_kind(Repository.scan(repo), CATALOGUE[KIND], batch_sizes=SIZES)
                )
                idle = profiles_from_rows(measured)
                frontend = frontend_of(process.url, APP, rows, seconds=3.0, warmup=0.5).mean
                if capacity is None:  # the loads are shares of the first measured capacity
                    capacity = min(
                        1 / frontend,
                        idle[fast.model][KIND].throughput(1),
                        idle[slow.model][KIND].throughput(1) / slow.scale,
                    )
                    out["capacity_qps"] = capacity
                rate = load * capacity
                # the profiling run: the same rate, its own arrivals (`under_load_of`)
                on_kind = {m: p[KIND] for m, p in idle.items()}
                found = under_load_of(
                    process.url, server.pid, APP, rows, on_kind, rate, seconds=profile_seconds
                )
                loaded = {m: {KIND: p} for m, p in found.profiles.items()}

                schedule = loadgen_arrivals.schedule(
                    rate, WARMUP_S + seconds, "gamma", cv=1.0, seed=7
                )
                stats2, cpu2, sched2 = server.stats(), server.cpu(), server.sched()
                tally = run(
                    target, requests, duration=seconds, warmup=WARMUP_S, schedule=schedule,
                    drain_timeout=30.0,
                )  # fmt: skip
                stats3, cpu3, sched3 = server.stats(), server.cpu(), server.sched()
                window = schedule >= WARMUP_S  # the load generator's window: warm-up left out
                figures = report.summarize(tally, seconds)
                row: dict[str, Any] = {
                    "round": round_, "load": load, "rate_qps": round(rate, 1),
                    "queries": int(window.sum()), "ok": figures["ok"],
                    "not_ok": figures["rejected"] + figures["errors"] + figures["timeouts"],
                    "real_p50_ms": ms(tally.latencies, 50),
                    "real_p99_ms": ms(tally.latencies, 99),
                    "send_lateness_p99_ms": figures["send_lateness_ms"]["p99"],
                    "frontend_ms": round(frontend * 1e3, 3),
                    "server_cpu_per_query_ms": round((cpu3 - cpu2) / len(schedule) * 1e3, 3),
                    "sched_ms_per_query": per_query(sched2, sched3, len(schedule)),
                    "stages": stage_figures(stats2, stats3),
                    "load_average_1m": os.getloadavg()[0],
                }  # fmt: skip
                workers = {
                    int(k): (sched3[k][0] - sched2[k][0], sched3[k][1] - sched2[k][1])
                    for k in sched3
                    if k != "loop" and k in sched2
                }
                ran = between(batch_seconds(stats2), batch_seconds(stats3))
                waits = waits_per_action(ran, workers)
                same_run = {
                    m: {KIND: p}
                    for m, p in loaded_profiles(
                        on_kind, stats2, stats3, served_as, waits=waits
                    ).items()
                }
                own = bodies[np.arange(len(schedule)) % len(bodies)]  # the queries' own reach
                same_loop = loop_seconds(sched2, sched3, len(schedule))
                variants = {  # name: (model profiles, frontend seconds per query, draws)
                    "idle": (idle, frontend, None),  # the product's estimate before
                    "loaded_models": (loaded, frontend, None),
                    "loaded_random": (loaded, found.frontend, None),
                    "loaded": (loaded, found.frontend, own),
                    # a diagnostic: the measured run's own times (the model given them exactly)
                    "same_run": (same_run, same_loop, own),
                }
                for name, (profiles, front, draws) in variants.items():
                    for spread in (True, False):
                        latencies, batch = estimate(
                            pipeline, config_, profiles, schedule, front, spread, draws
                        )
                        key = f"sim_{name}{'' if spread else '_means'}"
                        row[f"{key}_frontend_ms"] = round(front * 1e3, 3)
                        row[f"{key}_p50_ms"] = ms(latencies[window], 50)
                        row[f"{key}_p99_ms"] = ms(latencies[window], 99)
                        row[f"{key}_error"] = round(
                            row[f"{key}_p99_ms"] / row["real_p99_ms"] - 1, 3
                        )
                        row[f"{key}_batch"] = {s: round(b, 3) for s, b in batch.items()}
                row["profiles_ms"] = {
                    name: {m: {b: round(s * 1e3, 3) for b, s in p[KIND].seconds.items()}
                           for m, p in profiles.items()}
                    for name, profiles in (("idle", idle), ("loaded", loaded), ("same_run", same_run))
                }  # fmt: skip
                print(json.dumps(row), flush=True)
                out["loads"].append(row)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the 3 loads")
    parser.add_argument(
        "--capacity", type=float, default=None,
        help="queries/s the loads are shares of (default: the first measurement's)",
    )  # fmt: skip
    parser.add_argument(
        "--profile-seconds", type=float, default=20.0,
        help="the profiling run under each load, before the measured one",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("bench/.work/planner-accuracy-flow.json"))
    args = parser.parse_args(argv)
    found = accuracy(args.seconds, args.rounds, args.capacity, args.profile_seconds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
