"""Cloudflow's two optimisations on Headway's flows, re-run in rounds for a median and a spread.

The experiments of `bench/flows.py` (issue 14), on its server and example flows, with more
rounds and each round's figures kept:

- **fusion**: `examples/flows/chain.py` (pre-process -> model -> post-process -> format) with
  fusion on (one worker action) and off (four), closed loop at 32 connections (throughput)
  and at 1 (latency);
- **competitive execution**: `examples/flows/heavy_tail.py` (a Pareto-latency operator) with
  k=2 competing replicas and with one, open loop (Poisson) at the same rate; per round the
  p99 of each, and the p99 of every answer of all rounds pooled.

Rounds alternate the variants, so a busy moment of the shared machine falls on both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from bench.flows import check, closed, rounds, server_for_flows, wire

from headway.loadgen import arrivals, report
from headway.loadgen.client import Target, run


def open_loop(url: str, app: str, rate: float, duration: float, seed: int) -> dict[str, Any]:
    """`bench/flows.py`'s open loop, keeping every answer's latency."""
    schedule = arrivals.schedule(rate, 1.0 + duration, "poisson", seed=seed)
    tally = run(Target.parse(url), wire(url, app), duration=duration, warmup=1.0,
                schedule=schedule, drain_timeout=10.0)  # fmt: skip
    figures = report.summarize(tally, duration)
    figures["latencies_ms"] = [round(v * 1e3, 3) for v in tally.latencies]
    return figures


def experiment(work: Path, quick: bool, log: Any = print) -> dict[str, Any]:
    count = 1 if quick else 5
    fusion_s = 2.0 if quick else 4.0
    compete_rounds, compete_s, rate = (1, 4.0, 8.0) if quick else (6, 20.0, 8.0)
    repository, server = server_for_flows(work)
    out: dict[str, Any] = {"rounds": count, "fusion_duration_s": fusion_s,
                           "compete_rounds": compete_rounds, "compete_duration_s": compete_s,
                           "rate": rate}  # fmt: skip
    server.start(timeout=300)
    try:
        check(server.url, repository)
        log("  answers checked equal to flow.local")
        fusion = {}
        for connections in (32, 1):
            fusion[str(connections)] = rounds(
                count, ["chain", "chain-unfused"],
                lambda app, _, c=connections: closed(server.url, app, c, fusion_s),
            )  # fmt: skip
        out["fusion"] = fusion
        out["competitive"] = rounds(
            compete_rounds, ["heavy-k2", "heavy-k1"],
            lambda app, n: open_loop(server.url, app, rate, compete_s, seed=n),
        )  # fmt: skip
    finally:
        server.stop()
    return out


def ideal_p99_ms(copies: int) -> float:
    """The p99 of the fastest of `copies` independent draws of the example's Pareto sleep
    (P(X > x) = (scale / x) ** shape), had no copy ever waited for a worker."""
    from examples.flows import heavy_tail

    return 1e3 * heavy_tail.SCALE_S * 100 ** (1 / (copies * heavy_tail.SHAPE))


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """The headline ratios per round, and the pooled p99s."""
    fusion = out["fusion"]
    tput = [f["throughput_rps"] / u["throughput_rps"]
            for f, u in zip(fusion["32"]["chain"], fusion["32"]["chain-unfused"], strict=True)]  # fmt: skip
    p50 = [u["latency_ms"]["p50"] / f["latency_ms"]["p50"]
           for f, u in zip(fusion["1"]["chain"], fusion["1"]["chain-unfused"], strict=True)]  # fmt: skip
    comp = out["competitive"]
    p99 = [k1["latency_ms"]["p99"] / k2["latency_ms"]["p99"]
           for k2, k1 in zip(comp["heavy-k2"], comp["heavy-k1"], strict=True)]  # fmt: skip
    pooled = {v: float(np.percentile([x for r in comp[v] for x in r["latencies_ms"]], 99))
              for v in ("heavy-k2", "heavy-k1")}  # fmt: skip
    answers = {v: sum(len(r["latencies_ms"]) for r in comp[v]) for v in comp}
    return {"fusion_throughput_ratio": tput, "fusion_p50_ratio": p50, "compete_p99_ratio": p99,
            "compete_pooled_p99_ms": pooled, "compete_answers": answers,
            "compete_pooled_ratio": pooled["heavy-k1"] / pooled["heavy-k2"],
            "compete_ideal_p99_ms": {"heavy-k2": ideal_p99_ms(2), "heavy-k1": ideal_p99_ms(1)}}  # fmt: skip
