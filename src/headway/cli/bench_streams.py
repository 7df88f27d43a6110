"""`headway bench --stream`: streaming requests to a text generator, closed or open loop,
reported as time to first part, time per part, parts/s and goodput; with `--find-rate`, the
highest rate at which 90% of requests meet both targets (DistServe's goodput).

The load is `headway.loadgen.streams`; the search is `headway.loadgen.rate_search`'s."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from headway.loadgen import arrivals, rate_search
from headway.loadgen.client import Target
from headway.loadgen.streams import StreamLoad, summarize

#: The routes `--api` picks: OpenAI's completions (Headway, vLLM, the peers' apps) or Triton's
#: generate extension.
APIS = ("openai", "generate")


@dataclass
class StreamBench:
    """One server, one model, one request shape: runs measured on demand."""

    target: Target
    api: str
    model: str
    prompts: list[str]
    max_tokens: int
    ttft_ms: float | None
    tpot_ms: float | None
    warmup: float
    duration: float
    timeout: float
    max_connections: int
    err: Console
    #: Passed to the model with each request (`parameters`), e.g. {"ignore_end": true}.
    parameters: dict[str, Any] | None = None

    def load(self) -> StreamLoad:
        targets = self._targets()
        if self.api == "openai":
            path = "/v1/completions"
            shape: dict[str, Any] = {
                "model": self.model,
                "max_tokens": self.max_tokens,
                "stream": True,
            }
            if self.parameters:
                shape["parameters"] = self.parameters
            bodies = [orjson.dumps({**shape, "prompt": p, **targets}) for p in self.prompts]
        else:
            path = f"/v2/models/{self.model}/generate_stream"
            parameters = {**(self.parameters or {}), "max_tokens": self.max_tokens, **targets}
            bodies = [
                orjson.dumps({"text_input": p, "parameters": parameters}) for p in self.prompts
            ]
        return StreamLoad(self.target, path, bodies, self.timeout, self.max_connections)

    def _targets(self) -> dict[str, Any]:
        """The targets each request carries (Headway schedules by them; others ignore them)."""
        out: dict[str, Any] = {}
        if self.ttft_ms is not None:
            out["ttft_ms"] = self.ttft_ms
        if self.tpot_ms is not None:
            out["tpot_ms"] = self.tpot_ms
        return out

    def measure(
        self, *, concurrency: int | None = None, schedule: list[float] | None = None
    ) -> dict[str, Any]:
        load = self.load()
        start = time.perf_counter()
        window = (start + self.warmup, start + self.warmup + self.duration)
        if schedule is not None:
            records = _run(load.open(schedule))
        else:
            assert concurrency is not None
            records = _run(load.closed(concurrency, self.warmup + self.duration))
        return summarize(records, window, ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms)


def _run(coroutine: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:  # pragma: no cover - uvloop is not built for Windows
        return asyncio.run(coroutine)


def run_stream_bench(
    bench: StreamBench,
    settings: dict[str, Any],
    *,
    concurrency: int | None,
    rate: float | None,
    arrival: str,
    cv: float | None,
    seed: int,
    find_rate: bool,
    trials: int,
    as_json: bool,
) -> None:
    say = bench.err.print
    if find_rate:
        if bench.ttft_ms is None:
            raise click.UsageError("--find-rate judges each trial by its targets: give --ttft-ms")
        closed = None
        if rate is None:
            concurrency = concurrency or 8
            say(f"closed loop at concurrency {concurrency}, to start from its throughput ...")
            closed = bench.measure(concurrency=concurrency)
            rate = closed["requests_per_s"]
            if not rate:
                raise click.ClickException(f"no stream ended well in a closed loop: "
                                           f"{closed['errors'] or 'no answers'}")  # fmt: skip
            say(f"  {rate:,.2f} streams/s closed loop")
        search = rate_search.RateSearch(rate, max_trials=trials, floor=0.1)
        while (next_rate := search.next_rate()) is not None:
            schedule = arrivals.schedule(next_rate, bench.warmup + bench.duration, arrival, cv,
                                         seed).tolist()  # fmt: skip
            trial = rate_search.judge(next_rate, bench.measure(schedule=schedule))
            search.record(trial)
            say(f"trial {len(search.trials)}/{trials}: {next_rate:,.2f}/s offered -> "
                f"{trial.attainment:.0%} met both targets, {trial.verdict}")  # fmt: skip
        best = search.best
        figures = {
            **settings, "mode": "find-rate", "closed_loop": closed,
            "goodput_rps": round(best.offered, 2) if best is not None else 0.0,
            "limited_by": search.limited_by,
            "at_goodput": best.figures if best is not None else None,
            "trials": [{"rate": t.rate, "offered": round(t.offered, 2), "verdict": t.verdict,
                        "attainment": t.attainment} for t in search.trials],
        }  # fmt: skip
    else:
        schedule = None
        if rate is not None:
            offsets = arrivals.schedule(rate, bench.warmup + bench.duration, arrival, cv, seed)
            schedule = offsets.tolist()
        figures = {**settings, **bench.measure(concurrency=concurrency, schedule=schedule)}
    if as_json:
        click.echo(orjson.dumps(figures).decode())
    else:
        render(figures, Console(file=sys.stdout))


def render(figures: dict[str, Any], console: Console) -> None:
    """The figures as a table (`--json` prints them all)."""
    shown = figures.get("at_goodput") or figures
    table = Table(title=f"streams to {figures['model']} ({figures['mode']} loop)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    if figures["mode"] == "find-rate":
        table.add_row("goodput (streams/s, 90% within both targets)", f"{figures['goodput_rps']}")
        table.add_row("search limited by", str(figures["limited_by"]))
    for key in ("requests", "completed", "rejected", "failed", "parts", "parts_per_s",
                "requests_per_s", "parts_per_request", "slo_attainment"):  # fmt: skip
        table.add_row(key, str(shown.get(key)))
    if figures["mode"] != "find-rate":
        table.add_row("goodput_rps (within both targets)", str(shown.get("goodput_rps")))
    for key in ("ttft_ms", "tpot_ms"):
        values = shown.get(key) or {}
        table.add_row(key, " / ".join(f"{q} {values.get(q)}" for q in ("p50", "p90", "p99")))
    if shown.get("errors"):
        table.add_row("errors", str(shown["errors"]))
    console.print(table)
