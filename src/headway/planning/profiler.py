"""The profiler: each model alone, per (hardware kind, batch size), on real worker processes.

For each CPU kind of the catalogue it starts one worker process with that kind's threads
(OMP/MKL/OpenBLAS), loads the models through the server's own controller, and sends batches of
each size one at a time (InferLine's profiler: one replica, scaled out horizontally by the
planner). A latency is what the server would see -- dispatch to answer, the RPC included --
so the estimator can use it as a stage's service time. Throughput per replica is
batch / mean latency. Kinds with a GPU are skipped: their profiles are imported from a file.

`under_load_of` measures both under the load a plan will serve, on a running server: each model's
time per batch size as the server saw it, and the event loop's wall time per query
(`headway.planning.in_place`).

`measure_frontend` measures the other part of a query's time, the server's own (HTTP, the
flow's operators, encoding): it serves the app with `headway serve` and sends it queries one
at a time (`headway.planning.frontend`).
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from headway.control.controller import Controller
from headway.control.models.states import READY
from headway.control.request import InferenceRequest
from headway.errors import ConfigError
from headway.launcher import ServerProcess
from headway.loadgen import arrivals
from headway.loadgen.client import Target, http_request, run
from headway.loadgen.tally import LoadTally
from headway.loadgen.workload import Body, random_tensor
from headway.planning.frontend import frontend_row, frontend_time
from headway.planning.in_place import (
    BatchSeconds,
    batch_seconds,
    between,
    loaded_profiles,
    persistence_in,
    shapes_between,
    waits_per_action,
)
from headway.planning.pipeline import Hardware, LatencyProfile
from headway.planning.schedstat import children, scheduled
from headway.repository import Repository, TensorSpec
from headway.runtime.engines.local import LocalEngine
from headway.runtime.worker import FRAMEWORKS_ENV
from headway.store.profiles import MeasuredProfile

BATCH_SIZES = (1, 2, 4, 8, 16, 32)
#: Passes over every batch size before anything is measured (the process warm, as served).
WARMUP = 5
#: Rounds the measured calls are split into, each shuffled: their spread is the noise figure.
ROUNDS = 5
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Queries in flight when measuring the frontend's saturated rate: a max batch of every model.
SATURATING = 16

Progress = Callable[[MeasuredProfile], None]


def subset(repository: Repository, models: Sequence[str] | None) -> Repository:
    """The repository with only `models` (all of it when None); unknown names are refused."""
    if not models:
        return repository
    for name in models:
        repository.get(name)  # ModelNotFound names what the repository has
    return Repository(repository.root, {n: repository.get(n) for n in models}, {}, list(models))


def batch_inputs(specs: Sequence[TensorSpec], rows: int, seed: int) -> dict[str, np.ndarray]:
    """Random inputs of `rows` rows matching the model's signature."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for spec in specs:
        shape = [rows, *(1 if d == -1 else d for d in spec.shape[1:])]
        tensors[spec.name] = random_tensor(spec.name, spec.datatype, shape, rng).data
    return tensors


@dataclass(frozen=True)
class ProfilingCall:
    """One call the profiler makes: a batch of `batch` rows, measured in `round` (None: a
    warm-up call, not measured)."""

    batch: int
    round: int | None


def measuring_order(
    batch_sizes: Sequence[int],
    iterations: int,
    *,
    warmup: int = WARMUP,
    rounds: int = ROUNDS,
    seed: int = 0,
) -> list[ProfilingCall]:
    """The calls that profile one model, in order: `warmup` passes over every batch size
    first, then `rounds` rounds (at most `iterations`) that share the `iterations` calls of
    each size, each round's calls in an order of their own, shuffled from `seed`.

    Served, a model is warm: measured cold, its first figures (batch 1, measured first) held
    the process's first-call costs and a tail several times its median. Shuffled, a drift of
    the machine (another process, a clock change) falls on every size alike instead of on the
    ones measured while it lasted; and the rounds, measured apart, show how far the figures
    moved (`summarise`)."""
    rng = random.Random(seed)
    order: list[ProfilingCall] = []
    for _ in range(warmup):
        sizes = list(batch_sizes)
        rng.shuffle(sizes)
        order += [ProfilingCall(b, None) for b in sizes]
    rounds = max(1, min(rounds, iterations))
    for r in range(rounds):
        calls = iterations // rounds + (1 if r < iterations % rounds else 0)
        measured = [ProfilingCall(b, r) for b in batch_sizes for _ in range(calls)]
        rng.shuffle(measured)
        order += measured
    return order


