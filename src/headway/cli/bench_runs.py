"""One run of `headway bench`'s load generator, with a live progress line on stderr: what a
plain `headway bench` makes once and `--find-rate` makes for each of its trials."""

from __future__ import annotations

from time import perf_counter
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from headway.loadgen import report
from headway.loadgen.client import LoadTally, Target, run


class Live:
    """A one-line rich progress display fed by the client's periodic snapshots."""

    def __init__(self, console: Console, total: float, warmup: float) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}[/]"),
            BarColumn(bar_width=20),
            TimeElapsedColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console,
            auto_refresh=False,
            transient=True,
        )
        self.task = self.progress.add_task("connecting", total=total, stats="")
        self.warmup = warmup
        self.last = (perf_counter(), 0)

    def __call__(self, tally: LoadTally) -> None:
        now, answered = perf_counter(), tally.answered
        rate = (answered - self.last[1]) / max(now - self.last[0], 1e-9)
        self.last = (now, answered)
        stats = (
            f"{rate:,.0f} answers/s · sent {tally.sent:,} · rejected {tally.rejected:,}"
            f" · errors {tally.errors + tally.transport_errors:,} · "
            f"{tally.connections:,} conns"
        )
        phase = "warm-up" if tally.elapsed < self.warmup else "measuring"
        self.progress.update(
            self.task, completed=tally.elapsed, description=phase, stats=stats, refresh=True
        )


class Load:
    """One load generator's settings: each `measure` is a run, closed or open loop, with a
    progress line on stderr when `show`."""

    def __init__(
        self,
        target: Target,
        wire: list[bytes],
        duration: float,
        warmup: float,
        max_connections: int,
        timeout: float,
        slo_ms: float | None,
        err: Console,
        show: bool,
        deadline_s: float | None = None,
    ) -> None:
        self.target, self.wire = target, wire
        self.duration, self.warmup = duration, warmup
        self.max_connections, self.timeout = max_connections, timeout
        self.slo_ms = slo_ms
        self.deadline_s = deadline_s  # open loop: propagate the deadline (`loadgen.deadlines`)
        self.err, self.show = err, show

    def measure(
        self, concurrency: int | None = None, schedule: np.ndarray | None = None
    ) -> dict[str, Any]:
        """One run's figures (`report.summarize`)."""
        live = Live(self.err, self.warmup + self.duration, self.warmup) if self.show else None
        try:
            if live is not None:
                live.progress.start()
            tally = run(
                self.target,
                self.wire,
                duration=self.duration,
                warmup=self.warmup,
                concurrency=concurrency,
                schedule=schedule,
                max_connections=self.max_connections,
                drain_timeout=self.timeout,
                progress=live,
                deadline_s=self.deadline_s if schedule is not None else None,
            )
        except ConnectionError as exc:
            raise click.ClickException(
                f"{exc}; is the server running, and is --url right?"
            ) from None
        finally:
            if live is not None:
                live.progress.stop()
        return report.summarize(tally, self.duration, self.slo_ms)
