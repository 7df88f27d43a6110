"""Issue 2's benchmark: Headway's per-request overhead against the bare inline Starlette app and
the bare no-op app (the HTTP ceiling), closed loop at 32 and at 1 connection, in one run.

Reference rows (issue 13): ``granian-noop`` (a no-op RSGI app on granian, the ceiling of a
Python handler) and ``nginx`` (answering a constant: the HTTP limit of the machine with this
client). Each system and concurrency is measured twice per round, by ``headway bench``'s load
generator and then by ``wrk`` (``bench/wrk.py``: 1 thread, ``--latency``), side by side.

All servers serve at once (idle ones cost nothing) and are measured in interleaved rounds
(Headway, inline, no-op, Headway, ...), so that a change in the machine's load between rounds
lands on all three alike; each figure is the median over the rounds. The workload is
``overhead``'s: one row of 20 features per request, ``predict_proba`` of the benchmark's
LogisticRegression (``bench/models.py``), the same OIP JSON bodies for all.

Targets: at 32 connections Headway's throughput >= 2x the inline app's (reported as a share of
the no-op ceiling too); at 1 connection Headway's p50 within 0.5 ms and p99 within 1 ms of the
inline app's. The table goes to stdout and into ``bench/RESULTS.md`` (between
``<!-- overhead.py -->`` markers, kept by ``run.py``); the raw figures to ``bench/.work``.

    python bench/overhead.py [--rounds 3] [--duration 5] [--warmup 1] [--only a,b]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import models
import numpy as np
import wrk
from harness import Endpoint, bodies, closed
from peers.common import WORK, Server, check, ensure_venv
from systems import BUSY_POLL_US, BY_NAME

from headway.launcher import free_port

SYSTEMS = ("headway", "starlette", "noop", "headway-inline", "headway-poll", "headway-inline-poll",
           "headway-granian", "granian-noop", "nginx")  # fmt: skip
#: Systems that serve no model: they answer a constant.
REFERENCES = ("noop", "granian-noop", "nginx")
#: What the verdicts compare: always measured.
REQUIRED = ("headway", "starlette", "noop")
BLOCK = re.compile(r"<!-- overhead.py -->.*?<!-- /overhead.py -->", re.S)
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def median_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median throughput, p50 and p99 over rounds, and the worst interference seen."""
    return {
        "throughput_rps": round(statistics.median(r["throughput_rps"] or 0 for r in runs), 1),
        "p50_ms": round(statistics.median(r["latency_ms"]["p50"] for r in runs), 3),
        "p99_ms": round(statistics.median(r["latency_ms"]["p99"] for r in runs), 3),
        "not_ok": sum(r["requests"] - r["ok"] for r in runs),
        "server_cores": round(statistics.median(r["server_cores"] for r in runs), 2),
        "other_cores_max": max(r["other_cores"] for r in runs),
        "rounds": [{"rps": r["throughput_rps"], "p50": r["latency_ms"]["p50"],
                    "p99": r["latency_ms"]["p99"], "other": r["other_cores"]} for r in runs],
    }  # fmt: skip


def wrk_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median throughput, p50 and p99 over wrk's rounds."""
    return {
        "throughput_rps": round(statistics.median(r["throughput_rps"] for r in runs), 1),
        "p50_ms": round(statistics.median(r["latency_ms"]["p50"] for r in runs), 3),
        "p99_ms": round(statistics.median(r["latency_ms"]["p99"] for r in runs), 3),
        "not_ok": sum(r["requests"] - r["ok"] for r in runs),
        "rounds": [{"rps": r["throughput_rps"], "p50": r["latency_ms"]["p50"],
                    "p99": r["latency_ms"]["p99"]} for r in runs],
    }  # fmt: skip


def wrk_verdicts(fig: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[str, bool, str]]:
    """Issue 13's targets, on wrk's figures."""
    out: list[tuple[str, bool, str]] = []
    h, bare = fig["headway"], fig["starlette"]
    if "granian-noop" in fig:
        h32, g32 = h["wrk32"]["throughput_rps"], fig["granian-noop"]["wrk32"]["throughput_rps"]
        out.append(("(issue 13, wrk) c=32: Headway >= 0.8x the granian no-op app", h32 >= 0.8 * g32,
                    f"{h32:,.0f} vs {g32:,.0f} req/s = {h32 / g32:.2f}x"))  # fmt: skip
    d99 = h["wrk1"]["p99_ms"] - bare["wrk1"]["p99_ms"]
    out += [
        ("(issue 13, wrk) c=1: Headway p50 <= the bare inline app's",
         h["wrk1"]["p50_ms"] <= bare["wrk1"]["p50_ms"],
         f"{h['wrk1']['p50_ms']:.3f} vs {bare['wrk1']['p50_ms']:.3f} ms"),
        ("(issue 13, wrk) c=1: Headway p99 <= the bare inline app's + 0.5 ms", d99 <= 0.5,
         f"{h['wrk1']['p99_ms']:.3f} vs {bare['wrk1']['p99_ms']:.3f} ms ({d99:+.3f} ms)"),
    ]  # fmt: skip
    if "headway-inline" in fig:
        i50, b50 = fig["headway-inline"]["wrk1"]["p50_ms"], bare["wrk1"]["p50_ms"]
        out.append(("(issue 13, wrk) c=1: --engine inline p50 <= 0.9x the bare app's",
                    i50 <= 0.9 * b50, f"{i50:.3f} vs {b50:.3f} ms = {i50 / b50:.2f}x"))  # fmt: skip
    return out


