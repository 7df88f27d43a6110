"""`headway demo`: train small real models, serve them, send traffic, print what happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import click
import httpx
import numpy as np
import orjson
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from headway.cli.serve import ServeSettings
from headway.datatypes import oip_datatype
from headway.demo import DemoModel, build_demo_repository
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
    response = post_retrying(
        f"{url}/v2/models/{model.name}/infer", _body(model, model.inputs), report=report
    )
    outputs = {
        o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in response.json()["outputs"]
    }
    return model.accuracy(outputs)


#: Statuses that mean "not now": the server is busy (429) or cannot meet the deadline now (503:
#: a worker busy with another action, an estimate being measured, a model still loading).
RETRIED = (429, 503)


def post_retrying(
    url: str,
    body: bytes,
    *,
    attempts: int = 6,
    backoff: float = 0.25,
    timeout: float = 30.0,
    report: Callable[[str], None] = lambda line: None,
) -> httpx.Response:
    """POST `body`, retrying a 429 or 503 after backoff, 0.25 s doubling (or the server's
    Retry-After), each refusal's reason given to `report`; a ClickException with the server's
    reason when it keeps refusing or answers another error: the user reads why, not a
    traceback."""
    delay = backoff
    for attempt in range(1, attempts + 1):
        try:
            response = httpx.post(url, content=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"POST {url} failed: {exc}") from None
        if response.is_success:
            return response
        if response.status_code not in RETRIED or attempt == attempts:
            break
        wait = _retry_after(response) or delay
        report(f"{response.status_code} {_reason(response)}; retrying in {wait:g} s")
        time.sleep(wait)
        delay *= 2
    tries = f" after {attempts} tries" if response.status_code in RETRIED else ""
    raise click.ClickException(
        f"POST {url} answered {response.status_code}{tries}: {_reason(response)}"
    )


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(5.0, max(0.0, float(response.headers.get("retry-after", ""))))
    except ValueError:
        return None


def _reason(response: httpx.Response) -> str:
    """The server's `{"error": ...}`, else the start of its body."""
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason_phrase
