"""Clipper's headline results on Headway: five experiments, one JSON summary.

`selection.py` runs the four selection experiments (in-process, virtual time, real models);
`batching.py` the fifth through a real server. Each function here runs one experiment over
its seeds and returns what the page and the plots need: per-seed figures, and series reduced
to their median and quartiles over seeds (sampled every `STEP` events).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from bench.evidence import batching, selection
from bench.evidence.members import DATASETS, POOLS

STEP = 20
TIGHT_SLO_MS = 10.0
PARTS = ("ensemble", "recovery", "personal", "stragglers", "batching")


def _band(series: list[np.ndarray]) -> dict[str, list[float]]:
    data = np.stack(series)[:, ::STEP]
    q = np.percentile(data, [25, 50, 75], axis=0)
    return {
        "p25": q[0].round(4).tolist(),
        "median": q[1].round(4).tolist(),
        "p75": q[2].round(4).tolist(),
    }


def ensemble(quick: bool, log: Any = print) -> dict[str, Any]:
    seeds = range(1) if quick else range(8)
    datasets = ("digits", "wine") if quick else DATASETS
    rows = []
    for dataset in datasets:
        for kind in POOLS:
            for seed in seeds:
                rows.append(selection.ensemble(dataset, kind, seed))
            margins = [r["margin"] for r in rows[-len(seeds) :]]
            log(f"  ensemble {dataset}/{kind}: Exp4 - best member, median "
                f"{100 * float(np.median(margins)):+.2f} points over {len(margins)} seeds")  # fmt: skip
    return {"seeds": len(seeds), "rows": rows}


def recovery(quick: bool, log: Any = print) -> dict[str, Any]:
    seeds = range(1) if quick else range(8)
    events = 800 if quick else 4000
    at = events // 2
    out: dict[str, Any] = {"events": events, "at": at, "step": STEP, "variants": []}
    for policy in ("exp3", "exp4"):
        for eta in (0.01, 0.1):
            runs = [selection.recovery(policy, eta, seed, events, at) for seed in seeds]
            window = 100 if policy == "exp3" else 1
            shares = {m: _band([selection.rolling(r["share"][m], window) for r in runs])
                      for m in runs[0]["share"]}  # fmt: skip
            accuracy = _band([selection.rolling(r["correct"], 100) for r in runs])
            after = [selection.recovered_after(r["share"]["logreg"], at, window) for r in runs]
            before = [float(np.mean(r["share"]["logreg"][at - 200 : at])) for r in runs]
            acc_after = [float(np.mean(r["correct"][-events // 4 :])) for r in runs]
            out["variants"].append({
                "policy": policy, "eta": eta, "seeds": len(runs), "share": shares,
                "accuracy": accuracy, "recovered_after": after, "share_before": before,
                "accuracy_last_quarter": acc_after,
                "member_accuracy_before": runs[0]["accuracy_before"],
            })  # fmt: skip
            log(f"  recovery {policy} eta {eta}: degraded model under half after "
                f"{after} events")  # fmt: skip
    return out


def personal(quick: bool, log: Any = print) -> dict[str, Any]:
    seeds = range(1) if quick else range(8)
    events = 800 if quick else 4000
    eta = 0.1
    out: dict[str, Any] = {"events": events, "eta": eta, "users": 20, "step": STEP, "variants": []}
    for policy in ("exp3", "exp4"):
        for per_user in (True, False):
            runs = [selection.personal(policy, per_user, eta, seed, events) for seed in seeds]
            last = [float(np.mean(r["correct"][-events // 4 :])) for r in runs]
            out["variants"].append({
                "policy": policy, "per_user": per_user, "seeds": len(runs),
                "accuracy": _band([selection.rolling(r["correct"], 200) for r in runs]),
                "accuracy_last_quarter": last,
            })  # fmt: skip
            out["model_accuracy_by_group"] = runs[0]["model_accuracy_by_group"]
            log(f"  personal {policy} per_user={per_user}: last quarter accuracy "
                f"{np.median(last):.3f}")  # fmt: skip
    return out


def stragglers(quick: bool, log: Any = print) -> dict[str, Any]:
    seeds = range(1) if quick else range(3)
    sizes = (2, 16) if quick else (2, 4, 8, 12, 16)
    queries = 300 if quick else 2000
    rows = []
    # the SLO at a member's P99 (1% of calls later), and a tighter one (4% later)
    modes = ((True, selection.SLO_MS), (True, TIGHT_SLO_MS), (False, selection.SLO_MS))
    for size in sizes:
        for deadline, slo in modes:
            for seed in seeds:
                rows.append(selection.stragglers(size, deadline, seed, queries, slo))
            log(f"  stragglers {size} members, deadline={deadline and slo}: {rows[-1]}")
    return {"slo_ms": selection.SLO_MS, "tight_slo_ms": TIGHT_SLO_MS, "latency": {"floor_s": selection.FLOOR,
            "scale_s": selection.SCALE, "alpha": selection.ALPHA}, "rows": rows}  # fmt: skip


def experiment(
    work: Path, quick: bool, parts: tuple[str, ...] = PARTS, log: Any = print
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    makers = {"ensemble": ensemble, "recovery": recovery, "personal": personal,
              "stragglers": stragglers}  # fmt: skip
    for part in parts:
        log(f"clipper: {part}")
        if part == "batching":
            out[part] = batching.experiment(work / "batching", quick, log)
        else:
            out[part] = makers[part](quick, log)
    return out
