"""Profiles taken in place: each model's time per batch size as the serving server saw it.

`headway.planning.profiler` times each model alone, one batch at a time. Where the server's
event loop, its other workers and the client share the machine's cores, a model's batches
take longer under load than alone (its worker waits for a core, and so does each hop), and an
estimate made from the idle profile falls short of the real tail. InferLine profiled each
model on hardware of its own; where the replicas share the hardware, the profile to plan
with is the one taken under the load the plan will serve.

The server counts, per model and batch size, the INFER actions it ran and their times
(Triton's batch statistics, `GET /v2/models/stats`: the round trip to the worker, its run,
and splitting the answer). Between two reads taken around a run at the planned load, their
sum per action is the model's time per batch under that load, in the profiler's own terms
(dispatch to answer, the RPC included; a full batch the scheduler sends ahead to a busy
worker also waits there behind the batch it runs, which a max batch the load rarely fills
makes rare). A batch size the load formed too rarely to measure
keeps its idle time scaled by how much slower the measured sizes ran: contention is taken
to slow every size alike.

The tail: the server's histogram of each model's run times on its worker (`/metrics`,
`headway_compute_seconds`) between the same two reads is the shape of that model's times
under the load, its waits for a core included as they came; a log-normal of the measured mean
is fitted to its buckets (`lognormal_sigma`) and gives every size's p99. Where the load ran a
model too few times for that, the kernel's accounting of its worker's waits for a core stands
in (`waits_per_action`, `under_load`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from headway.errors import ConfigError
from headway.planning.pipeline import LatencyProfile
from headway.planning.simulator import Z99

#: Actions of one batch size below which its mean under load is not trusted.
LEAST_ACTIONS = 5
#: Actions a size's own mean under load must run to weigh as much as the sizes' shared
#: slow-down: a size formed a few times under load (one stall among them) is pulled towards
#: its idle time times the slow-down, not taken at its few batches' mean.
PRIOR_ACTIONS = 20
#: An exponential wait's p99 over its mean, less the mean wait a batch's mean holds already.
WAIT_TAIL = math.log(100) - 1
#: Actions in a model's run-time histogram below which its shape is not trusted.
LEAST_SHAPED = 20
#: The server's histogram of each model's run times per INFER action, on `/metrics`.
COMPUTE = "headway_compute_seconds"
#: The parts of an INFER action's time the server reports per batch size.
PARTS = ("compute_input", "compute_infer", "compute_output")

#: batch size -> (INFER actions, their seconds in total)
BatchSeconds = dict[int, tuple[int, float]]


def batch_seconds(stats: Mapping[str, Any]) -> dict[str, BatchSeconds]:
    """Per served model (by name, its default version), per batch size: the INFER actions so
    far and their seconds from dispatch to answer, from a `GET /v2/models/stats` body."""
    out: dict[str, BatchSeconds] = {}
    for model in stats.get("model_stats", []):
        sizes = out.setdefault(model["name"], {})
        for entry in model.get("batch_stats", []):
            count = int(entry[PARTS[0]]["count"])
            seconds = sum(int(entry[part]["ns"]) for part in PARTS) / 1e9
            held = sizes.get(int(entry["batch_size"]), (0, 0.0))
            sizes[int(entry["batch_size"])] = (held[0] + count, held[1] + seconds)
    return out


def between(
    before: Mapping[str, BatchSeconds], after: Mapping[str, BatchSeconds]
) -> dict[str, BatchSeconds]:
    """What ran between two `batch_seconds` reads."""
    out: dict[str, BatchSeconds] = {}
    for name, sizes in after.items():
        earlier = before.get(name, {})
        ran = {}
        for size, (count, seconds) in sizes.items():
            count0, seconds0 = earlier.get(size, (0, 0.0))
            if count > count0:
                ran[size] = (count - count0, seconds - seconds0)
        out[name] = ran
    return out


def under_load(
    idle: LatencyProfile,
    ran: BatchSeconds,
    least: int = LEAST_ACTIONS,
    wait: float | None = None,
    sigma: float | None = None,
    prior: float = PRIOR_ACTIONS,
    persistence: float = 0.0,
) -> LatencyProfile:
    """`idle`, the model's profile taken alone, as the load that `ran` (the model's actions
    between two reads) found it. The slow-down: the measured sizes' (each run at least
    `least` times) time under load over their idle time, weighted by actions. Every size of
    `idle` takes its idle time times the slow-down; a measured size run n times takes the
    blend (n x its mean under load + `prior` x that) / (n + `prior`), so its own mean decides
    once it ran many more than `prior` times, and a size formed a few times (its mean one
    stall away from the rest) stays near the shared slow-down. Refused when no size ran
    `least` times. `persistence` (`persistence_of`) is the profile's.

    P99s: with `sigma`, the log-normal shape of the model's times under the load
    (`lognormal_sigma`), each size's p99 is that of a log-normal of its mean and that shape.
    Else with `wait`, the mean seconds the model's worker waited runnable for a core per
    action under the load, each size's mean plus (ln 100 - 1) times it -- the wait taken as
    exponential (its p99 is ln 100 times its mean; the mean already holds one mean wait), the
    run at its mean: on shared cores the tail is the waits'. Without, the idle p99s scaled as
    their size's mean was (the idle tail's shape)."""
    measured = {size: seconds / count for size, (count, seconds) in ran.items() if count >= least}
    if not measured:
        raise ConfigError(f"no batch size ran at least {least} times under the load: run it longer")
    actions = {size: ran[size][0] for size in measured}
    idle_time = sum(actions[s] * idle.latency(s) for s in measured)
    slower = sum(actions[s] * measured[s] for s in measured) / idle_time
    seconds = {size: idle.latency(size) * slower for size in idle.batch_sizes}
    for size, mean in measured.items():
        shared = idle.latency(size) * slower
        seconds[size] = (actions[size] * mean + prior * shared) / (actions[size] + prior)
    if sigma is not None:
        ratio = math.exp(Z99 * sigma - sigma * sigma / 2)
        return LatencyProfile(seconds, {s: t * ratio for s, t in seconds.items()}, persistence)
    if wait is not None:
        tails = {s: t + WAIT_TAIL * wait for s, t in seconds.items()}
        return LatencyProfile(seconds, tails, persistence)
    p99 = {
        size: tail * seconds.get(size, idle.latency(size) * slower) / idle.latency(size)
        for size, tail in idle.p99.items()
    }
    return LatencyProfile(seconds, p99, persistence)


def waits_per_action(
    ran: Mapping[str, BatchSeconds], workers: Mapping[int, tuple[float, float]]
) -> dict[str, float]:
    """Per served model, the mean seconds its worker waited for a core per action: `ran`
    holds each model's actions between two reads, `workers` each worker process's (run, wait)
    seconds over the same time. The server does not say which process serves which model, so
    each model (the busiest first) is matched to the unmatched worker whose run time is
    closest to the model's time (a worker runs its model's actions; once every worker is
    matched, the closest again); a worker's wait is shared by its models' actions."""
    busy = {name: sum(s for _, s in sizes.values()) for name, sizes in ran.items() if sizes}
    on: dict[int, list[str]] = {}
    for name in sorted(busy, key=lambda n: -busy[n]):
        free = [w for w in workers if w not in on] or list(workers)
        if not free:
            break
        worker = min(free, key=lambda w: abs(workers[w][0] - busy[name]))
        on.setdefault(worker, []).append(name)
    out = {}
    for worker, names in on.items():
        actions = sum(c for name in names for c, _ in ran[name].values())
        for name in names:
            out[name] = workers[worker][1] / actions
    return out


def loaded_profiles(
    idle: Mapping[str, LatencyProfile],
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    served_as: Mapping[str, str],
    least: int = LEAST_ACTIONS,
    waits: Mapping[str, float] | None = None,
    sigmas: Mapping[str, float] | None = None,
    prior: float = PRIOR_ACTIONS,
    persistences: Mapping[str, float] | None = None,
) -> dict[str, LatencyProfile]:
    """Each model of `idle` (model -> its profile alone, on the hardware the server's workers
    are) under the load run between the stats bodies `before` and `after`; `served_as` names
    the served model whose actions are each model's (a flow's stage model runs a repository
    model; a model missing from it is served under its own name); `waits`, per served model,
    its worker's wait for a core per action (`waits_per_action`), gives the p99s, and
    `sigmas`, per served model, the shape of its run times (`shapes_between`), gives them in
    its place where it has one; `prior` as `under_load`'s; `persistences`, per served model,
    its batches' persistence (`persistence_of`). A model the load never ran is left out."""
    ran = between(batch_seconds(before), batch_seconds(after))
    out = {}
    for model, profile in idle.items():
        name = served_as.get(model, model)
        actions = ran.get(name)
        if not actions:  # the load never ran it: not one of the app's models
            continue
        try:
            out[model] = under_load(
                profile,
                actions,
                least,
                (waits or {}).get(name),
                (sigmas or {}).get(name),
                prior,
                (persistences or {}).get(name, 0.0),
            )
        except ConfigError as error:
            raise ConfigError(f"model {model!r}: {error}") from None
    return out


