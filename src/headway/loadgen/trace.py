"""Replay a multi-model trace against an Open Inference Protocol server, open loop.

Each row of a trace (``headway.traces``: ``seconds,model,slo_ms``) becomes one request to
``/v2/models/{model}/infer`` carrying ``parameters.slo_ms``, sent at its scheduled time whatever
the server does; latency counts from that time (no coordinated omission).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
import orjson
import uvloop
from rich.console import Console
from rich.table import Table

from headway.loadgen.client import Target, http_request
from headway.loadgen.replay import TraceProgress, replay
from headway.loadgen.report import format_ms, percentiles_ms
from headway.loadgen.workload import (
    Request,
    WorkloadError,
    encode,
    fetch_metadata,
    from_file,
    from_metadata,
    with_parameters,
)
from headway.traces import read

Bodies = Mapping[str, Request] | Callable[[str], Request]
Row = tuple[float, str, float]
LATENCY = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9}
#: Error text -> reason, first match wins (429 is always `overloaded`). Headway's error bodies
#: name the cause only in words; the reasons are the `reason` of its error classes
#: (`headway.errors`), so they match the server's headway_errors_total{reason} labels.
REASONS = (
    ("loaded in time", "cold_start"),
    ("loading it takes", "cold_start"),
    ("deadline", "deadline"),
    ("no replica became ready", "deadline"),
    ("queue is full", "overloaded"),
    ("worker", "worker_failed"),
    (" is ", "not_ready"),
)


def reason_of(status: int, text: str) -> str:
    """The reason of a 429/503 answer, from its error text (see REASONS)."""
    if status == 429:
        return "overloaded"
    return next((reason for needle, reason in REASONS if needle in text), "unavailable")


@dataclass(repr=False)
class TraceResult:
    """Per-request records of one replay, in schedule order, and their summary.

    Per request: model, scheduled time, status (0: no answer before the drain timeout, -1: the
    connection broke), latency, send lateness and, for non-200 answers, the error text.
    ``summary()`` gives SLO attainment (answered within the SLO / all requests), goodput, latency
    percentiles of 200 answers, late answers, rejections by reason and errors."""

    models: list[str]
    scheduled: np.ndarray  # seconds from the start
    slo_ms: np.ndarray
    status: np.ndarray  # HTTP status; 0: no answer (timeout or never sent); -1: broken
    latency: np.ndarray  # seconds from the scheduled send to the answer; nan without one
    lateness: np.ndarray  # seconds from the scheduled to the actual send; nan if never sent
    messages: dict[int, str] = field(default_factory=dict)  # request index -> error text
    duration: float = 0.0  # the trace's span, for rates
    started_at: float = 0.0  # wall clock (time.time()) of scheduled time 0
    peak_connections: int = 0
    capped: int = 0  # requests that waited because every allowed connection was busy

    def __len__(self) -> int:
        return len(self.models)

    def __repr__(self) -> str:
        return f"TraceResult({len(self)} requests, {int((self.status == 200).sum())} ok)"

    def reasons(self) -> list[str | None]:
        """Per request: the reason of a 429/503 answer, else None."""
        return [
            reason_of(int(s), self.messages.get(i, "")) if s in (429, 503) else None
            for i, s in enumerate(self.status.tolist())
        ]

    def summary(self, start: float = 0.0) -> dict[str, Any]:
        """The figures of the requests scheduled at `start` seconds or later (a warm-up before
        it is left out); rates divide by the rest of the trace's duration."""
        window = self.scheduled >= start
        status, latency, lateness = self.status[window], self.latency[window], self.lateness[window]
        total = int(window.sum())
        duration = max(0.0, self.duration - start)
        ok = status == 200
        on_time = ok & (latency * 1e3 <= self.slo_ms[window])
        rejected = np.isin(status, (429, 503))
        by_reason: dict[str, int] = {}
        for reason, inside in zip(self.reasons(), window.tolist(), strict=True):
            if reason is not None and inside:
                by_reason[reason] = by_reason.get(reason, 0) + 1
        others = status[~ok & ~rejected & (status > 0)]
        errors = {
            str(s): int(n) for s, n in zip(*np.unique(others, return_counts=True), strict=True)
        }
        rate = (lambda n: round(n / duration, 2)) if duration > 0 else (lambda n: None)
        sent = lateness[~np.isnan(lateness)]
        return {
            "requests": total,
            "ok": int(ok.sum()),
            "on_time": int(on_time.sum()),
            "late": int((ok & ~on_time).sum()),
            "slo_attainment": round(float(on_time.sum()) / total, 6) if total else None,
            "goodput_rps": rate(int(on_time.sum())),
            "throughput_rps": rate(int(ok.sum())),
            "offered_rps": rate(total),
            "latency_ms": percentiles_ms(latency[ok].tolist(), LATENCY),
            "rejected": int(rejected.sum()),
            "rejected_by_reason": dict(sorted(by_reason.items())),
            "errors": errors,
            "transport_errors": int((status == -1).sum()),
            "timeouts": int((status == 0).sum()),
            "capped": self.capped,
            "send_lateness_ms": percentiles_ms(sent.tolist(), {"p50": 50.0, "p99": 99.0}),
            "peak_connections": self.peak_connections,
            "duration_s": duration,
        }


