"""Clipper's adaptive batching, per framework adapter, through a real `headway serve`.

The demo repository (`headway.demo`: one or two small real models per framework, trained
here on scikit-learn's data sets) is copied once per batch-size cap: `<model>-b<cap>`, with
`max_batch_size: <cap>` (cap 1 is no batching), and once more as `<model>-slo20`
(`max_batch_size: 64`, `slo_ms: 20`: the batch that the deadline-aware batcher picks under
Clipper's 20 ms SLO), all without the prediction cache. One server with one worker process
serves them all; each variant in turn gets a closed loop of `CONNECTIONS` connections from
Headway's load generator, one row per request (the model's own held-out rows), in `ROUNDS`
rounds that alternate the order. Per variant: answers per second, p99, and the
batch sizes the server ran (rows per INFER action, from its statistics). Beside it, each
model alone in this process (its adapter's `predict` at each batch size, no serving): the
rows per second the model itself allows.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from headway.demo import DemoModel, build_demo_repository
from headway.launcher import ServerProcess
from headway.loadgen import report
from headway.loadgen.client import Target, http_request, run
from headway.loadgen.workload import Request, Tensor, encode

CAPS = (1, 4, 16, 64)
QUICK_CAPS = (1, 64)
#: Rounds over every variant (each round in the opposite order to the one before)
ROUNDS = 3
CONNECTIONS = 64
SLO_VARIANT = "slo20"
#: The demo model that stands for each adapter (the first of its framework).
FRAMEWORKS = ("sklearn", "torch", "onnx", "xgboost", "lightgbm", "python")


def build(root: Path, caps: tuple[int, ...], frameworks: tuple[str, ...]) -> dict[str, DemoModel]:
    """The demo models, and one copy of each per cap (and the 20 ms SLO variant)."""
    source = root / "demo"
    shutil.rmtree(root, ignore_errors=True)
    demo = build_demo_repository(source)
    serve = root / "repository"
    chosen: dict[str, DemoModel] = {}
    for model in demo.values():
        if model.framework in frameworks and model.framework not in {
            m.framework for m in chosen.values()
        }:
            chosen[model.name] = model
    # the sklearn forest too: per-call overhead dominates it (Clipper's cheap sklearn models)
    if "sklearn" in frameworks and "iris-forest" in demo:
        chosen["iris-forest"] = demo["iris-forest"]
    for name in chosen:
        config = yaml.safe_load((source / name / "model.yaml").read_text())
        # no prediction cache (the demo's logistic regression has one): the load generator
        # rotates a few dozen rows, and answers from the cache would not run the model
        variants = {f"b{cap}": {"max_batch_size": cap, "cache": False} for cap in caps}
        variants[SLO_VARIANT] = {"max_batch_size": 64, "slo_ms": 20, "cache": False}
        for suffix, extra in variants.items():
            target = serve / f"{name}-{suffix}"
            shutil.copytree(source / name, target)
            (target / "model.yaml").write_text(yaml.safe_dump({**config, **extra}))
    return chosen


def alone(root: Path, name: str, model: DemoModel, caps: tuple[int, ...]) -> dict[str, float]:
    """Rows per second of the model's adapter at each batch size, in this process."""
    from headway.adapters import adapter_class
    from headway.repository import read_model

    config = read_model(root / "demo" / name)
    adapter = adapter_class(config.framework)(config.to_wire())
    adapter.load()
    out = {}
    for cap in caps:
        rows = np.resize(model.inputs, (cap, *model.inputs.shape[1:])).astype(model.inputs.dtype)
        batch = {model.input_name: rows}
        adapter.predict(batch)
        times = []
        budget = time.perf_counter() + 0.3
        while time.perf_counter() < budget or len(times) < 5:
            started = time.perf_counter()
            adapter.predict(batch)
            times.append(time.perf_counter() - started)
        out[str(cap)] = cap / statistics.median(times)
    return out


def _bodies(url: str, variant: str, model: DemoModel) -> list[bytes]:
    meta = httpx.get(f"{url}/v2/models/{variant}", timeout=30).json()
    spec = meta["inputs"][0]
    target = Target.parse(url)
    return [
        http_request(
            target,
            target.infer_path(variant),
            encode(Request([Tensor(spec["name"], spec["datatype"], row[None, :])])),
        )
        for row in model.inputs
    ]


def _executions(url: str, variant: str) -> tuple[int, int]:
    stats = httpx.get(f"{url}/v2/models/{variant}/stats", timeout=30).json()["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def measure(url: str, variant: str, model: DemoModel, duration: float) -> dict[str, Any]:
    wire = _bodies(url, variant, model)
    rows_before, runs_before = _executions(url, variant)
    tally = run(Target.parse(url), wire, duration=duration, warmup=min(1.0, duration / 2),
                concurrency=CONNECTIONS)  # fmt: skip
    rows_after, runs_after = _executions(url, variant)
    figures = report.summarize(tally, duration)
    runs = runs_after - runs_before
    return {
        "throughput_rps": figures["throughput_rps"],
        "p50_ms": figures["latency_ms"].get("p50"),
        "p99_ms": figures["latency_ms"].get("p99"),
        "rejected": figures["rejected"] + figures["errors"] + figures["transport_errors"],
        "mean_batch": (rows_after - rows_before) / runs if runs else None,
    }


def experiment(work: Path, quick: bool, log: Any = print) -> dict[str, Any]:
    caps = QUICK_CAPS if quick else CAPS
    frameworks = ("sklearn",) if quick else FRAMEWORKS
    duration = 1.0 if quick else 2.5
    rounds = 1 if quick else ROUNDS
    chosen = build(work, caps, frameworks)
    out: dict[str, Any] = {"connections": CONNECTIONS, "duration_s": duration, "caps": list(caps),
                           "rounds": rounds, "models": {}}  # fmt: skip
    for name, model in chosen.items():
        out["models"][name] = {
            "framework": model.framework,
            "alone_rows_per_s": alone(work, name, model, caps),
        }
    server = ServerProcess(work / "repository", state=work / "state.db", workers=1,
                           log=work / "server.log")  # fmt: skip
    server.start(timeout=300)
    variants = [
        (name, suffix) for name in chosen for suffix in (*(f"b{c}" for c in caps), SLO_VARIANT)
    ]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {v: [] for v in variants}
    try:
        for number in range(rounds):
            for name, suffix in variants if number % 2 == 0 else variants[::-1]:
                figures = measure(server.url, f"{name}-{suffix}", chosen[name], duration)
                runs[name, suffix].append(figures)
                log(f"  round {number + 1}: {name}-{suffix}: {figures}")
    finally:
        server.stop()
    for (name, suffix), found in runs.items():
        out["models"][name].setdefault("served", {})[suffix] = {
            **{key: _median([f[key] for f in found]) for key in found[0]},
            "throughput_rounds": [f["throughput_rps"] for f in found],
        }
    return out
