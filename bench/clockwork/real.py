"""Clockwork's experiment on real workers: 1,000 real models, a memory budget, one trace.

    python bench/clockwork/real.py                      # ~6 min once to build the models
    python bench/clockwork/real.py --worker-gc young    # the what-if described below

Builds (once, cached in bench/.work/clockwork) a zoo of real models (``zoo.py``), generates a
trace with ``headway.traces`` (heavy-tailed popularity, rates changing every ``--interval``
seconds, bursts, timers; 100 ms SLO), then replays the SAME trace against ``headway serve
--scheduler headway`` and ``--scheduler clipper`` in turn (same repository, memory budget and
workers; a fresh state database each, so neither starts with the other's profiles), with the
open-loop trace replayer (``headway.loadgen.trace``).

Before the trace, each server loads a few models the trace never asks for, one per worker at
a time, PyTorch then scikit-learn (``--no-prewarm`` skips it): a worker imports a framework on
its first LOAD of it (~1 s), and that second would stay in the LOAD estimate of whichever
model the trace happened to load first (the p99 of its last 10 loads) until it had loaded 10
more times. The trace's figures exclude the pre-warm (its loads are subtracted from the
counters). Workers also import both frameworks when they start (``HEADWAY_WORKER_FRAMEWORKS``;
``--no-frameworks`` skips it), so no LOAD of the trace or the pre-warm imports one. Figures
leave out the first ``--warmup`` seconds (every model starts unloaded) and are also given for
the whole trace; the server's counters (loads, evictions, late answers) are scraped from
/metrics. ``--worker-gc young`` is a what-if: the servers' processes run
``gc.collect()`` as ``gc.collect(0)``. Before edcc1af a worker ran a full collection on every
LOAD that evicts (~0.1 s with PyTorch and scikit-learn imported) and this showed what that
cost; since, a worker collects only the young generation there (and on UNLOAD too), so the
option no longer changes what a worker does. ``--load-estimate p99`` is a what-if too (see
``P99_LOADS``). Writes ``--out`` (JSON) and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import zoo

from headway.launcher import ServerProcess
from headway.loadgen.trace import replay_trace
from headway.loadgen.workload import Request, Tensor, encode
from headway.runtime.worker import FRAMEWORKS_ENV
from headway.traces import TraceSpec, generate, popularity, write

YOUNG_GC = """import gc

_collect = gc.collect


def collect(generation=2):
    return _collect(0)


gc.collect = collect
"""
#: The what-if `--load-estimate p99`: a model's own LOAD estimate as before it changed,
#: Clockwork's p99 of its last 10 loads (nothing left out, trusted from its first load). The
#: never-loaded models' estimate (over recent loads) stays.
P99_LOADS = """
import headway.control.estimates.durations as durations

