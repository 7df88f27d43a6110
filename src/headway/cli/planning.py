"""`headway profile` and `headway plan`: measure models, then plan a pipeline to an SLO."""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from headway.apps.config import load_config
from headway.errors import HeadwayError
from headway.flows import LocalServices
from headway.flows.serving import flow_options
from headway.flows.source import load_flow
from headway.planning.description import (
    DEFAULT_CATALOGUE,
    load_planning,
    parse_catalogue,
    profile_rows_document,
    profiles_from_rows,
    read_arrivals,
    read_document,
    read_profile_rows,
)
from headway.planning.envelope import envelope, window_lengths
from headway.planning.from_flow import measure, pipeline_from_flow, stage_profiles
from headway.planning.frontend import frontend_seconds
from headway.planning.pipeline import Catalogue, Configuration, Pipeline, Profiles, Stage
from headway.planning.plan_file import plan_document, read_plan, write_plan
from headway.planning.planner import MARGIN, SCREEN, Planner
from headway.planning.profiler import (
    BATCH_SIZES,
    measure_frontend,
    measure_under_load,
    profile,
    subset,
)
from headway.repository import Repository
from headway.store import Store
from headway.store.profiles import MeasuredProfile, measured, save_measured

STATE = click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(".headway/state.db"),
    show_default=True,
    help="SQLite file that keeps the profiles.",
)


def _catalogue(config: Path | None, catalogue: Path | None) -> Catalogue:
    if catalogue is not None:
        document = read_document(catalogue)
        raw = document.get("hardware", document) if isinstance(document, dict) else document
        return parse_catalogue(raw, f"{catalogue}: hardware")
    return load_planning(config)[0] if config is not None else DEFAULT_CATALOGUE


def _csv(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


@click.command("profile")
@click.option(
    "--repository",
    "-r",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Model repository to measure (not needed with --import or --export alone).",
)
@click.option("--models", default=None, help="Comma-separated models (default: all).")
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="headway.yaml whose 'hardware:' catalogue lists the kinds to measure.",
)
@click.option("--catalogue", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--hardware", default=None, help="Comma-separated kinds to measure (default: all CPU)."
)
@click.option("--batch-sizes", default=",".join(map(str, BATCH_SIZES)), show_default=True)
@click.option("--iterations", default=50, show_default=True, type=click.IntRange(1))
@click.option(
    "--import",
    "import_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Keep the profiles in this file (JSON/YAML; e.g. taken on a machine with a GPU).",
)
@click.option(
    "--export",
    "export_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write every kept profile to this file (the format --import reads).",
)
@click.option(
    "--frontend",
    "frontend_app",
    default=None,
    help="Measure this app's time per query outside its models (HTTP, the flow's operators) "
    "instead of the models, serving it with `headway serve` (needs --config declaring the "
    "app, --repository, --samples).",
)
@click.option(
    "--samples",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="With --frontend: a JSON list of input rows to send the app.",
)
@click.option("--frontend-seconds", default=5.0, show_default=True, type=click.FloatRange(0.5))
@click.option(
    "--under-load",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="With --frontend: also serve the app at this many queries/s (--frontend-seconds "
    "long) and keep what its models and the frontend took under that load in place of "
    "their idle profiles (on the first --hardware kind; the models' idle profiles there "
    "must be kept already).",
)
@STATE
def profile_command(
    repository: Path | None,
    models: str | None,
    config: Path | None,
    catalogue: Path | None,
    hardware: str | None,
    batch_sizes: str,
    iterations: int,
    import_file: Path | None,
    export_file: Path | None,
    frontend_app: str | None,
    samples: Path | None,
    frontend_seconds: float,
    under_load: float | None,
    state: Path,
) -> None:
    """Measure each model alone per (hardware kind, batch size) into the store."""
    console = Console()
    try:
        store = Store(state)
        if import_file is not None:
            rows = read_profile_rows(import_file)
            save_measured(store, rows)
            console.print(f"imported {len(rows)} profile rows from {import_file}")
        if repository is not None and frontend_app is None:
            kinds = _catalogue(config, catalogue)
            names = _csv(hardware) or [k for k in kinds if kinds[k].gpu is None]
            sizes = [int(b) for b in _csv(batch_sizes)]
            repo = subset(Repository.scan(repository), _csv(models) or None)
            measured_rows = profile(
                repo,
                [kinds[n] for n in names],
                batch_sizes=sizes,
                iterations=iterations,
                progress=lambda row: console.print(_describe(row)),
            )
            save_measured(store, measured_rows)
            console.print(f"kept {len(measured_rows)} profile rows in {state}")
        if frontend_app is not None:
            if repository is None or config is None or samples is None:
                raise click.UsageError("--frontend needs --config, --repository and --samples")
            rows_sent = read_document(samples)
            if not isinstance(rows_sent, list):
                raise click.UsageError(f"{samples}: expected a JSON list of input rows")
            row = measure_frontend(
                repository, config, frontend_app, rows_sent, seconds=frontend_seconds
            )
            save_measured(store, [row])
            console.print(
                f"app {frontend_app}: {row.mean * 1e3:.2f} ms per query outside the models "
                f"({row.samples:,} queries, one at a time), kept in {state}"
            )
            if under_load is not None:
                kind = (_csv(hardware) or ["cpu1"])[0]
                idle = {m: p[kind] for m, p in profiles_from_rows(measured(store)).items()
                        if kind in p and m in Repository.scan(repository).names}  # fmt: skip
                if not idle:
                    raise click.UsageError(f"--under-load: no kept profile on {kind} of a model "
                                           f"in {repository}: profile them first")  # fmt: skip
                loaded = measure_under_load(
                    repository, config, frontend_app, rows_sent, idle, under_load,
                    hardware=kind, seconds=frontend_seconds,
                )  # fmt: skip
                save_measured(store, loaded)
                console.print(
                    f"under {under_load:g} queries/s: {loaded[-1].mean * 1e3:.2f} ms per query "
                    f"in the frontend; {', '.join(sorted({r.model for r in loaded[:-1]}))} on "
                    f"{kind} as loaded, kept"
                )
        if export_file is not None:
            write_plan(profile_rows_document(measured(store)), export_file)
            console.print(f"wrote the kept profiles to {export_file}")
        if repository is None and import_file is None and export_file is None:
            raise click.UsageError("give --repository to measure, or --import / --export")
    except HeadwayError as exc:
        raise click.ClickException(exc.message) from None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _describe(row: MeasuredProfile) -> str:
    return (
        f"{row.model} on {row.hardware}, batch {row.batch_size}: mean "
        f"{row.mean * 1e3:.2f} ms, p50 {(row.p50 or 0) * 1e3:.2f} ms, p99 "
        f"{(row.p99 or 0) * 1e3:.2f} ms, {row.throughput or 0:.0f} rows/s per replica"
    )


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
        compiled = flow.compile(flow_options(declared, flow.options))
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
    required=True,
    envvar="HEADWAY_CONFIG",
    help="headway.yaml with the pipeline (or app) and the hardware catalogue.",
)
@click.option("--app", required=True, help="Pipeline (or application) to plan.")
@click.option("--slo-ms", required=True, type=click.FloatRange(min=0.001), help="P99 target.")
@click.option(
    "--trace",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="Planning trace: `headway trace` CSV, or a JSON list of arrival seconds.",
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
@click.option("--rpc-ms", default=0.0, show_default=True, type=click.FloatRange(min=0))
@click.option(
    "--frontend-ms",
    default=None,
    type=click.FloatRange(min=0),
    help="The server's time per query outside the models, estimated as a stage ahead of them "
    "(default: what `headway profile --frontend APP` kept for the app; 0: none).",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path))
