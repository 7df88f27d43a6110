"""`headway trace`: generate a multi-model workload shaped like a serverless production trace."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click
import numpy as np
from rich.console import Console

from headway.planning.workloads import ArrivalSpec, arrival_times
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
    "--app",
    default=None,
    help="Instead of many models: one stream of queries for this app or pipeline (for "
    "`headway plan --trace`), gamma arrivals shaped by the options below.",
)
@click.option(
    "--cv",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="With --app: coefficient of variation of the gaps (std/mean; not CV squared): "
    "1 is Poisson, 0.1 nearly regular, 4 bursty. [default: 1]",
)
@click.option(
    "--ramp-to",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="With --app: the rate ramps linearly from --rate to this by the end.",
)
@click.option(
    "--spike-at",
    default=None,
    type=click.FloatRange(min=0),
    help="With --app: seconds from the start at which the rate spikes.",
)
@click.option(
    "--spike-factor", default=3.0, show_default=True, type=click.FloatRange(min=0, min_open=True)
)
@click.option(
    "--spike-seconds", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True)
)
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="File to write: CSV (seconds,model,slo_ms under a JSON header); with --app, a .json "
    "name writes a JSON list of arrival seconds instead.",
)
def trace(
    out: Path,
    app: str | None,
    cv: float | None,
    ramp_to: float | None,
    spike_at: float | None,
    spike_factor: float,
    spike_seconds: float,
    **options: object,
) -> None:
    """Generate a trace file for `headway bench --trace` or `headway plan --trace`."""
    if app is not None:
        stream: dict[str, object] = {"cv": 1.0 if cv is None else cv}
        stream.update(ramp_to=ramp_to, spike_at=spike_at)
        stream.update(spike_factor=spike_factor, spike_seconds=spike_seconds)
        _app_trace(out, app, options, stream)
        return
    if cv is not None or ramp_to is not None or spike_at is not None:
        raise click.UsageError("--cv, --ramp-to and --spike-at shape one stream: give --app")
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


def _app_trace(out: Path, app: str, options: dict[str, object], stream: dict[str, object]) -> None:
    try:
        spec = ArrivalSpec(
            rate=options["rate"],  # type: ignore[arg-type]
            duration=options["duration"],  # type: ignore[arg-type]
            seed=options["seed"],  # type: ignore[arg-type]
            **stream,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    times = arrival_times(spec)
    if out.suffix.lower() == ".json":
        out.write_text(json.dumps([round(float(t), 6) for t in times]))
    else:
        slo = f"{options['slo_ms']:g}"
        with open(out, "w") as file:
            file.write("# " + json.dumps({"arrivals": asdict(spec), "requests": len(times)}) + "\n")
            file.write("seconds,model,slo_ms\n")
            file.writelines(f"{t:.6f},{app},{slo}\n" for t in times.tolist())
    gaps = np.diff(times)
    cv_seen = float(gaps.std() / gaps.mean()) if gaps.size > 1 else float("nan")
    Console().print(
        f"wrote {len(times):,} queries for {app} over {spec.duration:g} s to {out} "
        f"({len(times) / spec.duration:.1f} queries/s, gaps with CV {cv_seen:.2f})"
    )
