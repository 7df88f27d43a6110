"""Issue 16's benchmark: Headway's Ray engine against its local engine and against Ray Serve,
on one machine, in one run.

The workload is ``overhead.py``'s (one row of 20 features per request, ``predict_proba`` of
the benchmark's LogisticRegression, OIP JSON bodies), closed loop at 32 and at 1 connection.
Systems: ``headway`` (``--engine local --workers 1``, its worker on a Unix socket),
``headway-tcp`` (the same over ``tcp://127.0.0.1``: the Ray engine's transport without Ray),
``headway-ray`` (``--engine ray``: the
model's one replica is a Ray actor on a one-node Ray instance the server starts itself; the
data plane is the local engine's, over TCP instead of a Unix socket) and Ray Serve's two
configurations from ``systems.py`` (``ray``: no batching; ``ray-batch``: ``@serve.batch``),
each with its own one-node Ray instance. All serve at once and are measured in interleaved
rounds (each round in another order, with a pause after each run), medians over rounds.

Targets: the Ray engine >= 90% of the local engine's throughput at 32 connections and its p50
within 0.2 ms at 1 connection; Headway on Ray >= 10x the best Ray Serve configuration's
throughput at 32 connections. The table goes to stdout and into ``bench/RESULTS.md`` (between
``<!-- ray_engine.py -->`` markers); the raw figures to ``bench/.work``.

Ray Serve runs on this interpreter's Ray (``python -m pip install -e '.[ray]'`` brings Ray
Serve's own dependencies with ``ray[default]``; install ``ray[serve]`` if it is missing), not in
a venv of its own, so both sides run the same Ray.

    python bench/ray_engine.py [--rounds 3] [--duration 5] [--warmup 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import models
import numpy as np
from harness import Endpoint, bodies, closed
from overhead import median_figures
from peers.common import WORK, Server, check
from systems import BY_NAME, THREADS, _headway

from headway.launcher import free_port

SYSTEMS = ("headway", "headway-tcp", "headway-ray", "ray", "ray-batch")
BLOCK = re.compile(r"<!-- ray_engine.py -->.*?<!-- /ray_engine.py -->", re.S)
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def server(name: str, paths: models.ModelPaths, port: int, work: Path) -> Server:
    """`name` serving the LogisticRegression on `port`."""
    if name == "headway-ray":
        spec = _headway("lr", paths, port, work, "--engine", "ray")
    elif name == "headway-tcp":  # the local engine on the Ray engine's transport
        spec = _headway("lr", paths, port, work, "--endpoint", "tcp://127.0.0.1:0")
    elif name.startswith("ray"):  # Ray Serve's peer app, on this interpreter's Ray
        spec = BY_NAME[name].launch("lr", paths, port, work)
        spec = replace(spec, argv=[sys.executable, *spec.argv[1:]])
    else:
        return BY_NAME[name].server("lr", paths, port, work)
    return Server(
        name=f"{name}/lr", argv=spec.argv,
        ready_url=f"http://127.0.0.1:{port}{spec.ready_path.format(model='lr')}",
        log=work / "logs" / f"{name}-lr.log", env={**THREADS, **spec.env}, cwd=spec.cwd,
        cleanup=spec.cleanup,
    )  # fmt: skip


def verdicts(fig: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[str, bool, str]]:
    local, ray_engine = fig["headway"], fig["headway-ray"]
    t_local, t_ray = local["c32"]["throughput_rps"], ray_engine["c32"]["throughput_rps"]
    d50 = ray_engine["c1"]["p50_ms"] - local["c1"]["p50_ms"]
    best = max(("ray", "ray-batch"), key=lambda s: fig[s]["c32"]["throughput_rps"])
    t_serve = fig[best]["c32"]["throughput_rps"]
    return [
        ("c=32: --engine ray >= 90% of --engine local's throughput", t_ray >= 0.9 * t_local,
         f"{t_ray:,.0f} vs {t_local:,.0f} req/s = {t_ray / t_local:.0%}"),
        ("c=1: --engine ray p50 within 0.2 ms of --engine local's", d50 <= 0.2,
         f"{ray_engine['c1']['p50_ms']:.3f} vs {local['c1']['p50_ms']:.3f} ms ({d50:+.3f} ms)"),
        ("c=32: --engine ray >= 10x Ray Serve's best configuration", t_ray >= 10 * t_serve,
         f"{t_ray:,.0f} vs {t_serve:,.0f} req/s ({best}) = {t_ray / max(t_serve, 1e-9):.1f}x"),
    ]  # fmt: skip


def markdown(data: dict[str, Any]) -> str:
    fig = data["figures"]
    h = fig["headway"]
    lines = [
        "<!-- ray_engine.py -->",
        "## Issue 16: `bench/ray_engine.py` (Headway on Ray vs Headway local vs Ray Serve)",
        "",
        "`headway` is `--engine local --workers 1` (one worker process over a Unix socket); "
        "`headway-tcp` the same over `tcp://127.0.0.1` (the Ray engine's transport, no Ray); "
        "`headway-ray` is `--engine ray` (the model's one replica a Ray actor on a one-node Ray "
        "instance the server started, talking to the frontend over TCP); `ray` and `ray-batch` "
        "are Ray Serve (1 replica; `@serve.batch(32, 10 ms)` for `ray-batch`), each on its own "
        "one-node Ray instance.",
        "",
        f"Run {data['date']} on {data['machine']} ({data['headway']}), shared with other "
        f"engineers' work (the `others' cores` column: other processes' CPU during each run); "
        f"{data['rounds']} interleaved rounds of {data['duration']:g} s (after "
        f"{data['warmup']:g} s warm-up) per system and concurrency, each round in another "
        f"order with {data['settle']:g} s between runs, medians; {data['wall_s']:.0f} s in "
        f"all. Ratios are system / `headway`.",
        "",
        "| system | c=32 req/s | / headway | c=32 p50 ms | c=32 p99 ms | c=1 p50 ms | c=1 p99 ms "
        "| not ok | others' cores (max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in SYSTEMS:
        c32, c1 = fig[name]["c32"], fig[name]["c1"]
        lines.append(
            f"| {name} | {c32['throughput_rps']:,.0f} | "
            f"{c32['throughput_rps'] / h['c32']['throughput_rps']:.2f}x | {c32['p50_ms']:.2f} | "
            f"{c32['p99_ms']:.2f} | {c1['p50_ms']:.3f} | {c1['p99_ms']:.3f} | "
            f"{c32['not_ok'] + c1['not_ok']} | "
            f"{max(c32['other_cores_max'], c1['other_cores_max'])} |"
        )
    lines += ["", "| target | result | measured |", "|---|---|---|"]
    lines += [f"| {name} | {'met' if ok else '**missed**'} | {detail} |"
              for name, ok, detail in data["verdicts"]]  # fmt: skip
    tcp, on_ray = fig["headway-tcp"], fig["headway-ray"]
    lines += [
        "",
        "The same data plane without Ray (`headway-tcp` vs `headway-ray`): c=32 "
        f"{tcp['c32']['throughput_rps']:,.0f} vs {on_ray['c32']['throughput_rps']:,.0f} req/s, "
        f"c=1 p50 {tcp['c1']['p50_ms']:.3f} vs {on_ray['c1']['p50_ms']:.3f} ms.",
        "<!-- /ray_engine.py -->",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between runs")
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    started = time.perf_counter()
    paths = models.ensure()
    x, _ = models.dataset()
    payload = bodies(x[100:116], "FP64", "probabilities")
    expected = models.reference(paths)["lr"]
    work = WORK / "ray-engine"
    servers: dict[str, tuple[Server, Endpoint]] = {}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {"c32": [], "c1": []} for s in SYSTEMS}
    try:
        for name in SYSTEMS:
            port = free_port()
            servers[name] = (
                server(name, paths, port, work).start(timeout=300),
                Endpoint(f"http://127.0.0.1:{port}", "lr"),
            )
            endpoint = servers[name][1]
            result = check(endpoint.url + endpoint.path, bodies(np.load(paths.rows), "FP64",
                           "probabilities"), expected, atol=1e-9)  # fmt: skip
            print(f"{name}: answers {'OK' if result.ok else 'WRONG'} ({result.detail})")
            if not result.ok:
                raise SystemExit(f"{name} gives wrong answers: {result.detail}")
        for r in range(args.rounds):
            for c in (32, 1):
                # each round in another order, and a pause after each run: Ray Serve works off
                # the requests still queued in its proxy after the clients left, for seconds,
                # which would land on whichever system is measured next
                for name in SYSTEMS[r % len(SYSTEMS) :] + SYSTEMS[: r % len(SYSTEMS)]:
                    srv, endpoint = servers[name]
                    f = closed(endpoint, payload, c, args.duration, args.warmup, srv)
                    time.sleep(args.settle)
                    runs[name][f"c{c}"].append(f)
                    print(f"round {r + 1} c={c} {name}: {f['throughput_rps']:,.0f} req/s, p50 "
                          f"{f['latency_ms']['p50']:.3f} p99 {f['latency_ms']['p99']:.3f} ms "
                          f"(others {f['other_cores']} cores)", flush=True)  # fmt: skip
    finally:
        for srv, _ in servers.values():
            with contextlib.suppress(Exception):
                srv.stop()
    figures = {s: {c: median_figures(v) for c, v in runs[s].items()} for s in SYSTEMS}
    from machine import machine  # the same machine line as the full suite

    m = machine()
    data = {
        "date": m["date"], "machine": f"nproc {m['nproc']}, {m['cpu']}, {m['memory']}",
        "headway": m["headway"], "rounds": args.rounds, "duration": args.duration,
        "warmup": args.warmup, "settle": args.settle, "figures": figures, "verdicts": verdicts(figures),
        "wall_s": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (WORK / f"ray-engine-{stamp}.json").write_text(json.dumps(data, indent=1))
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