async def profile_kind(
    repository: Repository,
    kind: Hardware,
    *,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    iterations: int = 50,
    warmup: int = WARMUP,
    rounds: int = ROUNDS,
    seed: int = 0,
    progress: Progress | None = None,
) -> list[MeasuredProfile]:
    """Measure every model of `repository` on one worker of hardware `kind`, in the order
    `measuring_order` gives (warm first, then batch sizes shuffled, in rounds)."""
    if kind.gpu is not None:
        raise ConfigError(f"hardware {kind.name!r} has a GPU: import its profiles from a file")
    env = {variable: str(kind.threads) for variable in THREAD_VARIABLES}
    env[FRAMEWORKS_ENV] = ",".join(repository.frameworks())
    controller = Controller(repository, LocalEngine(1, env=env))
    rows: list[MeasuredProfile] = []
    await controller.start()
    try:
        for name in repository.names:
            model = controller.model(name)
            if model.state != READY:
                raise ConfigError(f"model {name!r} did not load: {model.reason or model.state}")
            inputs = {b: batch_inputs(model.config.inputs, b, seed=b) for b in batch_sizes}
            took: dict[int, dict[int, list[float]]] = {b: {} for b in batch_sizes}
            order = measuring_order(
                batch_sizes, iterations, warmup=warmup, rounds=rounds, seed=seed
            )
            for call in order:
                start = time.perf_counter()
                await controller.infer(
                    InferenceRequest(name, inputs=inputs[call.batch], timeout=60.0)
                )
                if call.round is not None:
                    seconds = time.perf_counter() - start
                    took[call.batch].setdefault(call.round, []).append(seconds)
            for batch in batch_sizes:
                row = summarise(name, kind.name, batch, list(took[batch].values()))
                rows.append(row)
                if progress is not None:
                    progress(row)
    finally:
        await controller.stop()
    return rows


def spread(values: Sequence[float], whole: float) -> float | None:
    """How far apart figures taken in separate rounds are: their range over `whole`, the
    figure of all rounds together (None with fewer than two rounds)."""
    if len(values) < 2 or whole <= 0:
        return None
    return (max(values) - min(values)) / whole


def summarise(
    model: str, hardware: str, batch: int, rounds: Sequence[Sequence[float]]
) -> MeasuredProfile:
    """A profile row from the latencies (seconds) measured in each round: the figures of
    all of them, and how far apart the rounds' means and tails were (`spread`)."""
    taken = [list(r) for r in rounds if len(r)]
    values = np.asarray([v for r in taken for v in r], dtype=np.float64)
    mean = float(values.mean())
    p99 = float(np.percentile(values, 99))
    return MeasuredProfile(
        model,
        hardware,
        batch,
        mean=mean,
        p50=float(np.percentile(values, 50)),
        p99=p99,
        throughput=batch / mean,
        samples=len(values),
        spread=spread([float(np.mean(r)) for r in taken], mean),
        p99_spread=spread([float(np.percentile(r, 99)) for r in taken], p99),
    )


def profile(
    repository: Repository,
    kinds: Sequence[Hardware],
    **options: object,
) -> list[MeasuredProfile]:
    """`profile_kind` for each CPU kind in turn (blocks)."""
    rows: list[MeasuredProfile] = []
    for kind in kinds:
        if kind.gpu is None:
            rows += asyncio.run(profile_kind(repository, kind, **options))  # type: ignore[arg-type]
    return rows


