"""`headway profile`: measure each model alone per batch size and hardware kind, and keep the
profiles in the store for `headway plan`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from headway.errors import HeadwayError
from headway.planning.description import (
    DEFAULT_CATALOGUE,
    load_planning,
    parse_catalogue,
    profile_rows_document,
    profiles_from_rows,
    read_document,
    read_profile_rows,
)
from headway.planning.pipeline import Catalogue, Hardware
from headway.planning.plan_file import write_plan
from headway.planning.profiler import (
    BATCH_SIZES,
    ROUNDS,
    WARMUP,
    measure_frontend,
    measure_under_load,
    profile,
    subset,
)
from headway.planning.steps import profile_steps, stage_document
from headway.repository import ModelConfig, Repository
from headway.store import Store
from headway.store.profiles import MeasuredProfile, measured, save_measured

STATE = click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(".headway/state.db"),
    show_default=True,
    help="SQLite file that keeps the profiles.",
)


def catalogue_from(config: Path | None, catalogue: Path | None) -> Catalogue:
    if catalogue is not None:
        document = read_document(catalogue)
        raw = document.get("hardware", document) if isinstance(document, dict) else document
        return parse_catalogue(raw, f"{catalogue}: hardware")
    return load_planning(config)[0] if config is not None else DEFAULT_CATALOGUE


def comma_list(text: str | None) -> list[str]:
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
@click.option(
    "--iterations",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="Calls measured per model and batch size.",
)
@click.option(
    "--warmup",
    default=WARMUP,
    show_default=True,
    type=click.IntRange(0),
    help="Passes over every batch size before anything is measured (a served model is warm).",
)
@click.option(
    "--rounds",
    default=ROUNDS,
    show_default=True,
    type=click.IntRange(1),
    help="Rounds the measured calls are split into, each in a shuffled order; how far apart "
    "the rounds' figures are is printed beside each figure.",
)
@click.option(
    "--sequences",
    default=None,
    help="A generative model's step sizes to measure, comma-separated (default: 1, 2, 4 ... "
    "up to its max_sequences).",
)
@click.option(
    "--stages",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".headway/stages"),
    show_default=True,
    help="Folder where each generative model's measured steps are written as MODEL-KIND.yaml, "
    "the stage file `headway plan --generative` reads.",
)
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
    warmup: int,
    rounds: int,
    sequences: str | None,
    stages: Path,
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
            kinds = catalogue_from(config, catalogue)
            names = comma_list(hardware) or [k for k in kinds if kinds[k].gpu is None]
            sizes = [int(b) for b in comma_list(batch_sizes)]
            repo = subset(Repository.scan(repository), comma_list(models) or None)
            generative = [n for n in repo.names if repo.get(n).generative is not None]
            options = {"iterations": iterations, "warmup": warmup, "rounds": rounds}
            for name in generative:
                for cpu in (kinds[n] for n in names if kinds[n].gpu is None):
                    written = write_steps(
                        console, repo.get(name), cpu, stages,
                        sizes=[int(n) for n in comma_list(sequences)] or None,
                        progress=lambda row: console.print(_describe(row, "sequences")),
                        **options,
                    )  # fmt: skip
                    console.print(f"wrote {name}'s steps on {cpu.name} to {written}")
            rest = [n for n in repo.names if n not in generative]
            if rest:
                measured_rows = profile(
                    subset(repo, rest),
                    [kinds[n] for n in names],
                    batch_sizes=sizes,
                    progress=lambda row: console.print(_describe(row)),
                    **options,
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
                kind = (comma_list(hardware) or ["cpu1"])[0]
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


def write_steps(
    console: Console, config: ModelConfig, kind: Hardware, folder: Path, **options: Any
) -> Path:
    """Profile generative model `config`'s steps on `kind` (`profile_steps`), print them, and
    write its stage file into `folder`: the file written."""
    measured = asyncio.run(profile_steps(config, kind, **options))
    for first in measured.first:
        console.print(f"first step: {_describe(first, 'sequences started')}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{config.name}-{kind.name}.yaml"
    write_plan(stage_document(measured), path)
    return path


def _describe(row: MeasuredProfile, size: str = "batch") -> str:
    """A row as printed: each figure, and how far apart the profiler's rounds put it."""

    def noise(share: float | None) -> str:
        return "" if share is None else f" (rounds {share:.0%} apart)"

    return (
        f"{row.model} on {row.hardware}, {size} {row.batch_size}: mean "
        f"{row.mean * 1e3:.2f} ms{noise(row.spread)}, p50 {(row.p50 or 0) * 1e3:.2f} ms, p99 "
        f"{(row.p99 or 0) * 1e3:.2f} ms{noise(row.p99_spread)}, "
        f"{row.throughput or 0:.0f} {'rows' if size == 'batch' else 'parts'}/s per replica"
    )