def verdicts(fig: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[str, bool, str]]:
    h32, i32, n32 = (fig[s]["c32"]["throughput_rps"] for s in ("headway", "starlette", "noop"))
    h1, i1 = fig["headway"]["c1"], fig["starlette"]["c1"]
    d50, d99 = h1["p50_ms"] - i1["p50_ms"], h1["p99_ms"] - i1["p99_ms"]
    return [
        ("c=32: Headway >= 2x the inline app's throughput", h32 >= 2 * i32,
         f"{h32:,.0f} vs {i32:,.0f} req/s = {h32 / i32:.2f}x; Headway = {h32 / n32:.0%} of the "
         f"no-op ceiling ({n32:,.0f} req/s)"),
        ("c=1: Headway p50 within 0.5 ms of the inline app's", d50 <= 0.5,
         f"{h1['p50_ms']:.3f} vs {i1['p50_ms']:.3f} ms ({d50:+.3f} ms)"),
        ("c=1: Headway p99 within 1 ms of the inline app's", d99 <= 1.0,
         f"{h1['p99_ms']:.3f} vs {i1['p99_ms']:.3f} ms ({d99:+.3f} ms)"),
    ] + [
        (f"(issue 3) c=1: {name} p50 <= the inline app's", fig[name]["c1"]["p50_ms"] <= i1["p50_ms"],
         f"{fig[name]['c1']['p50_ms']:.3f} vs {i1['p50_ms']:.3f} ms")
        for name in fig if name.startswith("headway-")  # the other Headway configurations
    ] + wrk_verdicts(fig)  # fmt: skip