def measure_frontend(
    repository: Path,
    config: Path,
    app: str,
    rows: Sequence[Any],
    *,
    seconds: float = 5.0,
    warmup: float = 2.0,
) -> MeasuredProfile:
    """The server's time per query of `app` outside its models (`frontend_of`), on a
    `headway serve` of `repository` (one worker per model) with `config` declaring the app."""
    if not rows:
        raise ConfigError(f"no sample rows to send to app {app!r}")
    workers = max(1, len(Repository.scan(repository).names))
    with tempfile.TemporaryDirectory(prefix="headway-frontend-") as scratch:
        server = ServerProcess(
            repository,
            state=Path(scratch) / "state.db",
            workers=workers,
            grpc_port=0,
            extra=["--config", str(config)],
            log=Path(scratch) / "server.log",
        )
        with server:
            return frontend_of(server.url, app, rows, seconds=seconds, warmup=warmup)


def frontend_of(
    url: str,
    app: str,
    rows: Sequence[Any],
    *,
    seconds: float = 5.0,
    warmup: float = 2.0,
    saturate: float = 2.0,
) -> MeasuredProfile:
    """The time per query of `app` outside its models on the idle server at `url`: `rows`
    (rotated) are sent four at a time for `warmup` seconds (every model measured, none
    cold), one at a time for `seconds`, then `SATURATING` at a time for `saturate` seconds;
    the stage's time per query is `headway.planning.frontend.frontend_time` of the server's
    `/metrics` around the second and the queries a second of the third."""
    if not rows:
        raise ConfigError(f"no sample rows to send to app {app!r}")
    target = Target.parse(url)
    path = f"{target.prefix}/apps/{app}/predict"
    bodies = [
        http_request(target, path, Body(json.dumps({"input": _plain(r)}).encode())) for r in rows
    ]
    run(target, bodies, duration=warmup, warmup=0.0, concurrency=4)
    before = httpx.get(f"{url}/metrics", timeout=10).text
    alone = _answered(app, run(target, bodies, duration=seconds, warmup=0.0, concurrency=1))
    after = httpx.get(f"{url}/metrics", timeout=10).text
    saturated = None
    if saturate > 0:
        full = run(target, bodies, duration=saturate, warmup=0.0, concurrency=SATURATING)
        saturated = _answered(app, full).ok / saturate
    return frontend_row(app, frontend_time(alone.latencies, before, after, saturated), alone.ok)


