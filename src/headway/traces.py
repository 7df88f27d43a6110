"""Multi-model workloads shaped like serverless production traces (Azure Functions 2019).

The public trace cannot be downloaded here, so this module generates traces of the same shape
(heavy-tailed popularity, rates changing per interval, bursts, timers), as a pure function of
the parameters and the seed; docs/traces.md says why each statistic was chosen.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class TraceSpec:
    """The parameters of a generated trace (all recorded in the trace file's header).

    - **Popularity** is heavy-tailed: each model's base rate is log-normal (sigma = `sigma`, default
      2.5 in natural-log units, so rates span about 8 orders of magnitude between the rarest and the
      busiest of 10,000 models), then scaled so the whole trace averages `rate` requests/s.
    - **Rates change per interval** (a minute in the original; `interval` seconds here, so a trace
      can be compressed): each model's rate is multiplied by log-normal noise (sigma = `jitter`) and a
      shared diurnal wave (`diurnal` amplitude over `period` intervals).
    - **Bursts**: in any interval, a model bursts with probability `burst_probability`, its rate
      multiplied by `burst_factor`.
    - **Triggers**: a fraction `timer_fraction` of models (16% of Azure's functions are timers) fire
      strictly periodically; the rest arrive as Poisson processes within each interval."""

    models: int = 1000
    duration: float = 60.0
    rate: float = 100.0
    interval: float = 10.0
    sigma: float = 2.5
    jitter: float = 0.5
    diurnal: float = 0.3
    period: float = 24.0
    burst_probability: float = 0.01
    burst_factor: float = 10.0
    timer_fraction: float = 0.16
    slo_ms: float = 100.0
    prefix: str = "m"
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "models": self.models >= 1,
            "duration": self.duration > 0,
            "rate": self.rate > 0,
            "interval": self.interval > 0,
            "sigma": self.sigma >= 0,
            "jitter": self.jitter >= 0,
            "diurnal": 0 <= self.diurnal < 1,
            "period": self.period > 0,
            "burst_probability": 0 <= self.burst_probability <= 1,
            "burst_factor": self.burst_factor >= 1,
            "timer_fraction": 0 <= self.timer_fraction <= 1,
            "slo_ms": self.slo_ms > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"trace parameters out of range: {', '.join(bad)} ({self})")

    def model_name(self, index: int) -> str:
        return f"{self.prefix}{index:0{max(5, len(str(self.models - 1)))}d}"


@dataclass(frozen=True)
class ArrivalTrace:
    """Request times (seconds from the start, sorted) and the model index of each."""

    spec: TraceSpec
    times: np.ndarray
    models: np.ndarray

    def __len__(self) -> int:
        return len(self.times)

    def rows(self) -> Iterator[tuple[float, str]]:
        for t, m in zip(self.times.tolist(), self.models.tolist(), strict=True):
            yield t, self.spec.model_name(m)


def base_rates(spec: TraceSpec, rng: np.random.Generator) -> np.ndarray:
    """Heavy-tailed per-model mean rates (requests/s) that sum to `spec.rate`."""
    raw = rng.lognormal(mean=0.0, sigma=spec.sigma, size=spec.models)
    rates: np.ndarray = raw * (spec.rate / raw.sum())
    return rates


def generate(spec: TraceSpec) -> ArrivalTrace:
    """Draw a trace: per interval and model a rate, then arrival times within the interval."""
    rng = np.random.default_rng(spec.seed)
    rates = base_rates(spec, rng)
    timers = rng.random(spec.models) < spec.timer_fraction
    phases = rng.random(spec.models)
    intervals = max(1, math.ceil(spec.duration / spec.interval))
    times: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    # Normalise the wave over the trace and bursts in expectation, so `rate` is the mean.
    waves = 1.0 + spec.diurnal * np.sin(2 * np.pi * np.arange(intervals) / spec.period)
    waves /= waves.mean()
    burst_mean = 1.0 + spec.burst_probability * (spec.burst_factor - 1.0)
    for k in range(intervals):
        start = k * spec.interval
        length = min(spec.interval, spec.duration - start)
        noise = rng.lognormal(-0.5 * spec.jitter**2, spec.jitter, spec.models)
        bursts = np.where(rng.random(spec.models) < spec.burst_probability, spec.burst_factor, 1.0)
        interval_rates = rates * waves[k] * noise * bursts / burst_mean
        # Poisson models: a count per interval, then uniform times within it.
        poisson = ~timers
        counts = rng.poisson(interval_rates[poisson] * length)
        ids = np.repeat(np.flatnonzero(poisson), counts)
        times.append(start + rng.random(ids.size) * length)
        owners.append(ids)
        # Timer models: strictly periodic at their base rate (timers do not burst).
        for model in np.flatnonzero(timers & (rates * length >= 1e-9)):
            gap = 1.0 / rates[model]
            first = start + ((phases[model] * gap - start) % gap)
            ticks = np.arange(first, start + length, gap)
            times.append(ticks)
            owners.append(np.full(ticks.size, model))
    all_times = np.concatenate(times) if times else np.empty(0)
    all_models = np.concatenate(owners).astype(np.int64) if owners else np.empty(0, np.int64)
    order = np.argsort(all_times, kind="stable")
    return ArrivalTrace(spec, all_times[order], all_models[order])


def write(trace: ArrivalTrace, path: Path) -> None:
    """A CSV of `seconds,model,slo_ms` rows under a `# {json}` header holding the spec."""
    with open(path, "w") as out:
        out.write("# " + json.dumps({"trace": asdict(trace.spec), "requests": len(trace)}) + "\n")
        out.write("seconds,model,slo_ms\n")
        slo = f"{trace.spec.slo_ms:g}"
        out.writelines(f"{t:.6f},{m},{slo}\n" for t, m in trace.rows())


def read(path: Path) -> tuple[dict[str, object], list[tuple[float, str, float]]]:
    """The header and the rows of a trace file written by `write` (or by hand, same columns)."""
    header: dict[str, object] = {}
    rows: list[tuple[float, str, float]] = []
    with open(path) as source:
        for number, line in enumerate(source, start=1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                header = json.loads(line[1:])
                continue
            if line.startswith("seconds,"):
                continue
            parts = line.split(",")
            if len(parts) != 3:
                raise ValueError(f"{path}:{number}: expected seconds,model,slo_ms; got {line!r}")
            try:
                rows.append((float(parts[0]), parts[1], float(parts[2])))
            except ValueError:
                raise ValueError(f"{path}:{number}: not numbers: {line!r}") from None
    return header, rows


def popularity(trace: ArrivalTrace) -> dict[str, float]:
    """Summary statistics of a trace's model popularity (for the docs and the CLI)."""
    counts = np.bincount(trace.models, minlength=trace.spec.models)
    ordered = np.sort(counts)[::-1]
    total = max(1, int(ordered.sum()))
    top = max(1, trace.spec.models // 100)
    return {
        "requests": float(total),
        "models_with_requests": float(np.count_nonzero(counts)),
        "top_1pct_share": float(ordered[:top].sum() / total),
        "busiest_model_share": float(ordered[0] / total),
        "max_to_median_ratio": float(ordered[0] / max(1.0, float(np.median(counts[counts > 0])))),
    }