def encode_requests(
    target: Target, rows: Sequence[Row], bodies: Bodies, binary: bool = False
) -> list[bytes]:
    """The complete HTTP request of each row, encoded once per (model, SLO)."""
    body_of = bodies.__getitem__ if isinstance(bodies, Mapping) else bodies
    cache: dict[tuple[str, float], bytes] = {}
    wires: list[bytes] = []
    for _, model, slo_ms in rows:
        wire = cache.get((model, slo_ms))
        if wire is None:
            body = encode(with_parameters(body_of(model), slo_ms=slo_ms), binary)
            wire = cache[model, slo_ms] = http_request(target, target.infer_path(model), body)
        wires.append(wire)
    return wires


def bodies_from_metadata(
    url: str, models: Sequence[str], seed: int = 0, *, target: Target | None = None
) -> dict[str, Request]:
    """One batch-1 request of random data per distinct model, from `GET /v2/models/{m}` (with
    `target`'s token and TLS context, when given)."""
    extra: dict[str, Any] = (
        {} if target is None else {"headers": target.headers, "verify": target.verify}
    )
    return {
        m: from_metadata(fetch_metadata(url, m, None, **extra), 1, 1, seed)[0]
        for m in dict.fromkeys(models)
    }


def replay_trace(
    url: str,
    rows: Sequence[Row],
    bodies: Bodies,
    *,
    max_connections: int = 512,
    progress: Callable[[TraceProgress], None] | None = None,
    binary: bool = False,
    drain_timeout: float = 10.0,
    duration: float | None = None,
    warm_connections: int = 16,
    target: Target | None = None,
) -> TraceResult:
    """Send each `(seconds, model, slo_ms)` row at its time; see the module docstring.

    Requests go over many keep-alive HTTP/1.1 connections on one uvloop event loop
    (``headway.loadgen.replay``), as ``headway.loadgen.client`` requests pre-encoded once per
    model and SLO; non-200 answers keep their body so that rejections can be counted by reason.
    `bodies` gives the request (inputs, other fields) for a model name. `duration` (default:
    the last row's time) divides counts into rates. Raises ConnectionError when no
    connection to the server can be opened at all. `target`: `url` parsed with its token
    and TLS authorities (`Target.parse`).
    """
    target = target or Target.parse(url)
    ordered = sorted(rows, key=lambda row: row[0])
    wires = encode_requests(target, ordered, bodies, binary)
    offsets = [float(row[0]) for row in ordered]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        driver, started_at = runner.run(
            replay(target, offsets, wires, max_connections, warm_connections, drain_timeout,
                   progress)
        )  # fmt: skip
    span = duration if duration is not None else (offsets[-1] if offsets else 0.0)
    return TraceResult(
        [row[1] for row in ordered], np.asarray(offsets), np.asarray([r[2] for r in ordered]),
        driver.status, driver.latency, driver.lateness, driver.messages, span, started_at,
        driver.peak, driver.capped,
    )  # fmt: skip


