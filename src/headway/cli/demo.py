"""`headway demo`: train small real models, serve them, send traffic, print what happened."""

from __future__ import annotations

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
from headway.demo import DemoModel, build_demo_repository
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
    console.log(f"serving {len(models)} models at {server.url} (log: {repository / 'server.log'})")
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
    finally:
        server.stop()
    console.print(table)
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