@STATE
def plan_command(
    config: Path,
    app: str,
    slo_ms: float,
    trace: Path,
    catalogue: Path | None,
    profiles: tuple[Path, ...],
    simulate_plan: Path | None,
    samples: Path | None,
    repository: Path | None,
    spread: bool,
    restarts: bool,
    screen_queries: int,
    screen_margin: float,
    rpc_ms: float,
    frontend_ms: float | None,
    seed: int,
    out: Path | None,
    state: Path,
) -> None:
    """Plan the cheapest configuration whose simulated P99 meets the SLO (InferLine)."""
    console = Console()
    try:
        kinds = _catalogue(config, catalogue)
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
        write_plan(document, out)
    except HeadwayError as exc:
        raise click.ClickException(exc.message) from None
    if not plan.feasible:
        raise click.ClickException(f"infeasible: {plan.reason} (written to {out})")
    _show(console, document, out)


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


def _show(console: Console, document: dict[str, object], out: Path) -> None:
    table = Table(title=f"plan for {document['app']} (written to {out})")
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
    console.print(
        f"simulated p99 {document['p99_ms']} ms (SLO {document['slo_ms']} ms) at "
        f"{document['rate_qps']} queries/s; ${document['cost_per_hour']}/h; planned in "
        f"{document['planning_seconds']} s ({document['estimates']} estimates"
        + (
            f" on the trace's first {screened:,} of {whole:,} queries, the plan confirmed on all)"
            if screened < whole
            else ")"
        )
    )
    if whole < SCREEN:
        console.print(
            f"note: the trace has {whole:,} queries, so its P99 rests on its {whole // 100:,} "
            f"slowest; a plan on a short trace misses more on other traffic than it did here. "
            f"Plan on a longer one (at least {SCREEN:,} queries), or to a lower --slo-ms."
        )
