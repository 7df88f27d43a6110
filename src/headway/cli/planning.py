"""`headway plan`: the cheapest configuration of a pipeline that meets a P99 SLO on a trace
(`headway profile`, in `headway.cli.profiling`, measures the models first)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from headway.apps.config import load_config
from headway.cli.profiling import STATE, catalogue_from
from headway.errors import HeadwayError
from headway.flows import LocalServices
from headway.flows.source import load_flow
from headway.planning.description import (
    load_planning,
    profiles_from_rows,
    read_arrivals,
    read_document,
    read_profile_rows,
)
from headway.planning.envelope import envelope, window_lengths
from headway.planning.from_flow import measure, pipeline_from_flow, stage_profiles
from headway.planning.frontend import frontend_seconds
from headway.planning.generative import parse_generative_stage, size_generative_stage
from headway.planning.pipeline import Catalogue, Configuration, Pipeline, Profiles, Stage
from headway.planning.plan_file import plan_document, read_plan, write_plan
from headway.planning.planner import BUDGET_S, HEADROOM, MARGIN, SCREEN, Planner
from headway.planning.report import report
from headway.store import Store
from headway.store.profiles import measured


def pipeline_for(
    config: Path,
    app: str,
    repository: Path | None = None,
    samples: Path | None = None,
    kinds: Catalogue | None = None,
) -> tuple[Pipeline, Profiles]:
    """The pipeline named `app` in the config, else one built from the application: a flow
    app's worker stages (scale factors, and the time per row of its model-less actions,
    measured on `samples` when given, its models run in-process from `repository`; the
    model-less actions that stay on a worker come with their profiles on every kind of
    `kinds`); an exp4 ensemble asks every model for each query (parallel stages); a one-model
    app is one stage."""
    pipelines = load_planning(config)[1]
    if app in pipelines:
        return pipelines[app], {}
    apps = load_config(config)
    if app not in apps:
        raise click.ClickException(
            f"{config}: no pipeline or app named {app!r} (pipelines: {sorted(pipelines)}, "
            f"apps: {sorted(apps)})"
        )
    declared = apps[app]
    if declared.flow is not None:
        flow = load_flow(declared.flow, f"app {app!r}")
        compiled = flow.compile(declared.flow_options(flow.options))
        if samples is None:
            return pipeline_from_flow(compiled), {}
        rows = read_document(samples)
        if not isinstance(rows, list):
            raise click.ClickException(f"{samples}: expected a list of input rows")
        found = measure(compiled, rows, LocalServices(repository=repository))
        timed = stage_profiles(compiled, found.row_seconds, kinds or [])
        return pipeline_from_flow(compiled, found.scales, found.row_seconds), timed
    if declared.policy == "exp4" or len(declared.models) == 1:
        return Pipeline(app, tuple(Stage(ref.name, ref.name) for ref in declared.refs)), {}
    raise click.ClickException(
        f"app {app!r} picks one of {len(declared.models)} models per query ({declared.policy}): "
        f"declare its stages under pipelines.{app} in {config}"
    )


@click.command("plan")
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="HEADWAY_CONFIG",
    help="headway.yaml with the pipeline (or app) and the hardware catalogue (required to plan).",
)
@click.option("--app", help="Pipeline (or application) to plan (required to plan).")
@click.option("--slo-ms", type=click.FloatRange(min=0.001), help="P99 target (required to plan).")
@click.option(
    "--trace",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Planning trace: `headway trace` CSV, or a JSON list of arrival seconds (required to "
    "plan).",
)
@click.option(
    "--report",
    "report_of",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Show this plan file's report instead of planning: the configuration per stage, its "
    "cost, its simulated latency distribution against the SLO, and CG-Mean and CG-Peak beside "
    "it (what `headway plan -o` wrote; nothing is simulated again).",
)
@click.option("--catalogue", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--profiles",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Profiles file(s) to use besides the store's (e.g. a GPU-like kind).",
)
@click.option(
    "--simulate",
    "simulate_plan",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Estimate this plan file's configuration on the trace instead of planning.",
)
@click.option(
    "--samples",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="For a flow app: a JSON list of input rows, run through the flow in-process to "
    "measure each model's scale factor (without: every stage sees every query).",
)
@click.option(
    "--repository",
    "-r",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="With --samples: the model repository the flow's models are loaded from.",
)
@click.option(
    "--spread/--no-spread",
    default=True,
    show_default=True,
    help="Estimate with each action's duration drawn from a log-normal of its profile's mean "
    "and p99 at that batch size; --no-spread: each action takes its mean (InferLine's "
    "estimator), which leaves out the models' own tail.",
)
@click.option(
    "--restarts/--no-restarts",
    default=True,
    show_default=True,
    help="Also search from every hardware kind at large batches and keep the cheapest plan "
    "found (--no-restarts: InferLine's search from the fastest hardware at batch 1 alone).",
)
@click.option(
    "--screen-queries",
    default=SCREEN,
    show_default=True,
    type=click.IntRange(min=0),
    help="Search on the trace's first N queries, then confirm the plan on all of them "
    "(0: search on the whole trace).",
)
@click.option(
    "--screen-margin",
    default=MARGIN,
    show_default=True,
    type=click.FloatRange(min=0, max=1, max_open=True),
    help="Share of the SLO a candidate must leave unused on the first --screen-queries "
    "queries (when the trace is longer).",
)
@click.option(
    "--headroom",
    default=HEADROOM,
    show_default=True,
    type=click.FloatRange(min=0, max=1, max_open=True),
    help="Share of the SLO, and of each stage's throughput, the plan leaves unused: its "
    "simulated P99 must meet the SLO less this share, and no stage may be loaded past the "
    "rest (the margin the tuner keeps for what the trace and the estimate leave out; "
    "0: plan to the SLO itself, as InferLine does).",
)
@click.option(
    "--budget-s",
    default=BUDGET_S,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds the search may take: once spent, it answers with the cheapest plan found "
    "so far, still confirmed on the whole trace (InferLine's own search runs first; the "
    "plan's steps say what was left out). 0: no limit.",
)
@click.option("--rpc-ms", default=0.0, show_default=True, type=click.FloatRange(min=0))
@click.option(
    "--frontend-ms",
    default=None,
    type=click.FloatRange(min=0),
    help="The server's time per query outside the models, estimated as a stage ahead of them "
    "(default: what `headway profile --frontend APP` kept for the app; 0: none).",
)
@click.option(
    "--generative",
    "generative_stage",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Size a generative stage instead: a YAML of its step profile, parts and targets "
    "(`headway.planning.generative`); with --trace, the fewest replicas at which the trace's "
    "streamed requests meet both targets, through the simulated server.",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path))
@STATE
def plan_command(
    config: Path | None,
    app: str | None,
    slo_ms: float | None,
    trace: Path | None,
    report_of: Path | None,
    catalogue: Path | None,
    profiles: tuple[Path, ...],
    simulate_plan: Path | None,
    samples: Path | None,
    repository: Path | None,
    spread: bool,
    restarts: bool,
    screen_queries: int,
    screen_margin: float,
    headroom: float,
    budget_s: float,
    rpc_ms: float,
    frontend_ms: float | None,
    generative_stage: Path | None,
    seed: int,
    out: Path | None,
    state: Path,
) -> None:
    """Plan the cheapest configuration whose simulated P99 meets the SLO (InferLine)."""
    console = Console()
    if generative_stage is not None:
        if trace is None:
            raise click.UsageError("to size a generative stage, give --trace")
        _size_generative(console, generative_stage, trace, seed, out)
        return
    if report_of is not None:
        try:
            document = read_document(report_of)
        except HeadwayError as exc:
            raise click.ClickException(exc.message) from None
        if not isinstance(document, dict) or "app" not in document:
            raise click.ClickException(f"{report_of}: not a plan file")
        _show(console, document, report_of)
        return
    missing = [f"--{n}" for n, v in (("config", config), ("app", app), ("slo-ms", slo_ms),
                                      ("trace", trace)) if v is None]  # fmt: skip
    if missing:
        raise click.UsageError(f"to plan, give {', '.join(missing)} (or --report PLAN)")
    assert config is not None and app is not None and slo_ms is not None and trace is not None
    try:
        kinds = catalogue_from(config, catalogue)
        pipeline, timed = pipeline_for(config, app, repository, samples, kinds)
        rows = measured(Store(state)) if state.exists() else []
        for path in profiles:
            rows += read_profile_rows(path)
        known = {**profiles_from_rows(rows), **timed}
        arrivals = read_arrivals(trace)
        frontend = frontend_ms / 1e3 if frontend_ms is not None else frontend_seconds(rows, app)
        planner = Planner(
            pipeline,
            known,
            kinds,
            arrivals,
            slo_ms / 1e3,
            seed=seed,
            rpc_seconds=rpc_ms / 1e3,
            spread=spread,
            frontend_seconds=frontend or 0.0,
            restarts=restarts,
            screen=screen_queries or None,
            margin=screen_margin,
            headroom=headroom,
            budget=budget_s or None,
        )
        if simulate_plan is not None:
            _estimate(console, planner, read_plan(simulate_plan).configuration(), arrivals)
            return
        if out is None:
            raise click.UsageError("give -o/--out for the plan file (or --simulate PLAN)")
        started = time.perf_counter()
        plan = planner.plan()
        seconds = time.perf_counter() - started
        shortest = 0.0
        if plan.config is not None:
            service = {
                s: planner.profile(s, plan.config[s].hardware).latency(plan.config[s].max_batch)
                for s in pipeline.names
            }
            shortest = pipeline.critical_path(service)
        lengths = window_lengths(max(shortest, 1e-3))
        document = plan_document(app, plan, planner, envelope(arrivals, lengths), seconds)
        if plan.config is not None:  # its latency distribution, and CG-Mean and CG-Peak
            document["report"] = report(planner, plan.config)
        write_plan(document, out)
    except HeadwayError as exc:
        raise click.ClickException(exc.message) from None
    if not plan.feasible:
        raise click.ClickException(f"infeasible: {plan.reason} (written to {out})")
    _show(console, document, out)


def _size_generative(
    console: Console, path: Path, trace: Path, seed: int, out: Path | None
) -> None:
    try:
        stage = parse_generative_stage(read_document(path), str(path))
        arrivals = read_arrivals(trace)
    except HeadwayError as exc:
        raise click.ClickException(exc.message) from None
    times = arrivals - arrivals[0] if len(arrivals) else arrivals
    size = size_generative_stage(
        stage.profile,
        times,
        stage.parts(len(times), seed),
        ttft=stage.ttft,
        tpot=stage.tpot,
        attainment=stage.attainment,
        most=stage.most,
    )
    table = Table(title=f"{path.name}: requests meeting both targets, by replicas")
    table.add_column("replicas", justify="right")
    table.add_column("attained", justify="right")
    for replicas, share in size.attained.items():
        table.add_row(str(replicas), f"{share:.1%}")
    console.print(table)
    if out is not None:
        write_plan({"generative": str(path), "replicas": size.replicas,
                    "attained": size.attained}, out)  # fmt: skip
    if size.replicas is None:
        raise click.ClickException(
            f"infeasible: no count up to {stage.most} replicas meets both targets for "
            f"{stage.attainment:.0%} of the requests"
        )
    console.print(
        f"{size.replicas} replica(s): {size.attained[size.replicas]:.1%} of {len(times)} "
        f"requests meet {stage.ttft * 1e3:g} ms to the first part and {stage.tpot * 1e3:g} ms "
        "per part"
    )


def _estimate(
    console: Console, planner: Planner, config: Configuration, arrivals: np.ndarray
) -> None:
    started = time.perf_counter()
    estimate = planner.simulate(config, arrivals)
    seconds = time.perf_counter() - started
    console.print(
        f"{len(arrivals):,} queries: p50 {estimate.percentile(50) * 1e3:.2f} ms, p99 "
        f"{estimate.p99 * 1e3:.2f} ms, {estimate.attainment(planner.slo):.2%} within "
        f"{planner.slo * 1e3:g} ms; cost ${config.cost(planner.catalogue):.3f}/h; simulated "
        f"{len(arrivals) / seconds:,.0f} queries/s"
        + (
            f"; the frontend's {planner.frontend_seconds * 1e3:.2f} ms per query included"
            if planner.frontend_seconds > 0
            else ""
        )
    )


def _show(console: Console, document: dict[str, Any], out: Path) -> None:
    if not document.get("feasible", False):
        console.print(f"plan for {document['app']} ({out}): infeasible: {document.get('reason')}")
        return
    table = Table(title=f"plan for {document['app']} ({out})")
    for column in ("stage", "model", "hardware", "batch", "replicas", "util", "$/h"):
        table.add_column(column)
    stages = document["stages"]
    assert isinstance(stages, dict)
    for name, stage in stages.items():
        table.add_row(
            name,
            stage["model"],
            stage["hardware"],
            str(stage["max_batch_size"]),
            str(stage["replicas"]),
            f"{stage['utilisation']:.0%}",
            f"{stage['cost_per_hour']:.3f}",
        )
    console.print(table)
    screened, whole = document["screened_queries"], document["trace_queries"]
    assert isinstance(screened, int) and isinstance(whole, int)
    goal = (
        f"SLO {document['slo_ms']} ms"
        if not document.get("headroom")
        else f"SLO {document['slo_ms']} ms less {document['headroom']:.0%} headroom: "
        f"{document['goal_ms']} ms"
    )
    console.print(
        f"simulated p99 {document['p99_ms']} ms ({goal}) at "
        f"{document['rate_qps']} queries/s; ${document['cost_per_hour']}/h; planned in "
        f"{document['planning_seconds']} s ({document['estimates']} estimates"
        + (
            f" on the trace's first {screened:,} of {whole:,} queries, the plan confirmed on all)"
            if screened < whole
            else ")"
        )
    )
    _show_report(console, document)
    if whole < SCREEN:
        console.print(
            f"note: the trace has {whole:,} queries, so its P99 rests on its {whole // 100:,} "
            f"slowest; a plan on a short trace misses more on other traffic than it did here. "
            f"Plan on a longer one (at least {SCREEN:,} queries), or to a lower --slo-ms."
        )


def _show_report(console: Console, document: dict[str, Any]) -> None:
    """The plan's simulated latency quantiles against its SLO, and CG-Mean and CG-Peak."""
    found = document.get("report")
    if not isinstance(found, dict):
        console.print("no report in this plan file (plan again to have one)")
        return
    slo = float(document["slo_ms"])
    quantiles = Table(title=f"simulated latency (SLO {slo:g} ms)")
    for column in ("quantile", "ms", ""):
        quantiles.add_column(column)
    points = [(q, ms) for q, ms in found.get("latency_ms", []) if q >= 50]
    longest = max([slo, *(ms for _, ms in points)], default=1.0) or 1.0
    for q, ms in points:
        bar = "#" * max(1, round(30 * ms / longest))
        quantiles.add_row(f"p{q:g}", f"{ms:.2f}", bar + (" over the SLO" if ms > slo else ""))
    console.print(quantiles)
    attainment = found.get("attainment")
    if attainment is not None:
        console.print(f"{attainment:.2%} of the trace's queries within the SLO")
    baselines = Table(title="beside InferLine's coarse-grained baselines")
    for column in ("deployment", "$/h", "p99 ms", "within SLO", "configuration"):
        baselines.add_column(column)
    rows = [("plan", {"cost_per_hour": document["cost_per_hour"], "p99_ms": document["p99_ms"],
                      "attainment": attainment, "config": {s: f"{v['hardware']} b"
                      f"{v['max_batch_size']} x{v['replicas']}" for s, v in
                      document["stages"].items()}})]  # fmt: skip
    names = {"cg_mean": "CG-Mean", "cg_peak": "CG-Peak"}
    rows += [(names.get(n, n), b) for n, b in found.get("baselines", {}).items()]
    for name, b in rows:
        config = b.get("infeasible") or ", ".join(f"{k}: {v}" for k, v in b["config"].items())
        share = b.get("attainment")
        baselines.add_row(
            name,
            f"{b['cost_per_hour']:.3f}" if "cost_per_hour" in b else "-",
            f"{b['p99_ms']:.2f}" if "p99_ms" in b else "-",
            f"{share:.2%}" if share is not None else "-",
            config,
        )
    console.print(baselines)