#: A histogram read: its (upper bound, count at or below it) pairs, and its sum of values.
Buckets = tuple[list[tuple[float, float]], float]


def compute_histograms(metrics_text: str) -> dict[str, Buckets]:
    """Per served model, the server's histogram of its run times per INFER action so far
    (`headway_compute_seconds` in a `/metrics` body): cumulative buckets and sum."""
    out: dict[str, tuple[list[tuple[float, float]], float]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != COMPUTE:
            continue
        for sample in family.samples:
            model = sample.labels.get("model", "")
            buckets, total = out.get(model, ([], 0.0))
            if sample.name == f"{COMPUTE}_bucket":
                buckets.append((float(sample.labels["le"]), float(sample.value)))
            elif sample.name == f"{COMPUTE}_sum":
                total = float(sample.value)
            out[model] = (buckets, total)
    return {m: (sorted(b), total) for m, (b, total) in out.items()}


def lognormal_sigma(buckets: list[tuple[float, float]], total: float) -> float | None:
    """The shape (sigma) of the log-normal with the histogram's mean that best fits its
    cumulative `buckets` (least squares over the finite bounds), or None with fewer than
    `LEAST_SHAPED` values. The bounds are coarse (about 2x apart), so the fit, not a
    quantile read off one bucket, is what places the tail."""
    count = max((n for _, n in buckets), default=0.0)
    if count < LEAST_SHAPED or total <= 0:
        return None
    finite = [(b, n / count) for b, n in buckets if math.isfinite(b) and b > 0]
    bounds = np.log([b for b, _ in finite])
    shares = np.array([f for _, f in finite])
    sigmas = np.linspace(0.01, Z99, 400)
    centres = math.log(total / count) - sigmas**2 / 2  # the mean held at the histogram's
    z = (bounds[None, :] - centres[:, None]) / sigmas[:, None]
    cdf = 0.5 * (1 + _erf(z / math.sqrt(2)))
    errors = ((cdf - shares[None, :]) ** 2).sum(axis=1)
    return float(sigmas[int(np.argmin(errors))])


def shapes_between(before: str, after: str) -> dict[str, float]:
    """Per served model, `lognormal_sigma` of its run times between two `/metrics` bodies
    (models that ran too few times left out)."""
    first, last = compute_histograms(before), compute_histograms(after)
    out = {}
    for model, (buckets, total) in last.items():
        earlier, total0 = first.get(model, ([], 0.0))
        held = dict(earlier)
        ran = [(b, n - held.get(b, 0.0)) for b, n in buckets]
        sigma = lognormal_sigma(ran, total - total0)
        if sigma is not None:
            out[model] = sigma
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)  # type: ignore[no-any-return]


