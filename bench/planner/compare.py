"""Planner vs coarse-grained baselines, in simulation: cost and SLO misses per (SLO, CV).

    python bench/planner/compare.py [--pipeline NAME ...] [--rate 3000] [--plan-queries 50000]
                                    [--test-queries 50000] [--slo 300 ...] [--cv 4 ...]
                                    [--no-restarts] [--check-local]

For each pipeline (`PIPELINES`: the image cascade of the earlier runs and InferLine's four
evaluation pipelines, image processing, video monitoring, social media and the TF cascade, with
the shares assumed where noted; the two cascades again as `*-measured`, their second model's
share measured on a cascade flow by `shares.py`), SLO in {150, 300, 1000} ms and arrival CV
in {0.1, 1, 4}:

- **the planner** (`headway.planning.Planner`: InferLine's greedy search, Reconfigure, and
  restarts from every hardware kind unless `--no-restarts`) plans the pipeline on a planning
  trace (seed 1); with `--check-local`, every single-stage move from the plan (any kind, any
  batch size, the fewest feasible replicas) is then estimated, to see whether the search
  stopped where one move would still save money;
- **CG-Mean / CG-Peak** (InferLine's coarse-grained baselines, `headway.planning.baselines`):
  one unit is the whole pipeline,
  every model once, each on its own hardware and priced as such (the planner's cost model:
  the sum of the replicas' hourly prices); a unit on an accelerator kind runs each model there,
  or on cpu4 if it has no profile there (preprocessing, language identification, plate
  reading); a unit on cpu1 runs a model with no cpu1 profile on cpu4. All models run at one
  batch size: the largest whose unit latency (the critical path at that batch, each model at
  its share of the rows) meets the SLO. Units are replicated for the planning trace's mean
  rate (CG-Mean) or its peak: the highest rate in any window of the SLO's length (CG-Peak: a
  burst shorter than the SLO can be queued through; one as long cannot), and in any 1 s
  window (`cg_peak_1s`). The unit's kind is the one where a unit takes the most queries per
  second (InferLine's "best hardware"); `cg_*_cheapest` take instead the kind where the
  deployment costs least (a choice in CG's favour);

then every configuration is simulated on a held-out test trace (seed 2, same rate and CV) and
judged by its cost per hour and the share of queries over the SLO. Traces are sized in queries
(InferLine's held 50,000 arrivals). Profiles and prices: `bench/planner/profiles.yaml`
(assumed GPU-like shapes, not measured) and `catalogue.yaml`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from headway.planning import (
    Catalogue,
    Configuration,
    Pipeline,
    Planner,
    Profiles,
    Stage,
    simulate,
)
from headway.planning.baselines import CoarseGrained, peak_rate
from headway.planning.description import (
    parse_catalogue,
    profiles_from_rows,
    read_document,
    read_profile_rows,
)
from headway.planning.planner import SCREEN
from headway.planning.workloads import ArrivalSpec, arrival_times

HERE = Path(__file__).parent
SLOS_MS = (150, 300, 1000)
CVS = (0.1, 1.0, 4.0)
SIZES = (1, 2, 4, 8, 16, 32)
CASCADE = Pipeline(
    "image-cascade",
    (
        Stage("preprocess", "preprocess"),
        Stage("resnet50", "resnet50", ("preprocess",)),
        Stage("resnet152", "resnet152", ("resnet50",), 0.3),
    ),
)
#: InferLine's evaluation pipelines (mechanisms.md section 3.5), with the shares ASSUMED where
#: the seed gives none (the paper's measured scale factors are not at hand). Shares nest (one
#: draw per query, `headway.planning.pipeline`): a query that reaches a stage of share s
#: reaches every stage of a larger share.
PIPELINES = {
    "image-cascade": CASCADE,
    # Image Processing: preprocessing (resize, crop), then one classifier for every query
    "image-processing": Pipeline(
        "image-processing",
        (Stage("preprocess", "preprocess"), Stage("classify", "resnet152", ("preprocess",))),
    ),
    # Video Monitoring: YOLOv3 on every frame; frames with vehicles (assumed 60%) to a vehicle
    # classifier (ResNet-50) and OpenALPR plate reading (CPU only), frames with people
    # (assumed 30%) to a person classifier (ResNet-152)
    "video-monitoring": Pipeline(
        "video-monitoring",
        (
            Stage("yolo", "yolo"),
            Stage("vehicle", "resnet50", ("yolo",), 0.6),
            Stage("plate", "alpr", ("yolo",), 0.6),
            Stage("person", "resnet152", ("yolo",), 0.3),
        ),
    ),
    # Social Media: language identification, translation of the non-English posts (assumed
    # 30%) to English, and, in parallel, image classification of the post's image (every post)
    "social-media": Pipeline(
        "social-media",
        (
            Stage("lang-id", "lang-id"),
            Stage("translate", "nmt", ("lang-id",), 0.3),
            Stage("image", "resnet152"),
        ),
    ),
    # TF Cascade: a fast model for every query, a slow one for the inputs it is unsure of
    # (assumed 30%)
    "tf-cascade": Pipeline(
        "tf-cascade",
        (Stage("fast", "resnet50"), Stage("slow", "resnet152", ("fast",), 0.3)),
    ),
}
#: The second model's share MEASURED on a cascade flow (`shares.py`: the digits cascade of
#: examples/flows/cascade.py, its slow model for the rows the fast one is unsure of), for
#: the two cascades above as `*-measured`: the same models and profiles, the measured share.
MEASURED_SHARE = json.loads((HERE / "shares.json").read_text())["cascade"]["shares"]["digits-slow"]
PIPELINES["tf-cascade-measured"] = Pipeline(
    "tf-cascade-measured",
    (Stage("fast", "resnet50"), Stage("slow", "resnet152", ("fast",), MEASURED_SHARE)),
)
PIPELINES["image-cascade-measured"] = Pipeline(
    "image-cascade-measured",
    (
        Stage("preprocess", "preprocess"),
        Stage("resnet50", "resnet50", ("preprocess",)),
        Stage("resnet152", "resnet152", ("resnet50",), MEASURED_SHARE),
    ),
)


def load() -> tuple[Catalogue, Profiles]:
    catalogue = parse_catalogue(read_document(HERE / "catalogue.yaml")["hardware"])
    return catalogue, profiles_from_rows(read_profile_rows(HERE / "profiles.yaml"))


def judge(
    pipeline: Pipeline,
    config: Configuration,
    profiles: Profiles,
    catalogue: Catalogue,
    test: np.ndarray,
    slo: float,
    seed: int = 2,
) -> dict[str, float]:
    estimate = simulate(pipeline, config, profiles, test, seed=seed)
    return {
        "cost_per_hour": round(config.cost(catalogue), 4),
        "miss_rate": round(1.0 - estimate.attainment(slo), 6),
        "p99_ms": round(estimate.p99 * 1e3, 2),
    }


def cell(
    catalogue: Catalogue,
    profiles: Profiles,
    pipeline: Pipeline,
    slo_ms: int,
    cv: float,
    rate: float,
    plan_queries: int,
    test_queries: int,
    check_local: bool = False,
    restarts: bool = True,
    screen: int = SCREEN,
    plan_seed: int = 1,
    test_seed: int = 2,
    fallback: str = "cpu4",
    headroom: float = 0.0,
) -> dict[str, object]:
    """One (pipeline, SLO, CV) cell: the plan and each baseline judged on a held-out trace.
    The seeds pick the planning and test traces (and the estimator's draws on each);
    `fallback` is the kind a coarse-grained unit runs a model on that its kind has no
    profile of. The plan is held to the SLO itself (`headroom` 0), as InferLine's planner
    and the baselines are."""
    slo = slo_ms / 1e3
    plan_seconds = plan_queries / rate
    planning = arrival_times(ArrivalSpec(rate, plan_seconds, cv=cv, seed=plan_seed))
    test = arrival_times(ArrivalSpec(rate, test_queries / rate, cv=cv, seed=test_seed))
    started = time.perf_counter()
    planner = Planner(
        pipeline,
        profiles,
        catalogue,
        planning,
        slo,
        seed=plan_seed,
        restarts=restarts,
        budget=None,  # the search to its end on any machine: the grid's figures are its own
        screen=screen or None,
        headroom=headroom,
    )
    plan = planner.plan()
    planning_seconds = time.perf_counter() - started
    row: dict[str, object] = {
        "pipeline": pipeline.name,
        "slo_ms": slo_ms,
        "cv": cv,
        "planning_queries": len(planning),
        "test_queries": len(test),
        "planning_s": round(planning_seconds, 2),
        "estimates": plan.estimates,
        "screened_queries": planner.screened_queries,
    }
    if plan.config is not None:
        row["planner"] = judge(pipeline, plan.config, profiles, catalogue, test, slo, test_seed)
        row["planner"]["planned_p99_ms"] = round(plan.p99 * 1e3, 2)  # type: ignore[index]
        row["planner"]["config"] = describe(plan.config)  # type: ignore[index]
        if check_local:
            row["planner"]["cheaper_single_moves"] = cheaper_moves(planner, plan.config)  # type: ignore[index]
    else:
        row["planner"] = {"infeasible": plan.reason}
    peak = peak_rate(planning, slo)
    peak_1s = peak_rate(planning, 1.0)
    mean = len(planning) / plan_seconds
    row["rates_qps"] = {"mean": round(mean, 1), "peak_slo": round(peak, 1)}
    row["rates_qps"]["peak_1s"] = round(peak_1s, 1)  # type: ignore[index]
    baselines = (
        ("cg_mean", mean, "fastest"),
        ("cg_peak", peak, "fastest"),
        ("cg_peak_1s", peak_1s, "fastest"),
        ("cg_mean_cheapest", mean, "cheapest"),
        ("cg_peak_cheapest", peak, "cheapest"),
    )
    # a unit on an accelerator kind runs the models it has no profile of on cpu4
    units = CoarseGrained(pipeline, profiles, catalogue, SIZES, fallback=fallback)
    for name, target, choose in baselines:
        config = units.deployment(slo, target, choose)
        if config is None:
            row[name] = {"infeasible": "no kind runs the unit within the SLO"}
            continue
        row[name] = judge(pipeline, config, profiles, catalogue, test, slo, test_seed)
        row[name]["config"] = describe(config)  # type: ignore[index]
    return row


def cheaper_moves(planner: Planner, config: Configuration) -> list[dict[str, object]]:
    """Every single-stage change of `config` (any kind, any batch size, the fewest feasible
    replicas) that is feasible on the planning trace and cheaper: none when the greedy search
    stopped at a local minimum of all such moves (a superset of its three actions)."""
    found: list[dict[str, object]] = []
    for stage in planner.pipeline.names:
        c = config[stage]
        spent = c.replicas * planner.catalogue[c.hardware].cost_per_hour
        for kind in planner.hardware_for(stage):
            price = planner.catalogue[kind].cost_per_hour
            most = min(64, math.ceil(spent / price - 1e-9) - 1) if price > 0 else 64
            if most < 1:
                continue
            for size in planner.profile(stage, kind).batch_sizes:
                if (kind, size) == (c.hardware, c.max_batch):
                    continue
                moved = config.with_stage(stage, hardware=kind, max_batch=size, replicas=most)
                cheaper = planner.fewest_replicas(moved, stage, most)
                if cheaper is not None:
                    found.append({"cost_per_hour": round(planner.cost(cheaper), 4)})
                    found[-1]["config"] = describe(cheaper)
    return found


def describe(config: Configuration) -> dict[str, str]:
    return {s: f"{c.hardware} b{c.max_batch} x{c.replicas}" for s, c in config.stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=3000.0, help="mean queries/s")
    parser.add_argument("--plan-queries", type=int, default=50_000)
    parser.add_argument("--test-queries", type=int, default=50_000)
    parser.add_argument(
        "--pipeline", nargs="+", default=list(PIPELINES), choices=list(PIPELINES), help="pipelines"
    )
    parser.add_argument("--slo", type=int, nargs="+", default=SLOS_MS, help="SLOs (ms) to run")
    parser.add_argument("--cv", type=float, nargs="+", default=CVS, help="arrival CVs to run")
    parser.add_argument("--jobs", type=int, default=2, help="cells planned at once (processes)")
    parser.add_argument(
        "--check-local",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="look for single-stage moves cheaper than the plan (many more estimates)",
    )
    parser.add_argument(
        "--restarts",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also search from every hardware kind (Planner(restarts=...))",
    )
    parser.add_argument(
        "--screen",
        type=int,
        default=SCREEN,
        help="search on the planning trace's first N queries, confirm on all (0: all)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/.work/planner-compare.json"))
    args = parser.parse_args()
    catalogue, profiles = load()
    grid = [(name, slo_ms, cv) for name in args.pipeline for slo_ms in args.slo for cv in args.cv]
    summary = {"rate": args.rate, "plan_queries": args.plan_queries, "screen": args.screen}
    summary["test_queries"] = args.test_queries
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [
            pool.submit(
                cell,
                catalogue,
                profiles,
                PIPELINES[name],
                slo_ms,
                cv,
                args.rate,
                args.plan_queries,
                args.test_queries,
                args.check_local,
                args.restarts,
                args.screen,
            )
            for name, slo_ms, cv in grid
        ]
        for future in as_completed(futures):  # each cell kept as soon as it is done
            rows.append(future.result())
            print(json.dumps(rows[-1]), flush=True)
            args.out.write_text(json.dumps({**summary, "rows": rows}))


if __name__ == "__main__":
    main()
