"""InferLine's planner against the coarse-grained baselines, over seeds, on two sets of profiles.

- **assumed**: InferLine's four evaluation pipelines on the GPU-like profiles and prices of
  `bench/planner/profiles.yaml` and `catalogue.yaml` (this machine has no GPU), the cells of
  `bench/planner/compare.py` at 3,000 queries/s;
- **measured**: two pipelines of real models profiled here, on this machine's CPU, by
  `headway profile`'s code (`headway.planning.profiler.profile_kind`: each model alone on a
  real worker process, batch sizes 1 to 32) for two kinds: `cpu1` (one thread, $0.05/h) and
  `cpu2` (two threads, $0.10/h). The models are `bench/planner/accuracy.py`'s: a logistic
  regression on digits and a 300-tree random forest; the pipelines are its cascade (the
  forest for the rows the first model is unsure of, share measured on the query rows) and
  both models on every query, side by side.

Each cell (pipeline, SLO, arrival CV) is planned on a planning trace and judged, with CG-Mean
and CG-Peak, on a held-out test trace (`compare.cell`), for several seeds (planning trace
seed s, test trace seed 100 + s): cost per hour and the share of queries over the SLO.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from bench.planner import compare

from headway.planning import Catalogue, Pipeline, Stage
from headway.planning.description import profiles_from_rows
from headway.planning.pipeline import Hardware
from headway.planning.profiler import profile_kind
from headway.repository import Repository

sys.path.insert(0, str(Path(compare.__file__).parent))

MEASURED_KINDS = (
    Hardware("cpu1", 0.05, cpus=1, threads=1),
    Hardware("cpu2", 0.10, cpus=2, threads=2),
)
SIZES = (1, 2, 4, 8, 16, 32)


def measured_profiles(work: Path, quick: bool, log: Any = print) -> tuple[dict[str, Any], float]:
    """Profile rows of the two models on this machine's kinds, and the cascade's share."""
    from bench.planner.accuracy import build

    root = work / "models"
    if not (root / "digits-forest").exists():
        root.mkdir(parents=True, exist_ok=True)
        _, unsure = build(root)
        (root / "share.txt").write_text(str(float(unsure.mean())))
    share = float((root / "share.txt").read_text())
    rows = []
    for kind in MEASURED_KINDS:
        log(f"  profiling on {kind.name} ({kind.threads} thread(s))")
        repository = Repository.scan(threaded(root, work / f"models-{kind.name}", kind.threads))
        rows += asyncio.run(profile_kind(repository, kind, batch_sizes=SIZES,
                                         iterations=10 if quick else 40, warmup=3))  # fmt: skip
    table = {f"{r.model}|{r.hardware}|{r.batch_size}": {"mean_ms": r.mean * 1e3, "p99_ms": (r.p99 or r.mean) * 1e3}
             for r in rows}  # fmt: skip
    return {"rows": rows, "table": table}, share


def threaded(source: Path, target: Path, threads: int) -> Path:
    """A copy of the repository whose models run `threads` threads. The profiler gives a
    kind's threads to the worker's OpenMP/MKL/OpenBLAS variables, but every adapter sets its
    framework's own thread count from the model's `options.threads` (default 1), so a kind
    with more threads is measured with one unless the model says so."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    for config in target.glob("*/model.yaml"):
        raw = yaml.safe_load(config.read_text())
        raw["options"] = {**raw.get("options", {}), "threads": threads}
        config.write_text(yaml.safe_dump(raw))
    return target


def measured_pipelines(share: float) -> dict[str, Pipeline]:
    return {
        "digits-cascade": Pipeline("digits-cascade", (
            Stage("fast", "digits-fast"), Stage("forest", "digits-forest", ("fast",), share),
        )),
        "digits-both": Pipeline("digits-both", (
            Stage("fast", "digits-fast"), Stage("forest", "digits-forest"),
        )),
    }  # fmt: skip


def _cell(args: tuple[Any, ...]) -> dict[str, Any]:
    catalogue, profiles, pipeline, slo, cv, rate, queries, seed, fallback = args
    row = compare.cell(catalogue, profiles, pipeline, slo, cv, rate, queries, queries,
                       restarts=False, plan_seed=seed, test_seed=100 + seed, fallback=fallback)  # fmt: skip
    row["seed"] = seed
    row["rate"] = rate
    return row


def experiment(work: Path, quick: bool, log: Any = print, jobs: int = 2) -> dict[str, Any]:
    seeds = (1,) if quick else (1, 2, 3)
    queries = 2_000 if quick else 5_000
    seconds = 2.0 if quick else 3.0  # the measured pipelines' traces
    catalogue, profiles = compare.load()
    assumed = ("tf-cascade", "image-processing") if quick else (
        "image-processing", "video-monitoring", "social-media", "tf-cascade")  # fmt: skip
    cvs = (4.0,) if quick else (1.0, 4.0)
    tasks = [(catalogue, profiles, compare.PIPELINES[p], 300, cv, 3000.0, queries, s, "cpu4")
             for p in assumed for cv in cvs for s in seeds]  # fmt: skip
    measured, share = measured_profiles(work, quick, log)
    mprofiles = profiles_from_rows(measured["rows"])
    mcatalogue = Catalogue({k.name: k for k in MEASURED_KINDS})
    # rates at which the forest needs a few replicas (traces of a few seconds each)
    rates = {"digits-cascade": 10_000.0, "digits-both": 3_000.0}
    mtasks = [(mcatalogue, mprofiles, pipe, slo, cv, rates[name], int(rates[name] * seconds), s, "cpu1")
              for name, pipe in measured_pipelines(share).items()
              for slo in ((100,) if quick else (100, 300)) for cv in cvs for s in seeds]  # fmt: skip
    out: dict[str, Any] = {"seeds": list(seeds), "queries": queries, "share": share,
                           "measured_profiles_ms": measured["table"], "assumed": [],
                           "measured": []}  # fmt: skip
    with ProcessPoolExecutor(jobs) as pool:
        for key, batch in (("measured", mtasks), ("assumed", tasks)):
            for row in pool.map(_cell, batch):
                out[key].append(row)
                log(f"  {key} {row['pipeline']} {row['slo_ms']} ms CV {row['cv']:g} seed "
                    f"{row['seed']}: planner {_brief(row, 'planner')}, CG-Mean "
                    f"{_brief(row, 'cg_mean')}, CG-Peak {_brief(row, 'cg_peak')}")  # fmt: skip
    return out


def _brief(row: dict[str, Any], key: str) -> str:
    found = row.get(key, {})
    if "cost_per_hour" not in found:
        return "infeasible"
    return f"${found['cost_per_hour']:.2f}/h, {100 * found['miss_rate']:.2f}% missed"