#: The most persistence a profile is given: spells of about 1 / (1 - p) = 100 batches.
MOST_PERSISTENCE = 0.99


def window_means(
    reads: Sequence[Mapping[str, BatchSeconds]], name: str
) -> tuple[np.ndarray, float]:
    """Served model `name`'s mean seconds per action in each window between successive
    `batch_seconds` reads taken at a steady pace (windows of fewer than 2 actions left out),
    and the mean actions per window kept."""
    totals = [
        (sum(c for c, _ in r.get(name, {}).values()), sum(t for _, t in r.get(name, {}).values()))
        for r in reads
    ]
    windows = [(c1 - c0, t1 - t0) for (c0, t0), (c1, t1) in itertools.pairwise(totals)]
    kept = [(n, t) for n, t in windows if n >= 2]
    means = np.array([t / n for n, t in kept])
    return means, (sum(n for n, _ in kept) / len(kept) if kept else 0.0)


def lag1(values: np.ndarray) -> float | None:
    """The correlation of each value with the next (None with fewer than 6 or no spread)."""
    if len(values) < 6 or float(values.std()) <= 1e-9 * float(np.abs(values).mean()):
        return None
    return float(np.corrcoef(values[:-1], values[1:])[0, 1])


def persistence_of(window_lag1: float, per_window: float) -> float:
    """The per-batch persistence p (an AR(1) of successive batches' log-times) under which
    the means of windows of `per_window` successive batches have lag-1 correlation
    `window_lag1`: for such windows the covariance of neighbours is p (1 - p^n)^2 / (1 - p)^2
    and a window's variance n + 2 sum_k (n - k) p^k, whose ratio rises with p. 0 where the
    windows are not positively correlated."""
    n = max(round(per_window), 1)
    if window_lag1 <= 0:
        return 0.0
    ps = np.linspace(0.0, MOST_PERSISTENCE, 991)
    k = np.arange(1, n)
    variance = n + 2 * ((n - k)[None, :] * ps[:, None] ** k[None, :]).sum(axis=1)
    covariance = ps * (1 - ps**n) ** 2 / np.maximum((1 - ps) ** 2, 1e-12)
    rho = covariance / variance
    return float(ps[min(int(np.searchsorted(rho, window_lag1)), len(ps) - 1)])


def persistence_in(reads: Sequence[Mapping[str, BatchSeconds]], name: str) -> float:
    """Served model `name`'s persistence (`persistence_of`) from `batch_seconds` reads taken
    at a steady pace during a run; 0 unless its windows' lag-1 correlation is above
    2 / sqrt(windows), what independent batches stay under 19 times in 20 (a short run's
    correlation is noisy, and a small one maps to a large persistence when windows are long)."""
    means, per_window = window_means(reads, name)
    correlation = lag1(means)
    if correlation is None or correlation <= 2 / math.sqrt(len(means)):
        return 0.0
    return persistence_of(correlation, per_window)
