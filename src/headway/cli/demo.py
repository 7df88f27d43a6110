"""`headway demo`: train small real models, serve them, send traffic, print what happened."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np
import orjson
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from headway.cli.serve import ServeSettings
from headway.client import Answer, Client
from headway.datatypes import oip_datatype
from headway.demo import PROMPTS, DemoModel, build_demo_repository, build_generator
from headway.errors import HeadwayError
from headway.launcher import ServerProcess
from headway.loadgen.client import Target, http_request, run
from headway.loadgen.report import summarize
from headway.loadgen.workload import Body


def _body(model: DemoModel, rows: np.ndarray) -> bytes:
    """A JSON Open Inference Protocol request for `rows`."""
    tensor = {
        "name": model.input_name,
        "shape": list(rows.shape),
        "datatype": oip_datatype(rows.dtype),
        "data": np.ascontiguousarray(rows).reshape(-1),
    }
    return orjson.dumps({"inputs": [tensor]}, option=orjson.OPT_SERIALIZE_NUMPY)


@click.command()
@click.option(
    "--repository",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo-repository"),
    show_default=True,
    help="Where the demo models are written.",
)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", default=None, type=click.IntRange(1), help="Worker processes.")
@click.option(
    "--duration",
    default=3.0,
    show_default=True,
    type=click.FloatRange(min=0.5),
    help="Seconds of traffic per model.",
)
@click.option(
    "--concurrency",
    default=16,
    show_default=True,
    type=click.IntRange(1),
    help="Connections per model.",
)
def demo(
    repository: Path, port: int, workers: int | None, duration: float, concurrency: int
) -> None:
    """Build a demo repository, serve it, send traffic and print a table per model."""
    console = Console()
    with console.status("training demo models on scikit-learn's datasets..."):
        models = build_demo_repository(repository, progress=lambda line: console.log(line))
    generator: str | None = None
    streams: Table | None = None
    if importlib.util.find_spec("torch") is not None:
        with console.status("training a text generator on the standard library's docstrings..."):
            generator = build_generator(repository, progress=lambda line: console.log(line))
    server = ServerProcess(
        repository,
        state=repository / ".state.db",
        port=port or None,
        workers=workers or ServeSettings.workers,
        log=repository / "server.log",
    )
    with console.status("starting headway serve ..."):
        try:
            server.start()
        except (RuntimeError, TimeoutError) as exc:
            raise click.ClickException(str(exc)) from None
    served = len(models) + (generator is not None)
    console.log(f"serving {served} models at {server.url} (log: {repository / 'server.log'})")
    table = Table(
        title=f"Headway demo: {duration:g} s per model, {concurrency} connections, 1 row per request"
    )
    for column in ("model", "framework", "accuracy", "requests/s", "p50 ms", "p99 ms", "errors"):
        table.add_column(column, justify="left" if column in ("model", "framework") else "right")
    target = Target.parse(server.url)
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[rps]}"),
            TimeRemainingColumn(),
            console=console,
        ) as progress:
            for model in models.values():
                accuracy = _accuracy(server.url, model, report=console.log)
                requests = [
                    http_request(
                        target,
                        target.infer_path(model.name),
                        Body(_body(model, model.inputs[i : i + 1])),
                    )
                    for i in range(len(model.inputs))
                ]
                task = progress.add_task(model.name, total=duration, rps="")

                def tick(tally, task=task) -> None:  # type: ignore[no-untyped-def]
                    elapsed = max(0.0, tally.elapsed - 0.5)
                    rate = tally.answered / tally.elapsed if tally.elapsed else 0.0
                    progress.update(
                        task, completed=min(duration, elapsed), rps=f"{rate:,.0f} req/s"
                    )

                tally = run(
                    target,
                    requests,
                    duration=duration,
                    warmup=0.5,
                    concurrency=concurrency,
                    progress=tick,
                )
                progress.update(task, completed=duration)
                figures = summarize(tally, duration)
                latency = figures["latency_ms"]
                table.add_row(
                    model.name,
                    model.framework,
                    f"{accuracy:.3f}",
                    f"{figures['throughput_rps']:,.0f}",
                    f"{latency['p50']:.2f}",
                    f"{latency['p99']:.2f}",
                    str(figures["errors"] + figures["rejected"] + figures["transport_errors"]),
                )
        if generator is not None:
            streams = generate(server.url, generator, duration=duration, console=console)
    finally:
        server.stop()
    console.print(table)
    if streams is not None:
        console.print(streams)
    console.print(
        f"Serve these models yourself: [bold]headway serve --repository {repository}[/bold]"
    )


def _accuracy(url: str, model: DemoModel, *, report: Callable[[str], None]) -> float:
    """Held-out accuracy through the server: one request carrying every sample row."""
    with Client(url, on_retry=report) as client:
        answer = ask(client, model.name, model.request())
    return model.accuracy(answer.outputs)


def ask(client: Client, model: str, inputs: dict[str, np.ndarray], **options: Any) -> Answer:
    """`client.infer`, which retries a 429 or 503 (saying why to its `on_retry`), with a
    ClickException carrying the server's reason when it keeps refusing or answers another
    error: the user reads why, not a traceback."""
    try:
        answer: Answer = client.infer(model, inputs, **options)
        return answer
    except HeadwayError as exc:
        raise click.ClickException(exc.message) from None


def generate(url: str, name: str, *, duration: float, console: Console) -> Table:
    """Text generation traffic for `duration` s (8 connections, a prompt each, each answer a
    whole text), and what the server measured of its streams: parts per second, time to
    first part and per part (its `/metrics` histograms, before and after)."""
    target = Target.parse(url)
    requests = [
        http_request(target, target.infer_path(name), Body(_text_body(prompt)))
        for prompt in PROMPTS
    ]
    before = _stream_metrics(url, name)
    with console.status(f"{name}: generating text for {duration:g} s ..."):
        tally = run(target, requests, duration=duration, warmup=0.5, concurrency=len(PROMPTS))
    after = _stream_metrics(url, name)
    figures = summarize(tally, duration)
    with Client(url, on_retry=console.log) as client:
        answer = ask(client, name, {"text_input": np.array([[PROMPTS[0].encode()]], object)})
    sample = PROMPTS[0] + "".join(
        t.decode() if isinstance(t, bytes) else str(t)
        for t in np.asarray(answer.outputs["text_output"]).reshape(-1)
    )
    parts = after["parts"] - before["parts"]
    first = [a - b for a, b in zip(after["first"], before["first"], strict=True)]
    gaps = [a - b for a, b in zip(after["gap"], before["gap"], strict=True)]
    bounds = after["bounds"]
    table = Table(
        title=f"Headway demo: a text generator, {duration:g} s, {len(PROMPTS)} connections, "
        "its sequences batched per step"
    )
    columns = ("model", "texts/s", "tokens/s", "first token p50 ms", "p99 ms",
               "per token p50 ms", "errors")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    table.add_row(
        name,
        f"{figures['throughput_rps']:,.1f}",
        f"{parts / (duration + 0.5):,.0f}",
        _quantile(bounds, first, 0.5),
        _quantile(bounds, first, 0.99),
        _quantile(bounds, gaps, 0.5),
        str(figures["errors"] + figures["rejected"] + figures["transport_errors"]),
    )
    table.caption = f"{sample!r} (time to first token and per token: the server's /metrics)"
    return table


def _text_body(prompt: str) -> bytes:
    tensor = {"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [prompt]}
    return orjson.dumps({"inputs": [tensor]})


def _stream_metrics(url: str, name: str) -> dict[str, Any]:
    """The server's stream figures for model `name`: parts delivered, and the cumulative
    counts of its time-to-first-part and time-per-part histograms (with their bounds)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=10).text
    found: dict[str, Any] = {"parts": 0.0, "first": [], "gap": [], "bounds": []}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != name:
                continue
            if sample.name == "headway_parts_total":
                found["parts"] = sample.value
            elif sample.name == "headway_time_to_first_part_seconds_bucket":
                found["first"].append(sample.value)
                found["bounds"].append(float(sample.labels["le"]))
            elif sample.name == "headway_time_per_part_seconds_bucket":
                found["gap"].append(sample.value)
    if not found["first"]:
        found["first"] = found["gap"] = [0.0] * len(found["bounds"])
    return found


def _quantile(bounds: list[float], cumulative: list[float], q: float) -> str:
    """Prometheus's `histogram_quantile`: the bucket holding the q-th value, linearly within
    it (its milliseconds; "-" without values)."""
    if not cumulative or cumulative[-1] <= 0:
        return "-"
    rank = q * cumulative[-1]
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, cumulative, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return f">{lower * 1e3:.0f}"
            inside = (rank - below) / (count - below) if count > below else 1.0
            return f"{(lower + (bound - lower) * inside) * 1e3:.1f}"
        lower, below = bound, count
    return "-"
