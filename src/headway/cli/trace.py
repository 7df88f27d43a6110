"""`headway trace`: generate a multi-model workload shaped like a serverless production trace."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from headway.traces import TraceSpec, generate, popularity, write


@click.command()
@click.option(
    "--models",
    default=1000,
    show_default=True,
    type=click.IntRange(1),
    help="Number of models (named <prefix>00000, ...).",
)
@click.option(
    "--duration",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0.001),
    help="Seconds of trace.",
)
@click.option(
    "--rate",
    default=100.0,
    show_default=True,
    type=click.FloatRange(min=0.001),
    help="Mean requests per second over the whole trace.",
)
@click.option(
    "--interval",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0.001),
    help="Seconds per rate interval (a minute in the original trace).",
)
@click.option(
    "--sigma",
    default=2.5,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Log-normal spread of model popularity (natural-log units).",
)
@click.option("--burst-probability", default=0.01, show_default=True, type=click.FloatRange(0, 1))
@click.option("--burst-factor", default=10.0, show_default=True, type=click.FloatRange(min=1))
@click.option("--slo-ms", default=100.0, show_default=True, type=click.FloatRange(min=0.001))
@click.option("--prefix", default="m", show_default=True, help="Model name prefix.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="CSV file to write (seconds,model,slo_ms under a JSON header).",
)
def trace(out: Path, **options: object) -> None:
    """Generate a trace file for `headway bench --trace`."""
    try:
        spec = TraceSpec(**options)  # type: ignore[arg-type]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    generated = generate(spec)
    write(generated, out)
    summary = popularity(generated)
    Console().print(
        f"wrote {len(generated):,} requests for {spec.models:,} models over {spec.duration:g} s "
        f"to {out}; {summary['models_with_requests']:,.0f} models are used, the top 1% carry "
        f"{summary['top_1pct_share']:.0%} of requests"
    )
