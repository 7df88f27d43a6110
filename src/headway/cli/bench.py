"""`headway bench`: load any Open Inference Protocol server and report what it sustained."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console

from headway.cli.bench_runs import Load
from headway.cli.bench_streams import APIS, StreamBench, run_stream_bench
from headway.cli.find_rate import search_rate
from headway.loadgen import arrivals, rate_search, report
from headway.loadgen.client import Target, http_request
from headway.loadgen.trace import credential_options, run_trace_command
from headway.loadgen.workload import (
    WorkloadError,
    encode,
    fetch_metadata,
    from_file,
    from_metadata,
    with_parameters,
)


def _positive(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise click.BadParameter(f"must be a finite number greater than 0, got {value}")
    return value


def _non_negative(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not (value >= 0 and math.isfinite(value)):
        raise click.BadParameter(f"must be a finite number, 0 or more, got {value}")
    return value


#: The prompt of `--stream` without `--prompt`.
DEFAULT_PROMPT = "Return the"


def _object(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--parameters") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--parameters")
    return value


def _rows(shape: tuple[int, ...]) -> int:
    return shape[0] if shape else 1


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    default="http://127.0.0.1:8000",
    show_default=True,
    help="Base URL of the Open Inference Protocol server (http or https).",
)
@click.option("--model", default=None, help="Model name, as in /v2/models/NAME.")
@click.option(
    "--trace",
    "trace_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Replay a multi-model trace from `headway trace` instead: each request to its model "
    "with its SLO, open loop (--url, --input-data, --binary, --max-connections, --timeout, "
    "--json and --progress apply).",
)
@click.option("--model-version", default=None, help="Model version (default: the server's pick).")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Closed loop: requests outstanding at once (default 1 without --rate).",
)
@click.option(
    "--rate",
    type=float,
    default=None,
    callback=_positive,
    help="Open loop: requests per second, sent on schedule whatever the server does.",
)
@click.option(
    "--arrival",
    type=click.Choice(arrivals.ARRIVALS),
    default=None,
    help="Open-loop arrival process (default poisson).",
)
@click.option(
    "--cv",
    type=float,
    default=None,
    callback=_positive,
    help="Coefficient of variation of gamma inter-arrival gaps.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the arrival schedule and of random input data.",
)
@click.option(
    "--duration",
    type=float,
    default=10.0,
    show_default=True,
    callback=_positive,
    help="Measured seconds (after the warm-up).",
)
@click.option(
    "--warmup",
    type=float,
    default=1.0,
    show_default=True,
    callback=_non_negative,
    help="Seconds of load before measuring (excluded from every figure).",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=None,
    help="Rows per request: the first (batch) dimension of each input (default 1).",
)
@click.option(
    "--input-data",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="JSON request body ({'inputs': ...}) or .npy file of rows.",
)
@click.option("--binary", is_flag=True, help="Send tensors with the binary tensor extension.")
@click.option(
    "--variants",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Distinct request bodies to rotate through (defeats prediction caches).",
)
@click.option(
    "--slo-ms",
    type=float,
    default=None,
    callback=_positive,
    help="Latency SLO in ms: sent as each request's parameters.slo_ms (the deadline the "
    "server schedules it by), and goodput counts 200 answers within it.",
)
@click.option(
    "--propagate-deadline",
    is_flag=True,
    help="Open loop with --slo-ms: a request sent late (every connection busy) carries the "
    "milliseconds it has left as its slo_ms, and one with none left is not sent (counted as "
    "expired), as a gRPC client does with its deadline.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="Open loop: most connections to open; requests beyond wait (counted as capped).",
)
@click.option(
    "--timeout",
    type=float,
    default=10.0,
    show_default=True,
    callback=_positive,
    help="Seconds to wait for outstanding answers after the last send.",
)
@click.option(
    "--find-rate",
    is_flag=True,
    help="Search for the highest open-loop rate the server answers within --slo-ms: short "
    "open-loop trials (--duration each, after --warmup), starting at --rate or else at the "
    "throughput of a closed loop at --concurrency (default 32), doubling or halving, then "
    f"bisecting. A trial passes when {rate_search.GOODPUT_SHARE:.0%} of its requests got a 200 "
    f"within the SLO and the load generator sent within {rate_search.ON_TIME_SHARE:.0%} of the "
    "SLO of schedule. Use it to plan how much traffic one server takes under a latency target.",
)
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=rate_search.MAX_TRIALS,
    show_default=True,
    help="With --find-rate: most open-loop trials.",
)
@click.option(
    "--stream",
    is_flag=True,
    help="Streaming requests to a text generator (OpenAI's /v1/completions with stream: true, "
    "or --api generate): reports time to first part, time per part, parts/s and goodput "
    "(requests meeting --ttft-ms and --tpot-ms); with --find-rate, DistServe's goodput: the "
    "highest rate at which 90% of requests meet both.",
)
@click.option(
    "--api",
    type=click.Choice(APIS),
    default="openai",
    show_default=True,
    help="With --stream: the route streamed from.",
)
@click.option(
    "--prompt",
    "prompts",
    multiple=True,
    help="With --stream: a prompt (repeat to rotate through several).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="With --stream: parts asked of each request.",
)
@click.option(
    "--ttft-ms",
    type=float,
    default=None,
    callback=_positive,
    help="With --stream: the time-to-first-part target (sent with each request).",
)
@click.option(
    "--tpot-ms",
    type=float,
    default=None,
    callback=_positive,
    help="With --stream: the time-per-part target (sent with each request).",
)
@click.option(
    "--parameters",
    "model_parameters",
    default=None,
    help="With --stream: a JSON object passed to the model with each request, e.g. "
    "'{\"ignore_end\": true}' (the demo generator then writes --max-tokens parts each).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object of all figures.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress on stderr (default: when stderr is a terminal).",
)
@credential_options
def bench(
    url: str,
    model: str | None,
    trace_file: Path | None,
    model_version: str | None,
    concurrency: int | None,
    rate: float | None,
    arrival: str | None,
    cv: float | None,
    seed: int,
    duration: float,
    warmup: float,
    batch: int | None,
    input_data: Path | None,
    binary: bool,
    variants: int,
    slo_ms: float | None,
    propagate_deadline: bool,
    max_connections: int,
    timeout: float,
    find_rate: bool,
    trials: int,
    stream: bool,
    api: str,
    prompts: tuple[str, ...],
    max_tokens: int,
    ttft_ms: float | None,
    tpot_ms: float | None,
    model_parameters: str | None,
    as_json: bool,
    progress: bool | None,
    token: str | None,
    ca_file: Path | None,
) -> None:
    """Load an Open Inference Protocol server, closed loop (--concurrency) or open loop (--rate).

    Reports throughput, goodput (200 answers within --slo-ms), rejections (429/503), errors
    (other statuses, broken connections, timeouts) and latency p50/p90/p99/p99.9/max. In open
    loop, latency is measured from each request's scheduled send time. With --find-rate, the
    highest open-loop rate it answers within --slo-ms instead.
    """
    if trace_file is not None:
        if model is not None or concurrency is not None or rate is not None or find_rate:
            raise click.UsageError(
                "--trace replays its own models and schedule: drop --model, "
                "--concurrency, --rate and --find-rate"
            )
        run_trace_command(
            url, trace_file, input_data, binary, max_connections, timeout, as_json, progress,
            token, ca_file,
        )  # fmt: skip
        return
    if model is None:
        raise click.UsageError("Missing option '--model' (or give --trace FILE).")
    if concurrency is not None and rate is not None:
        raise click.UsageError(
            "give either --concurrency (closed loop) or --rate (open loop), not both"
        )
    if find_rate and slo_ms is None and not stream:
        raise click.UsageError("--find-rate judges each trial against an SLO: give --slo-ms")
    given = click.get_current_context().get_parameter_source("trials")
    if not find_rate and given is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--trials counts the trials of --find-rate; it needs --find-rate")
    open_loop = rate is not None or find_rate
    if not open_loop and (arrival is not None or cv is not None):
        raise click.UsageError("--arrival and --cv describe open-loop arrivals; they need --rate")
    if open_loop:
        arrival = arrival or "poisson"
        if cv is not None and arrival != "gamma":
            raise click.UsageError("--cv only applies to --arrival gamma")
        if arrival == "gamma" and cv is None:
            raise click.UsageError("--arrival gamma needs --cv (its coefficient of variation)")
    elif concurrency is None:
        concurrency = 8 if stream else 1
    if propagate_deadline and (not open_loop or slo_ms is None or binary):
        raise click.UsageError(
            "--propagate-deadline needs an open loop (--rate) with --slo-ms, in JSON (no --binary)"
        )
    try:
        target = Target.parse(url, token=token, ca=ca_file)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None
    if stream:
        err = Console(stderr=True)
        bench = StreamBench(
            target, api, model, list(prompts) or [DEFAULT_PROMPT], max_tokens, ttft_ms, tpot_ms,
            warmup, duration, timeout, max_connections, err, _object(model_parameters),
        )  # fmt: skip
        shown = {"url": url, "model": model, "api": api, "mode": "open" if rate else "closed",
                 "concurrency": concurrency, "rate": rate, "max_tokens": max_tokens,
                 "warmup_s": warmup}  # fmt: skip
        run_stream_bench(
            bench, shown, concurrency=concurrency, rate=rate, arrival=arrival or "poisson",
            cv=cv, seed=seed, find_rate=find_rate, trials=trials, as_json=as_json,
        )  # fmt: skip
        return
    if ttft_ms is not None or tpot_ms is not None or prompts or model_parameters is not None:
        raise click.UsageError(
            "--prompt, --ttft-ms, --tpot-ms and --parameters describe streams: add --stream"
        )

    try:
        metadata = fetch_metadata(
            url, model, model_version, headers=target.headers, verify=target.verify
        )
        if input_data is None:
            requests = from_metadata(metadata, batch, variants, seed)
        else:
            requests = from_file(input_data, metadata, batch, variants)
    except WorkloadError as exc:
        raise click.ClickException(str(exc)) from None
    if slo_ms is not None:
        requests = [with_parameters(r, slo_ms=slo_ms) for r in requests]
    path = target.infer_path(model, model_version)
    wire = [http_request(target, path, encode(r, binary)) for r in requests]

    err = Console(stderr=True)
    show = err.is_terminal if progress is None else progress
    deadline_s = slo_ms * 1e-3 if propagate_deadline and slo_ms is not None else None
    load = Load(target, wire, duration, warmup, max_connections, timeout, slo_ms, err, show,
                deadline_s)  # fmt: skip
    settings: dict[str, Any] = {
        "url": url,
        "model": model,
        "model_version": model_version,
        "mode": "open" if rate is not None else "closed",
        "concurrency": concurrency,
        "rate": rate,
        "arrival": arrival if open_loop else None,
        "cv": cv,
        "seed": seed,
        "batch": _rows(requests[0].inputs[0].data.shape),
        "binary": binary,
        "variants": len(wire),
        "warmup_s": warmup,
        "max_connections": max_connections,
        "propagate_deadline": propagate_deadline,
        "timeout_s": timeout,
    }
    if find_rate:
        assert slo_ms is not None
        search_rate(load, settings, rate, concurrency or 32, arrival or "poisson", cv, seed,
                   trials, as_json)  # fmt: skip
        return
    schedule = None
    if rate is not None:
        schedule = arrivals.schedule(rate, warmup + duration, arrival or "poisson", cv, seed)
    figures = {**settings, **load.measure(concurrency=concurrency, schedule=schedule)}
    figures["items_per_s"] = round(figures["throughput_rps"] * figures["batch"], 2)
    if as_json:
        click.echo(orjson.dumps(figures).decode())
    else:
        report.render(figures, Console(file=sys.stdout))


if __name__ == "__main__":
    bench()
