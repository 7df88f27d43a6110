"""Flows experiments (issue 14), side by side in one run, as ratios; writes `RESULTS-flows.md`.

    python bench/flows.py [--duration 8] [--rounds 3] [--peers] [--only cascade]

One `headway serve` (2 workers) serves the example flows (`examples/flows/`) twice each:
- **fusion**: `chain` (pre-process -> model -> post-process -> format) with fusion on (one
  worker action) and off (four actions), closed loop at 32 and at 1 connection;
- **competitive execution**: `heavy-tail` (a Pareto-latency function) with k=2 competing
  clones and with competition off, open loop (Poisson) at the same offered rate;
- with `--peers`: the `cascade` against the same pipeline composed with Ray Serve deployment
  handles and with BentoML's `bentoml.depends` (`bench/cascade_peers.py`, each peer in its
  venv), closed loop at 32 connections.
Answers are checked equal (to `flow.local`, and across the variants) before anything is timed.
Rounds alternate the variants, so a busy moment of the shared machine hits both; each figure
is the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from tests.flows.examples import EXAMPLES, flow, inputs, models, same  # noqa: E402

from headway.flows import LocalServices  # noqa: E402
from headway.launcher import ServerProcess  # noqa: E402
from headway.loadgen import arrivals, report  # noqa: E402
from headway.loadgen.client import Target, http_request, run  # noqa: E402
from headway.loadgen.workload import Body  # noqa: E402

WORK = BENCH / ".work" / "flows"
APPS = {
    "chain": {"flow": "chain.py:flow"},
    "chain-unfused": {"flow": "chain.py:flow", "fusion": False},
    "heavy-k2": {"flow": "heavy_tail.py:flow", "slo_ms": 5000},
    "heavy-k1": {"flow": "heavy_tail.py:flow", "compete": False, "slo_ms": 5000},
    "cascade": {"flow": "cascade.py:flow"},
}
EXAMPLE_OF = {"chain": "chain", "chain-unfused": "chain", "heavy-k2": "heavy_tail",
              "heavy-k1": "heavy_tail", "cascade": "cascade"}  # fmt: skip


def machine() -> dict[str, Any]:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")), platform.processor(),
    )  # fmt: skip
    return {"cpus": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "load_1m": os.getloadavg()[0]}  # fmt: skip


def stamp() -> str:
    """When a section was measured, and how busy the machine was."""
    return f"measured {time.strftime('%H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}"


def payloads(app: str, count: int = 64) -> list[bytes]:
    rows = inputs(EXAMPLE_OF[app], count)
    return [orjson.dumps({"input": r.tolist() if hasattr(r, "tolist") else r}) for r in rows]


def wire(url: str, app: str) -> list[bytes]:
    target = Target.parse(url)
    return [http_request(target, f"/apps/{app}/predict", Body(p)) for p in payloads(app)]


def check(url: str, repository: Path) -> None:
    """Every variant answers as `flow.local` does, before anything is timed."""
    local = LocalServices(lookups=models.lookups(), repository=repository)
    client = httpx.Client(timeout=60)
    for app, name in EXAMPLE_OF.items():
        example = flow(name)
        for row in inputs(name, 16):
            value = row.tolist() if hasattr(row, "tolist") else row
            deadline = time.monotonic() + 60
            while True:  # the first actions of a stage are cold: 503 until it is measured
                answer = client.post(f"{url}/apps/{app}/predict", json={"input": value})
                if answer.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert answer.status_code == 200, answer.text
            expected = example.local([row], local).records()
            assert same(answer.json()["output"], expected), (app, answer.text, expected)
    client.close()


def closed(url: str, app: str, concurrency: int, duration: float) -> dict[str, Any]:
    tally = run(Target.parse(url), wire(url, app), duration=duration, warmup=1.0,
                concurrency=concurrency)  # fmt: skip
    return report.summarize(tally, duration)


def open_loop(url: str, app: str, rate: float, duration: float, seed: int) -> dict[str, Any]:
    schedule = arrivals.schedule(rate, 1.0 + duration, "poisson", seed=seed)
    tally = run(Target.parse(url), wire(url, app), duration=duration, warmup=1.0,
                schedule=schedule, drain_timeout=10.0)  # fmt: skip
    return report.summarize(tally, duration)


def median(runs: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for figures in runs:
        value: Any = figures
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            values.append(float(value))
    return statistics.median(values) if values else None


def rounds(count: int, variants: list[str], measure: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for number in range(count):
        order = variants if number % 2 == 0 else variants[::-1]
        for variant in order:
            figures = measure(variant, number)
            out[variant].append(figures)
            print(variant, json.dumps({k: figures.get(k) for k in ("throughput_rps", "rejected",
                  "errors", "latency_ms")}), flush=True)  # fmt: skip
    return out


def operators(url: str, app: str) -> list[dict[str, Any]]:
    described = httpx.get(f"{url}/apps/{app}", timeout=30).json()
    return described["statistics"]["operators"]


def defaults(url: str, app: str) -> int:
    return int(httpx.get(f"{url}/apps/{app}", timeout=30).json()["statistics"]["defaults"])


def server_for_flows(work: Path = WORK) -> tuple[Path, ServerProcess]:
    """The repository of the example flows' models (built once) and a server (not started)
    with every variant of `APPS` as an application, on a fresh state database."""
    work.mkdir(parents=True, exist_ok=True)
    repository = work / "repository"
    if not repository.exists():
        models.build(repository)
    for example in set(EXAMPLE_OF.values()):  # a config's flow files lie beside it
        shutil.copy(EXAMPLES / f"{example}.py", work)
    (work / "headway.yaml").write_text(yaml.safe_dump({"apps": APPS}))
    (work / "state.db").unlink(missing_ok=True)
    server = ServerProcess(repository, state=work / "state.db", workers=2,
                           extra=["--config", str(work / "headway.yaml")], log=work / "server.log")  # fmt: skip
    return repository, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=8.0, help="heavy-tail offered req/s")
    parser.add_argument("--peers", action="store_true",
                        help="also the cascade on Ray Serve and BentoML")  # fmt: skip
    parser.add_argument("--only", choices=["fusion", "compete", "cascade"], default=None,
                        help="one experiment (results.json keeps the others' last figures)")  # fmt: skip
    args = parser.parse_args()
    repository, server = server_for_flows()
    started = machine()
    previous = WORK / "results.json"
    results: dict[str, Any] = (
        json.loads(previous.read_text()) if args.only and previous.exists() else {}
    )
    results.update({"machine": started, "args": vars(args)})
    wanted = {args.only} if args.only else {"fusion", "compete", "cascade"}
    server.start(timeout=300)  # a loaded machine: every stage model loads before it is ready
    try:
        check(server.url, repository)
        print("answers checked equal to flow.local", flush=True)
        if "fusion" in wanted:
            fusion: dict[str, Any] = {}
            for concurrency in (32, 1):
                fusion[str(concurrency)] = rounds(
                    args.rounds, ["chain", "chain-unfused"],
                    lambda app, _, c=concurrency: closed(server.url, app, c, args.duration),
                )  # fmt: skip
            results["fusion"] = fusion
            results["fusion_at"] = stamp()
        if "compete" in wanted:
            results["competitive"] = rounds(
                args.rounds, ["heavy-k2", "heavy-k1"],
                lambda app, n: open_loop(server.url, app, args.rate, args.duration, seed=n),
            )  # fmt: skip
            results["competitive_at"] = stamp()
        if args.peers and "cascade" in wanted:
            from bench.cascade_peers import compare

            compared = compare(
                server.url, repository, args, rounds, closed, payloads("cascade", 48)
            )
            results["cascade"], results["cascade_skipped"] = compared["runs"], compared["skipped"]
            results["cascade_at"] = stamp()
        results["operators"] = {app: operators(server.url, app) for app in APPS}
        # a query that cannot make its flow's deadline is a 200 with the default output: the
        # load generator counts it as answered, so the bench reports how many there were
        results["defaults"] = {app: defaults(server.url, app) for app in APPS}
    finally:
        server.stop()
    results["machine"]["load_1m_after"] = os.getloadavg()[0]
    (WORK / "results.json").write_text(json.dumps(results, indent=1))
    write_results(results)


def _row(label: str, runs: list[dict[str, Any]]) -> str:
    tput = median(runs, "throughput_rps")
    p50, p99 = median(runs, "latency_ms", "p50"), median(runs, "latency_ms", "p99")
    rejected = sum(r.get("rejected", 0) + r.get("errors", 0) for r in runs)
    return f"| {label} | {tput:.1f} | {p50:.2f} | {p99:.2f} | {rejected} |"


FUSION = "## Fusion: pre-process -> model -> post-process -> format (`examples/flows/chain.py`)"
COMPETE = "## Competitive execution: the heavy-tailed operator (`examples/flows/heavy_tail.py`)"
CASCADE = "## The cascade: Headway's flow vs Ray Serve's handles and BentoML's composition"
PEER_ROWS = {"headway": "Headway (flow)", "ray": "Ray Serve 2.60 (handles)",
             "bentoml": "BentoML 1.4.40 (`bentoml.depends`)"}  # fmt: skip


def _defaults(results: dict[str, Any], *apps: str) -> str:
    counts = results.get("defaults", {})
    found = {app: counts[app] for app in apps if app in counts}
    return f"Answered with the default output (deadline missed): {found}." if found else ""


def fusion_section(results: dict[str, Any]) -> list[str]:
    fusion = results["fusion"]
    lines = [
        FUSION, "", f"({results.get('fusion_at', '')}) Closed loop; every operator batches.", "",
        "| variant | throughput (req/s) | p50 (ms) | p99 (ms) | rejected+errors |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    for c in ("32", "1"):
        lines.append(_row(f"fused (1 action), {c} conn.", fusion[c]["chain"]))
        lines.append(_row(f"unfused (4 actions), {c} conn.", fusion[c]["chain-unfused"]))
    t32 = median(fusion["32"]["chain"], "throughput_rps") or 0.0
    u32 = median(fusion["32"]["chain-unfused"], "throughput_rps") or 1.0
    p1 = median(fusion["1"]["chain"], "latency_ms", "p50") or 1.0
    q1 = median(fusion["1"]["chain-unfused"], "latency_ms", "p50") or 0.0
    return [
        *lines,
        "",
        f"Fused / unfused throughput at 32 connections: **{t32 / u32:.2f}x**; unfused / fused "
        f"p50 at 1 connection: **{q1 / p1:.2f}x** (target: >= 1.5x on either). "
        + _defaults(results, "chain", "chain-unfused"),
    ]


def compete_section(results: dict[str, Any]) -> list[str]:
    comp = results["competitive"]
    k2 = median(comp["heavy-k2"], "latency_ms", "p99") or 1.0
    k1 = median(comp["heavy-k1"], "latency_ms", "p99") or 0.0
    return [
        COMPETE, "",
        f"({results.get('competitive_at', '')}) Open loop, Poisson at {results['args']['rate']:g} "
        "req/s for each variant (equal offered load). k=2: the stage's model has two replicas "
        "(one per worker) and each query sends it two copies, the first answer wins; k=1: one "
        "replica.", "",
        "| variant | throughput (req/s) | p50 (ms) | p99 (ms) | rejected+errors |",
        "|---|---|---|---|---|",
        _row("k=2 (compete)", comp["heavy-k2"]), _row("k=1", comp["heavy-k1"]), "",
        f"p99 k=1 / k=2: **{k1 / k2:.2f}x** (target: >= 2x). "
        + _defaults(results, "heavy-k2", "heavy-k1"),
    ]  # fmt: skip


def cascade_section(results: dict[str, Any]) -> list[str]:
    cascade = results["cascade"]
    lines = [
        CASCADE, "",
        f"({results.get('cascade_at', '')}) `examples/flows/cascade.py` on Headway; the same "
        "pipeline on Ray Serve (`bench/peers/ray_cascade/app.py`: an ingress deployment calling "
        "the fast and the slow model's deployments through handles, each with `@serve.batch` "
        "32) and on BentoML (`bench/peers/bentoml_cascade/service.py`: an ingress service "
        "calling the two model services through `bentoml.depends`, each `batchable` up to 32). "
        "Each peer's answers checked equal to Headway's (label, model, confidence to 1e-9) on 48 "
        "queries first. Closed loop, 32 connections; rounds alternate the systems.", "",
        "| system | throughput (req/s) | p50 (ms) | p99 (ms) | rejected+errors |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    lines += [_row(PEER_ROWS[name], runs) for name, runs in cascade.items()]
    h = median(cascade["headway"], "throughput_rps") or 0.0
    hp = median(cascade["headway"], "latency_ms", "p99") or 0.0
    lines.append("")
    for name in (n for n in cascade if n != "headway"):
        r = median(cascade[name], "throughput_rps") or 1.0
        rp = median(cascade[name], "latency_ms", "p99") or 0.0
        lines.append(
            f"Throughput Headway / {PEER_ROWS[name]}: **{h / r:.2f}x**, p99 theirs / Headway's: "
            f"**{(rp / hp if hp else 0.0):.2f}x** (target: >= 2x throughput at equal or better "
            "p99)."
        )
    for name, why in results.get("cascade_skipped", {}).items():
        lines.append(f"{PEER_ROWS[name]} was left out: {why}")
    return [*lines, "", _defaults(results, "cascade")]


def write_results(results: dict[str, Any]) -> None:
    """RESULTS-flows.md: the sections measured now; the others, the hand-written headline (the
    file's first section, today's figures with their commands: update it by hand) and the
    reading, kept as they were."""
    m = results["machine"]
    args = results["args"]
    out = BENCH / "RESULTS-flows.md"
    old = out.read_text() if out.exists() else ""
    kept = {
        ("## " + part).split("\n", 1)[0]: "## " + part.rstrip() for part in old.split("\n## ")[1:]
    }
    headline = kept.get("## Headline")
    lines = [
        "# Flows experiments (issue 14)",
        "",
        *([headline, ""] if headline else []),
        "## How these were measured",
        "",
        f"Last run: `python bench/flows.py --duration {args['duration']:g} --rounds {args['rounds']}"
        f"{' --peers' if args.get('peers') else ''}"
        f"{' --only ' + args['only'] if args.get('only') else ''}` on "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}; each section says when it was measured.",
        f"Machine: {m['cpus']} CPUs ({m['cpu']}), Python {m['python']}; **shared** with other "
        f"engineers' test runs (the last run: load average {m['load_1m']:.1f} at its start, "
        f"{m['load_1m_after']:.1f} at its end), so absolute figures are noisy; each figure is the "
        "median over rounds that alternate the variants.",
        "One `headway serve` with 2 workers; answers of every variant checked equal to "
        "`flow.local` first.",
        "",
    ]
    makers = ((FUSION, "fusion", fusion_section), (COMPETE, "competitive", compete_section),
              (CASCADE, "cascade", cascade_section))  # fmt: skip
    for title, key, make in makers:
        if key in results:
            lines += [*make(results), ""]
        elif title in kept:
            lines += [kept[title], ""]
    reading = kept.get("## Reading")
    out.write_text("\n".join(lines) + ("\n" + reading + "\n" if reading else ""))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