def markdown(data: dict[str, Any]) -> str:
    fig = data["figures"]
    h = fig["headway"]
    lines = [
        "<!-- overhead.py -->",
        "## Issue 2: `bench/overhead.py` (Headway vs the bare inline app vs the no-op app)",
        "",
        "`headway-inline` is Headway with `--engine inline` (the model in the HTTP process, no "
        "worker process); `headway` runs it in a worker process, as by default. The `-poll` "
        f"configurations add `--busy-poll-us {BUSY_POLL_US}` (the frontend and the worker poll "
        "for their next read instead of sleeping).",
        "",
        f"Run {data['date']} on {data['machine']}; {data['rounds']} interleaved rounds of "
        f"{data['duration']:g} s (after {data['warmup']:g} s warm-up) per system and "
        f"concurrency, medians; {data['wall_s']:.0f} s in all. Ratios are system / Headway. "
        f"The machine was shared with other engineers' tests (1-min load average "
        f"{data['load'][0]:g} at the start, {data['load'][1]:g} at the end): absolute figures "
        "are noisy, the ratios from interleaved rounds less so.",
        "",
        "| system | c=32 req/s | / Headway | c=32 p50 ms | c=32 p99 ms | c=1 p50 ms | / Headway "
        "| c=1 p99 ms | / Headway | others' cores (max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in fig:
        c32, c1 = fig[name]["c32"], fig[name]["c1"]
        lines.append(
            f"| {name} | {c32['throughput_rps']:,.0f} | "
            f"{c32['throughput_rps'] / h['c32']['throughput_rps']:.2f}x | {c32['p50_ms']:.2f} | "
            f"{c32['p99_ms']:.2f} | {c1['p50_ms']:.3f} | {c1['p50_ms'] / h['c1']['p50_ms']:.2f}x "
            f"| {c1['p99_ms']:.3f} | {c1['p99_ms'] / h['c1']['p99_ms']:.2f}x | "
            f"{max(c32['other_cores_max'], c1['other_cores_max'])} |"
        )
    g = fig.get("granian-noop", h)["wrk32"]["throughput_rps"]
    lines += [
        "",
        "The same servers in the same rounds, measured by `wrk` (1 thread, `--latency`; one body "
        "repeated, where `headway bench` cycles 16 rows). Ratios: c=32 throughput / the granian "
        "no-op app's; c=1 p50 / `headway bench`'s p50 of the same system (the clients' agreement).",
        "",
        "| system | wrk c=32 req/s | / granian-noop | wrk c=32 p99 ms | wrk c=1 p50 ms "
        "| wrk / headway bench | wrk c=1 p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in fig:
        w32, w1 = fig[name]["wrk32"], fig[name]["wrk1"]
        lines.append(
            f"| {name} | {w32['throughput_rps']:,.0f} | {w32['throughput_rps'] / g:.2f}x | "
            f"{w32['p99_ms']:.2f} | {w1['p50_ms']:.3f} | "
            f"{w1['p50_ms'] / fig[name]['c1']['p50_ms']:.2f} | {w1['p99_ms']:.3f} |"
        )
    lines += ["", "| target | result | measured |", "|---|---|---|"]
    lines += [f"| {name} | {'met' if ok else '**missed**'} | {detail} |"
              for name, ok, detail in data["verdicts"]]  # fmt: skip
    lines.append("<!-- /overhead.py -->")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    parser.add_argument("--only", help=f"comma-separated systems ({', '.join(REQUIRED)} always)")
    args = parser.parse_args()
    systems = SYSTEMS
    if args.only:
        wanted = {n.strip() for n in args.only.split(",")} | set(REQUIRED)
        unknown = wanted - set(SYSTEMS)
        if unknown:
            parser.error(f"unknown system(s) {sorted(unknown)}; choose from {SYSTEMS}")
        systems = tuple(n for n in SYSTEMS if n in wanted)
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    paths = models.ensure()
    x, _ = models.dataset()
    payload = bodies(x[100:116], "FP64", "probabilities")
    expected = models.reference(paths)["lr"]
    ensure_venv("starlette", WORK / "logs" / "venv-starlette.log")
    work = WORK / "overhead"
    servers: dict[str, tuple[Server, Endpoint]] = {}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {"c32": [], "c1": [], "wrk32": [], "wrk1": []} for s in systems
    }
    lua = wrk.script(payload[0], work / "wrk")
    try:
        for name in systems:
            port = free_port()
            kind = "noop" if name in REFERENCES else "lr"
            server = BY_NAME[name].server(kind, paths, port, work)
            servers[name] = (server.start(), Endpoint(f"http://127.0.0.1:{port}", kind))
            if name not in REFERENCES:
                endpoint = servers[name][1]
                result = check(endpoint.url + endpoint.path, bodies(np.load(paths.rows), "FP64",
                               "probabilities"), expected, atol=1e-9)  # fmt: skip
                print(f"{name}: answers {'OK' if result.ok else 'WRONG'} ({result.detail})")
                if not result.ok:
                    raise SystemExit(f"{name} gives wrong answers: {result.detail}")
        for r in range(args.rounds):
            for c in (32, 1):
                for name in systems:
                    server, endpoint = servers[name]
                    f = closed(endpoint, payload, c, args.duration, args.warmup, server)
                    runs[name][f"c{c}"].append(f)
                    w = wrk.closed(endpoint.url + endpoint.path, lua, c, args.duration)
                    runs[name][f"wrk{c}"].append(w)
                    print(f"round {r + 1} c={c} {name}: {f['throughput_rps']:,.0f} req/s, p50 "
                          f"{f['latency_ms']['p50']:.3f} p99 {f['latency_ms']['p99']:.3f} ms "
                          f"(others {f['other_cores']} cores); wrk {w['throughput_rps']:,.0f} "
                          f"req/s, p50 {w['latency_ms']['p50']:.3f} p99 "
                          f"{w['latency_ms']['p99']:.3f} ms", flush=True)  # fmt: skip
    finally:
        for server, _ in servers.values():
            with contextlib.suppress(Exception):
                server.stop()
    figures = {
        s: {c: (wrk_figures if c.startswith("wrk") else median_figures)(v)
            for c, v in runs[s].items()}
        for s in systems
    }  # fmt: skip
    from machine import machine  # the same machine line as the full suite

    m = machine()
    data = {
        "date": m["date"], "machine": f"nproc {m['nproc']}, {m['cpu']}, {m['memory']}",
        "rounds": args.rounds, "duration": args.duration, "warmup": args.warmup,
        "figures": figures, "verdicts": verdicts(figures),
        "wall_s": round(time.perf_counter() - started, 1),
        "load": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }  # fmt: skip
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (WORK / f"overhead-{stamp}.json").write_text(json.dumps(data, indent=1))
    block = markdown(data)
    print()
    print(block)
    if not args.no_write:
        text = RESULTS.read_text() if RESULTS.exists() else "# Headway side by side: results\n"
        if BLOCK.search(text):
            text = BLOCK.sub(lambda _: block, text)
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
