"""`headway bench --find-rate`: the trials of `headway.loadgen.rate_search`, measured by
`headway.cli.bench_runs`, and the search's report as a table or JSON."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from headway.cli.bench_runs import Load
from headway.loadgen import arrivals, rate_search, report


def search_rate(
    load: Load,
    settings: dict[str, Any],
    rate: float | None,
    concurrency: int,
    arrival: str,
    cv: float | None,
    seed: int,
    trials: int,
    as_json: bool,
) -> None:
    """`--find-rate`: the search of `headway.loadgen.rate_search`, its trials measured here."""
    say = load.err.print
    closed = None
    if rate is None:
        say(f"closed loop at concurrency {concurrency}, to start from its throughput ...")
        closed = load.measure(concurrency=concurrency)
        rate = closed["throughput_rps"]
        if not rate:
            raise click.ClickException(
                f"no 200 answers in {load.duration:g} s of a closed loop at concurrency "
                f"{concurrency} ({closed['requests']} requests sent after the warm-up; statuses "
                f"{closed['status_counts'] or 'none'}, "
                f"{closed['timeouts']} timed out, {closed['transport_errors']} transport "
                "errors): nothing to start a search from; "
                "check the model with a plain `headway bench`, or give --rate"
            )
        say(f"  {rate:,.1f} req/s closed loop")
    search = rate_search.RateSearch(rate, max_trials=trials)
    while (next_rate := search.next_rate()) is not None:
        schedule = arrivals.schedule(next_rate, load.warmup + load.duration, arrival, cv, seed)
        trial = rate_search.judge(next_rate, load.measure(schedule=schedule))
        search.record(trial)
        say(f"trial {len(search.trials)}/{trials}: {_trial_line(trial)}")
    outcome = {
        **settings,
        "mode": "find-rate",
        "rate": None,
        "slo_ms": load.slo_ms,
        "duration_s": load.duration,
        "goodput_share": rate_search.GOODPUT_SHARE,
        "on_time_share": rate_search.ON_TIME_SHARE,
        "closed_loop": closed,
        "closed_loop_concurrency": concurrency if closed is not None else None,
        "start_rps": rate,
        "sustained_rps": _offered(search.best),
        "failed_rps": _offered(search.failed),
        "limited_by": search.limited_by,
        "trials": [
            {"rate": t.rate, "offered_rps": round(t.offered, 2), "verdict": t.verdict, **t.figures}
            for t in search.trials
        ],
    }
    if as_json:
        click.echo(orjson.dumps(outcome).decode())
    else:
        _render_search(outcome, search, Console(file=sys.stdout))


def _offered(trial: rate_search.Trial | None) -> float | None:
    """What `trial` actually offered (requests a second in its window), if there is one."""
    return None if trial is None else round(trial.offered, 2)


def _trial_line(trial: rate_search.Trial) -> str:
    f = trial.figures
    return (
        f"{trial.offered:,.1f} req/s offered, {f['goodput_rps'] or 0:,.1f} good/s "
        f"({trial.attainment:.1%} in time), p99 {report.format_ms(f['latency_ms']['p99'], 1)} ms, "
        f"generator late {trial.own_lateness_p99_ms:.1f} ms at p99: {trial.verdict}"
    )


def _render_search(outcome: dict[str, Any], search: rate_search.RateSearch, out: Console) -> None:
    slo = outcome["slo_ms"]
    out.print(
        f"[bold]{outcome['model']}[/] at {outcome['url']}: the highest open-loop rate answered "
        f"within {slo:g} ms ({outcome['arrival']} arrivals, batch {outcome['batch']}, "
        f"{outcome['duration_s']:g} s a trial)"
    )
    table = Table(caption="offered: requests a second in the trial's window; late: how late "
                  "the load generator got to its sends", caption_justify="left")  # fmt: skip
    for name in ("trial", "offered/s", "good/s", "in time", "p99 ms", "late p99 ms", "verdict"):
        table.add_column(name, justify="left" if name == "verdict" else "right")
    ordered = sorted(enumerate(search.trials, 1), key=lambda pair: pair[1].rate)
    for i, trial in ordered:
        p99 = report.format_ms(trial.figures["latency_ms"]["p99"], 1)
        table.add_row(str(i), f"{trial.offered:,.1f}", f"{trial.figures['goodput_rps'] or 0:,.1f}",
                      f"{trial.attainment:.1%}", p99,
                      f"{trial.own_lateness_p99_ms:.1f}", trial.verdict)  # fmt: skip
    out.print(table)
    sustained, failed, why = outcome["sustained_rps"], outcome["failed_rps"], outcome["limited_by"]
    if sustained is None:
        assert search.failed is not None  # a search ends without a pass only on a failure
        out.print(f"[bold]No rate sustained[/]: down to {search.failed.rate:,.1f} req/s fewer than "
                  f"{outcome['goodput_share']:.0%} of requests got a 200 within {slo:g} ms.")  # fmt: skip
        return
    closed = outcome["closed_loop"]
    share = ""
    if closed is not None and closed["throughput_rps"]:
        share = (f" ({sustained / closed['throughput_rps']:.0%} of the closed loop's "
                 f"{closed['throughput_rps']:,.1f} at concurrency {outcome['closed_loop_concurrency']})")  # fmt: skip
    out.print(f"[bold]Sustained: {sustained:,.1f} req/s[/]{share}.")
    if why == "server":
        out.print(f"At {failed:,.1f} req/s the server missed the SLO.")
    elif why == "generator":
        out.print(f"At {failed:,.1f} req/s this load generator could not send on schedule: the "
                  "server may take more; run `headway bench` from another machine to find out.")  # fmt: skip
    elif failed is None:
        out.print("Every trial passed: the server takes at least this; raise --rate or --trials.")
    else:
        out.print(f"Out of trials before the bracket closed: at {failed:,.1f} req/s it failed; "
                  "raise --trials to narrow it.")  # fmt: skip
