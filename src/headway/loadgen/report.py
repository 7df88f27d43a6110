"""Figures of a run (throughput, goodput, counts, latency percentiles) as a table or as JSON.

Percentiles are nearest-rank: each is a latency that some request actually had (`summarize`
defines every figure).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from headway.loadgen.tally import LoadTally

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}


def percentiles_ms(samples: list[float], keys: dict[str, float] = PERCENTILES) -> dict[str, Any]:
    """Nearest-rank percentiles, min, mean and max of ``samples`` (seconds) in milliseconds."""
    names = [*keys, "min", "mean", "max"]
    if not samples:
        return dict.fromkeys(names)
    values = np.asarray(samples, dtype=np.float64) * 1e3
    points = np.percentile(values, list(keys.values()), method="inverted_cdf")
    out = {name: round(float(v), 3) for name, v in zip(keys, points, strict=True)}
    out["min"] = round(float(values.min()), 3)
    out["mean"] = round(float(values.mean()), 3)
    out["max"] = round(float(values.max()), 3)
    return out


def summarize(tally: LoadTally, duration: float, slo_ms: float | None = None) -> dict[str, Any]:
    """Every figure of a run, as plain JSON-ready values.

    Latency percentiles cover the 200 answers; rates divide by the measured window (warm-up
    excluded). ``throughput_rps``: 200 answers per second; ``goodput_rps``: 200 answers within
    the SLO per second (equals throughput without an SLO); ``slo_attainment``: 200 answers
    within the SLO over all requests in the window; ``rejected``: 429 or 503 answers;
    ``errors``: any other non-200 answer; ``transport_errors``: no answer (refused, reset,
    unparseable); ``timeouts``: no answer within the drain timeout; ``capped``: open-loop
    requests that could not go out on schedule because every allowed connection was busy
    (their latency still counts from the schedule); ``expired``: with deadline propagation,
    requests not sent because their deadline passed while they waited in the client;
    ``send_lateness_ms``: open loop, send time
    less scheduled time, of every request; ``own_send_lateness_ms``: when the load generator got
    to each request (to send it, or to queue it when every allowed connection was busy) less
    its scheduled time: its own delay, without the waits for a connection, which a server
    that holds every connection causes."""
    ok = tally.ok
    if slo_ms is None:
        good = ok
    else:
        good = int(np.count_nonzero(np.asarray(tally.latencies) * 1e3 <= slo_ms)) if ok else 0
    answered = ok + tally.rejected + tally.errors
    per_s = (lambda n: round(n / duration, 2)) if duration > 0 else (lambda n: None)
    statuses = {str(k): v for k, v in sorted({200: ok, **tally.statuses}.items()) if v}
    return {
        "duration_s": duration,
        "requests": tally.scheduled,
        "answered": answered,
        "ok": ok,
        "rejected": tally.rejected,
        "errors": tally.errors,
        "transport_errors": tally.transport_errors,
        "timeouts": tally.timeouts,
        "capped": tally.capped,
        "expired": tally.expired,
        "status_counts": statuses,
        "throughput_rps": per_s(ok),
        "response_rps": per_s(answered),
        "goodput_rps": per_s(good),
        "slo_ms": slo_ms,
        "slo_attainment": round(good / tally.scheduled, 4) if tally.scheduled else None,
        "latency_ms": percentiles_ms(tally.latencies),
        "send_lateness_ms": percentiles_ms(tally.lateness, {"p50": 50.0, "p99": 99.0}),
        "own_send_lateness_ms": percentiles_ms(tally.own_lateness, {"p50": 50.0, "p99": 99.0}),
        "rejection_latency_ms": percentiles_ms(tally.rejections, {"p50": 50.0, "p99": 99.0}),
        "sent_total": tally.sent,
        "peak_connections": tally.peak_connections,
    }


def format_ms(value: float | None, digits: int = 2) -> str:
    """A figure in milliseconds for a table: "-" where there was nothing to measure."""
    return "-" if value is None else f"{value:.{digits}f}"


def _p50_p99(percentiles: dict[str, Any]) -> str:
    return f"{format_ms(percentiles['p50'])} / {format_ms(percentiles['p99'])} ms"


def render(figures: dict[str, Any], console: Console) -> None:
    """The figures as two small tables: counts and rates, then latency."""
    if figures.get("rate") is not None:
        how = f"open loop, {figures['rate']:g} req/s {figures.get('arrival') or ''}"
    else:
        how = f"closed loop, concurrency {figures.get('concurrency')}"
    console.print(
        f"[bold]{figures.get('model', '')}[/] at {figures.get('url', '')}: {how}, "
        f"batch {figures.get('batch', 1)}, {figures['duration_s']:g} s measured"
    )
    counts = Table(show_header=False)
    counts.add_column(style="bold")
    counts.add_column(justify="right")
    slo = figures["slo_ms"]
    rows = [
        ("requests (window)", f"{figures['requests']:,}"),
        ("ok (200)", f"{figures['ok']:,}"),
        ("rejected (429/503)", f"{figures['rejected']:,}"),
        ("errors (other status)", f"{figures['errors']:,}"),
        ("transport errors", f"{figures['transport_errors']:,}"),
        ("timeouts", f"{figures['timeouts']:,}"),
        ("throughput", f"{figures['throughput_rps'] or 0:,.1f} req/s"),
        (
            f"goodput (<= {slo:g} ms)" if slo is not None else "goodput (no SLO)",
            f"{figures['goodput_rps'] or 0:,.1f} req/s",
        ),
    ]
    if figures.get("rate") is not None:
        rows.append(("capped (max connections)", f"{figures['capped']:,}"))
        if figures.get("expired"):
            rows.append(("expired in the client (not sent)", f"{figures['expired']:,}"))
        rows.append(("send lateness p50 / p99", _p50_p99(figures["send_lateness_ms"])))
        rows.append(("own send lateness p50 / p99", _p50_p99(figures["own_send_lateness_ms"])))
    if figures["rejected"]:
        rows.append(("rejections answered p50 / p99", _p50_p99(figures["rejection_latency_ms"])))
    rows.append(("peak connections", f"{figures['peak_connections']:,}"))
    for row in rows:
        counts.add_row(*row)
    if len(figures["status_counts"]) > 1:
        counts.add_row(
            "status codes", ", ".join(f"{k}: {v:,}" for k, v in figures["status_counts"].items())
        )

    latency = Table(title="latency of 200 answers (ms)", title_justify="left")
    keys = [*PERCENTILES, "max"]
    for key in keys:
        latency.add_column(key, justify="right")
    latency.add_row(*(format_ms(figures["latency_ms"][k]) for k in keys))
    console.print(counts)
    console.print(latency)