class StatsWindows:
    """The server's batch statistics (`batch_seconds`) read every `every` seconds while a run
    goes on, in a thread: how each model's time per action moved within the run."""

    def __init__(self, url: str, every: float = 0.5) -> None:
        self.url, self.every = url, every
        self.reads: list[dict[str, BatchSeconds]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> StatsWindows:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()

    def _poll(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.wait(self.every):
                self.reads.append(batch_seconds(client.get(f"{self.url}/v2/models/stats").json()))


@dataclass(frozen=True)
class UnderLoad:
    """What a run at a planned rate measured: each model's profile under it, and the server's
    event loop's wall time per query (its run and its waits for a core)."""

    profiles: dict[str, LatencyProfile]
    frontend: float
    queries: int
    #: Per model, its worker's wait for a core per action (the tail where no shape is fitted).
    waits: dict[str, float] = field(default_factory=dict)
    #: Per model, the log-normal shape fitted to its run times under the load (its p99s).
    sigmas: dict[str, float] = field(default_factory=dict)


def under_load_of(
    url: str,
    pid: int,
    app: str,
    rows: Sequence[Any],
    idle: Mapping[str, LatencyProfile],
    rate: float,
    *,
    seconds: float = 8.0,
    seed: int = 11,
) -> UnderLoad:
    """Send `app` on the server at `url` (process `pid`) `rows` (rotated) open loop, gamma
    arrivals (CV 1) at `rate` queries/s for `seconds`, and read what they cost: each model of
    `idle` (its profile alone, on the kind the server's workers are) as the server's batch
    statistics saw it (`headway.planning.in_place.loaded_profiles`; a flow's models through
    the stage models that serve them; their p99s from the server's histogram of their run
    times, or where too few ran, their worker's waits for a core; their persistence from the
    statistics read every half second, `StatsWindows`), and the loop thread's run and
    run-queue wait per query.
    """
    target = Target.parse(url)
    path = f"{target.prefix}/apps/{app}/predict"
    bodies = [
        http_request(target, path, Body(json.dumps({"input": _plain(r)}).encode())) for r in rows
    ]
    described = httpx.get(f"{url}/apps/{app}", timeout=10).json()
    stages = (described.get("flow") or {}).get("stages", [])
    served_as = {
        s["models"][0]: s["served_as"][0] for s in stages if s["models"] and s["served_as"]
    }
    sent = arrivals.schedule(rate, seconds, "gamma", cv=1.0, seed=seed)
    before, loop_before = httpx.get(f"{url}/v2/models/stats", timeout=10).json(), scheduled(pid)
    metrics_before = httpx.get(f"{url}/metrics", timeout=10).text
    workers_before = {child: scheduled(child) for child in children(pid)}
    with StatsWindows(url) as windows:
        _answered(app, run(target, bodies, duration=seconds, warmup=0.0, schedule=sent))
    after, loop_after = httpx.get(f"{url}/v2/models/stats", timeout=10).json(), scheduled(pid)
    sigmas = shapes_between(metrics_before, httpx.get(f"{url}/metrics", timeout=10).text)
    workers = {
        child: (ran - workers_before[child][0], waited - workers_before[child][1])
        for child in children(pid)
        if child in workers_before
        for ran, waited in [scheduled(child)]
    }
    loop = sum(loop_after) - sum(loop_before)
    waits = waits_per_action(between(batch_seconds(before), batch_seconds(after)), workers)
    persistences = {name: persistence_in(windows.reads, name) for name in served_as.values()}
    profiles = loaded_profiles(
        idle, before, after, served_as, waits=waits, sigmas=sigmas, persistences=persistences
    )
    by_model = {model: served_as.get(model, model) for model in idle}
    return UnderLoad(
        profiles,
        loop / len(sent),
        len(sent),
        {m: waits[n] for m, n in by_model.items() if n in waits},
        {m: sigmas[n] for m, n in by_model.items() if n in sigmas},
    )


def measure_under_load(
    repository: Path,
    config: Path,
    app: str,
    rows: Sequence[Any],
    idle: Mapping[str, LatencyProfile],
    rate: float,
    *,
    hardware: str,
    seconds: float = 20.0,
    warmup: float = 2.0,
) -> list[MeasuredProfile]:
    """`under_load_of` on a `headway serve` of `repository` (one worker per model) with
    `config` declaring `app`, after `warmup` seconds of queries four at a time: profile rows
    of each model of `idle` under that load on `hardware` (the kind the server's workers are),
    and the app's frontend row, the loop's wall time per query under it."""
    if not rows:
        raise ConfigError(f"no sample rows to send to app {app!r}")
    workers = max(1, len(Repository.scan(repository).names))
    with tempfile.TemporaryDirectory(prefix="headway-under-load-") as scratch:
        server = ServerProcess(
            repository, state=Path(scratch) / "state.db", workers=workers, grpc_port=0,
            extra=["--config", str(config)], log=Path(scratch) / "server.log",
        )  # fmt: skip
        with server:
            assert server.process is not None
            target = Target.parse(server.url)
            path = f"{target.prefix}/apps/{app}/predict"
            bodies = [
                http_request(target, path, Body(json.dumps({"input": _plain(r)}).encode()))
                for r in rows
            ]
            run(target, bodies, duration=warmup, warmup=0.0, concurrency=4)
            found = under_load_of(
                server.url, server.process.pid, app, rows, idle, rate, seconds=seconds
            )
    out = [
        MeasuredProfile(
            model,
            hardware,
            size,
            mean=mean,
            p99=profile.p99.get(size),
            throughput=size / mean,
            samples=found.queries,
        )
        for model, profile in found.profiles.items()
        for size, mean in sorted(profile.seconds.items())
    ]
    return [*out, frontend_row(app, found.frontend, found.queries)]


def _answered(app: str, tally: LoadTally) -> LoadTally:
    failed = tally.rejected + tally.errors + tally.transport_errors + tally.timeouts
    if failed:
        raise ConfigError(
            f"app {app!r} failed {failed} of {tally.ok + failed} queries while measuring its "
            "frontend: check that it answers these rows"
        )
    return tally


def _plain(row: Any) -> Any:
    return row.tolist() if isinstance(row, np.ndarray) else row