durations.LOAD_OUTLIERS_IGNORED = 0
durations.TRUSTED_LOADS = 1
"""


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=40.0, help="mean requests/s of the trace")
    parser.add_argument("--duration", type=float, default=150.0)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--slo-ms", type=float, default=100.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget-fraction", type=float, default=0.1,
                        help="memory budget as a share of all models' memory")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=",".join(common.POLICIES))
    parser.add_argument("--worker-gc", choices=("full", "young"), default="full",
                        help="young: a what-if: the servers' processes run gc.collect() as "
                        "gc.collect(0) (a sitecustomize on PYTHONPATH); see the docstring")  # fmt: skip
    parser.add_argument("--no-prewarm", dest="prewarm", action="store_false",
                        help="skip loading, before the trace, models it never asks for so that "
                        "every worker has imported PyTorch and scikit-learn")  # fmt: skip
    parser.add_argument("--load-estimate", choices=("trimmed", "p99"), default="trimmed",
                        help="p99: a what-if: a model's own LOAD estimate is the p99 of its "
                        "last 10 loads, as before (see P99_LOADS)")  # fmt: skip
    parser.add_argument("--no-frameworks", dest="frameworks", action="store_false",
                        help="do not have workers import PyTorch and scikit-learn when they start "
                        "(HEADWAY_WORKER_FRAMEWORKS)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=zoo.WORK / "real.json")
    return parser.parse_args()


def prewarm(url: str, groups: list[list[str]], body: bytes) -> None:
    """Each group at once (one model per worker): every worker loads one of each framework."""
    with httpx.Client(base_url=url, timeout=60) as client, ThreadPoolExecutor(8) as pool:
        for group in groups:
            codes = list(pool.map(lambda m: client.post(f"/v2/models/{m}/infer", content=body)
                                  .status_code, group))  # fmt: skip
            if codes != [200] * len(group):
                raise RuntimeError(f"pre-warm of {group} answered {codes}")


def run_policy(
    policy: str,
    root: Path,
    budget: float,
    args: argparse.Namespace,
    rows: list[Any],
    warm: list[list[str]],
) -> dict[str, Any]:
    work = zoo.WORK / "real-runs"
    work.mkdir(parents=True, exist_ok=True)
    state = work / f"{policy}.db"
    for leftover in work.glob(f"{policy}.db*"):
        leftover.unlink()
    extra = ["--memory-budget-mb", f"{budget:.1f}", "--scheduler", policy]
    rng = np.random.default_rng(args.seed)
    data = rng.standard_normal((1, zoo.FEATURES)).astype(np.float32)
    body = Request([Tensor("input-0", "FP32", data)])  # every model takes [-1, 32] FP32
    env = {FRAMEWORKS_ENV: "torch,sklearn"} if args.frameworks else {}
    patches = [YOUNG_GC] * (args.worker_gc == "young") + [P99_LOADS] * (args.load_estimate == "p99")
    if patches:
        patch = zoo.WORK / "what-if"
        patch.mkdir(parents=True, exist_ok=True)
        (patch / "sitecustomize.py").write_text("\n".join(patches))
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(patch), os.environ.get("PYTHONPATH")])
        )
    with ServerProcess(root, state=state, workers=args.workers, extra=extra, env=env,
                       log=work / f"{policy}.log") as server:  # fmt: skip
        if warm:
            slow = encode(Request(body.inputs, {"parameters": {"slo_ms": 30_000}})).payload
            prewarm(server.url, warm, slow)
        before = common.scrape(httpx.get(f"{server.url}/metrics", timeout=30).text)
        common.log(f"  {policy}: serving at {server.url}; replaying {len(rows):,} requests")
        result = replay_trace(server.url, rows, lambda _: body, max_connections=1024,
                              duration=args.duration, drain_timeout=15.0)  # fmt: skip
        metrics = common.scrape(httpx.get(f"{server.url}/metrics", timeout=30).text)
    for key, value in before.items():  # the trace's own counts, without the pre-warm's
        if isinstance(value, int) and isinstance(metrics.get(key), int):
            metrics[key] -= value
    measured = result.summary(start=args.warmup)
    whole = result.summary()
    late = (result.status == 200) & (result.latency * 1e3 > result.slo_ms)
    templates: dict[str, list[Any]] = {}  # error texts with their numbers blanked: count, 3 of them
    for text in result.messages.values():
        template = re.sub(r"\d+(\.\d+)?", "#", re.sub(r"'[^']*'", "'…'", text))
        entry = templates.setdefault(template, [0, []])
        entry[0] += 1
        if len(entry[1]) < 3:
            entry[1].append(text)
    metrics["error_texts"] = dict(sorted(templates.items(), key=lambda kv: -kv[1][0]))
    metrics["late_answers"] = [
        {"model": result.models[i], "scheduled_s": round(float(result.scheduled[i]), 4),
         "latency_ms": round(float(result.latency[i]) * 1e3, 2)}
        for i in np.flatnonzero(late)[:50]
    ]  # fmt: skip
    metrics["rejections_after_warmup"] = [
        {"model": result.models[i], "scheduled_s": round(float(result.scheduled[i]), 4),
         "text": text}
        for i, text in sorted(result.messages.items())
        if result.scheduled[i] >= args.warmup
    ][:200]  # fmt: skip
    common.log(
        f"  {policy}: attainment {common.pct(measured['slo_attainment'])}, goodput "
        f"{measured['goodput_rps']} req/s, late {measured['late']}, rejected "
        f"{measured['rejected_by_reason']}, loads {metrics['loads']}"
    )
    return {"measured": measured, "whole_trace": whole, "server": metrics}


def table(runs: dict[str, dict[str, Any]], key: str) -> str:
    names = list(runs)
    rows: list[list[str]] = []

    def row(label: str, fn: Any) -> None:
        rows.append([label, *(fn(runs[n]) for n in names)])

    row("requests", lambda r: f"{r[key]['requests']:,}")
    row("SLO attainment", lambda r: common.pct(r[key]["slo_attainment"]))
    row("goodput (req/s)", lambda r: common.num(r[key]["goodput_rps"], 2))
    row("answered late (client)", lambda r: f"{r[key]['late']:,}")
    row("rejected (by reason)", lambda r: f"{r[key]['rejected']:,} "
        + " ".join(f"{k}:{v}" for k, v in r[key]["rejected_by_reason"].items()))  # fmt: skip
    row("errors / transport / timeouts", lambda r: f"{sum(r[key]['errors'].values())} / "
        f"{r[key]['transport_errors']} / {r[key]['timeouts']}")  # fmt: skip
    for p in ("p50", "p99", "p99.9", "max"):
        row(f"latency {p} (ms)", lambda r, p=p: common.num(r[key]["latency_ms"][p], 1))
    row("send lateness p99 / max (ms)", lambda r: f"{common.num(r[key]['send_lateness_ms']['p99'], 1)}"
        f" / {common.num(r[key]['send_lateness_ms']['max'], 1)}")  # fmt: skip
    if key == "whole_trace":
        for name in ("loads", "evictions", "refusals", "server_late_answers"):
            row(f"{name.replace('_', ' ')} (server)", lambda r, n=name: f"{r['server'][n]:,}")
    return common.markdown(["", *names], rows)


def main() -> None:
    args = arguments()
    common.log(f"building or reusing the zoo of {args.models} models")
    root = zoo.ensure(args.models, log=common.log)
    sizes = [e["size_mb"] for e in zoo.catalogue(root).values()]
    budget = args.budget_fraction * sum(sizes)
    spec = TraceSpec(models=args.models, duration=args.duration, rate=args.rate,
                     interval=args.interval, slo_ms=args.slo_ms, seed=args.seed)  # fmt: skip
    trace = generate(spec)
    trace_file = zoo.WORK / f"real-trace-{args.seed}.csv"
    write(trace, trace_file)
    rows = [(t, m, spec.slo_ms) for t, m in trace.rows()]
    families = zoo.catalogue(root)
    unused = [m for m in sorted(families) if m not in {r[1] for r in rows}]
    torch_models = [m for m in unused if families[m]["family"] == "mlp"]
    sklearn_models = [m for m in unused if families[m]["family"] != "mlp"]
    warm = [torch_models[: args.workers], sklearn_models[: args.workers]] if args.prewarm else []
    stats = popularity(trace)
    common.log(f"trace: {len(trace):,} requests, {stats['models_with_requests']:.0f} models used, "
               f"top 1% carry {stats['top_1pct_share']:.0%}; budget {budget:.0f} MB of "
               f"{sum(sizes):.0f} MB")  # fmt: skip
    out: dict[str, Any] = {
        "machine": common.machine(),
        "trace": {"spec": spec.__dict__, "file": str(trace_file), "popularity": stats},
        "zoo": {"models": len(sizes), "total_mb": sum(sizes), "median_mb": float(np.median(sizes)),
                "max_mb": max(sizes), "recipe": zoo.RECIPE},
        "budget_mb": budget, "workers": args.workers, "warmup_s": args.warmup,
        "worker_gc": args.worker_gc, "load_estimate": args.load_estimate, "prewarm": warm, "worker_frameworks": args.frameworks,
        "load_average_start": os.getloadavg(),
        "command": " ".join(["python", *sys.argv]), "runs": {},
    }  # fmt: skip
    for policy in args.policies.split(","):
        out["runs"][policy] = run_policy(policy, root, budget, args, rows, warm)
        args.out.write_text(json.dumps(out, indent=1, default=str))
    out["load_average_end"] = os.getloadavg()
    args.out.write_text(json.dumps(out, indent=1, default=str))
    print(f"load average {out['load_average_start']} at start, {out['load_average_end']} at end")
    print(f"\nAfter the {args.warmup:g} s warm-up:\n")
    print(table(out["runs"], "measured"))
    print("\nWhole trace (warm-up included), with the server's counters:\n")
    print(table(out["runs"], "whole_trace"))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