# -- command line -------------------------------------------------------------------------------
def credential_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--token` and `--ca-file`, for a server with an inference token or TLS (`headway bench`
    and the trace replay)."""
    command = click.option(
        "--ca-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="With an https --url: PEM file of the authorities the server's certificate may "
        "be signed by (default: the system's).",
    )(command)
    return click.option(
        "--token",
        default=None,
        envvar="HEADWAY_INFERENCE_TOKEN",
        help="Bearer token sent with every request: the server's --inference-token (default: "
        "HEADWAY_INFERENCE_TOKEN).",
    )(command)


def trace_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of a trace replay, for `python -m headway.loadgen.trace` and `headway bench`."""
    options = [
        click.option("--url", default="http://127.0.0.1:8000", show_default=True,
                     help="Base URL of the Open Inference Protocol server (http or https)."),
        click.option("--trace", "trace_file", required=True,
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="Trace file (seconds,model,slo_ms) from `headway trace`."),
        click.option("--input-data", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     default=None, help="One JSON request body for every model (default: "
                     "random inputs from each model's metadata, fetched once before the run)."),
        click.option("--binary", is_flag=True, help="Send tensors with the binary extension."),
        click.option("--max-connections", type=click.IntRange(min=1), default=512,
                     show_default=True, help="Most connections to open at once."),
        click.option("--timeout", type=click.FloatRange(min=0), default=10.0, show_default=True,
                     help="Seconds to wait for outstanding answers after the last send."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object of figures."),
        click.option("--progress/--no-progress", default=None,
                     help="Live progress on stderr (default: when stderr is a terminal)."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return credential_options(command)


def run_trace_command(
    url: str,
    trace_file: Path,
    input_data: Path | None = None,
    binary: bool = False,
    max_connections: int = 512,
    timeout: float = 10.0,
    as_json: bool = False,
    progress: bool | None = None,
    token: str | None = None,
    ca_file: Path | None = None,
) -> dict[str, Any]:
    """Replay `trace_file` against `url`, print the figures, and return them."""
    try:
        target = Target.parse(url, token=token, ca=ca_file)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None
    try:
        header, rows = read(trace_file)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read {trace_file}: {exc}") from None
    if not rows:
        raise click.ClickException(f"{trace_file} holds no requests")
    models = [row[1] for row in rows]
    try:
        if input_data is None:
            bodies: Bodies = bodies_from_metadata(url, models, target=target)
        else:
            one = from_file(input_data, {"inputs": []}, None, 1)[0]
            bodies = lambda _: one  # noqa: E731
    except WorkloadError as exc:
        raise click.ClickException(str(exc)) from None
    spec = header.get("trace")
    duration = float(spec["duration"]) if isinstance(spec, dict) and "duration" in spec else None
    err = Console(stderr=True)
    show = err.is_terminal if progress is None else progress

    def live(p: TraceProgress) -> None:
        err.print(f"{p.elapsed:7.1f} s  sent {p.sent:,}/{p.total:,}  answered {p.answered:,}"
                  f"  ok {p.ok:,}", end="\r")  # fmt: skip

    try:
        result = replay_trace(url, rows, bodies, max_connections=max_connections, binary=binary,
                              drain_timeout=timeout, duration=duration,
                              progress=live if show else None, target=target)  # fmt: skip
    except (ConnectionError, ValueError) as exc:
        raise click.ClickException(f"{exc}; is the server running, and is --url right?") from None
    figures = {"url": url, "trace": str(trace_file), "spec": spec, **result.summary()}
    if as_json:
        click.echo(orjson.dumps(figures).decode())
    else:
        render(figures, Console(file=sys.stdout))
    return figures


def render(figures: dict[str, Any], console: Console) -> None:
    """The figures of a replay as one table."""
    table = Table(title=f"trace {figures.get('trace', '')} at {figures.get('url', '')}",
                  show_header=False, title_justify="left")  # fmt: skip
    table.add_column(style="bold")
    table.add_column(justify="right")
    latency = figures["latency_ms"]
    rows = [
        ("requests", f"{figures['requests']:,}"),
        ("answered on time / late", f"{figures['on_time']:,} / {figures['late']:,}"),
        ("SLO attainment", f"{(figures['slo_attainment'] or 0):.4%}"),
        ("goodput", f"{figures['goodput_rps'] or 0:,.1f} req/s"),
        ("rejected", f"{figures['rejected']:,} "
         + ", ".join(f"{k}: {v:,}" for k, v in figures["rejected_by_reason"].items())),
        ("errors (status: count)", ", ".join(f"{k}: {v:,}" for k, v in figures["errors"].items())
         or "0"),
        ("transport errors / timeouts", f"{figures['transport_errors']:,} / "
         f"{figures['timeouts']:,}"),
        ("latency p50 / p99 / p99.9 / max (ms)", " / ".join(
            format_ms(latency[k], 1) for k in (*LATENCY, "max"))),
    ]  # fmt: skip
    for row in rows:
        table.add_row(*row)
    console.print(table)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@trace_options
def command(**options: Any) -> None:
    """Replay a trace file against a server, open loop, and report SLO attainment and goodput."""
    run_trace_command(**options)


def main(argv: list[str] | None = None) -> None:
    command.main(args=argv, prog_name="python -m headway.loadgen.trace")


if __name__ == "__main__":
    main()
