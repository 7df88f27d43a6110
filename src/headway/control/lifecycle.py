"""Model lifecycle: registering, loading, unloading, warming up and re-measuring models, and
following workers as they start and die.

Part of the `Controller` (it is a base class of it), kept apart because it is one concept:
what is loaded where, and how the estimates stay honest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import numpy as np

from headway.clock import TimerClock
from headway.control.actions import LOAD, UNLOAD
from headway.control.engine import Engine, Reply
from headway.control.model_stats import ModelStats
from headway.control.models import (
    LOADING,
    READY,
    UNAVAILABLE,
    UNLOADED,
    ModelState,
    Prediction,
    size_estimate,
)
from headway.control.probes import PROBE_PRIORITY, next_sweep_size
from headway.control.request import Request
from headway.control.scheduler import Scheduler
from headway.datatypes import numpy_dtype
from headway.errors import HeadwayError, ModelNotReady, WorkerFailed
from headway.repository import ModelConfig, Repository, TensorSpec
from headway.store import Store

log = logging.getLogger("headway.controller")

WARMUP_RUNS = 3
WARMUP_DEADLINE_S = 30.0


class ModelLifecycle:
    """Which model is loaded on which worker, and keeping its estimates honest."""

    repository: Repository
    engine: Engine
    store: Store | None
    clock: TimerClock
    scheduler: Scheduler
    models: dict[str, ModelState]
    versions: dict[str, ModelState]
    _states: dict[str, ModelState]
    stats: dict[str, ModelStats]
    memory_budget_mb: float | None
    on_demand: bool
    _remembered: dict[str, tuple[int, str, str]]
    _placement: dict[int, set[str]]
    _ready_workers: set[int]
    _all_ready: asyncio.Event | None
    _loop: asyncio.AbstractEventLoop | None

    def model(self, name: str, version: str | None = None) -> ModelState:
        raise NotImplementedError

    def _kick(self) -> None:
        raise NotImplementedError

    def _fail(self, request: Request, error: HeadwayError) -> None:
        raise NotImplementedError

    def _fail_all(self, requests: list[Request], error: HeadwayError) -> None:
        for request in requests:
            self._fail(request, error)

    def _track(self, config: ModelConfig) -> ModelState:
        model = self._states[config.key] = ModelState(config)
        self.stats[config.key] = ModelStats()
        return model

    def _register(self, name: str) -> ModelState:
        """Start tracking a model's default version (at start-up, or lazily on first use)."""
        config = self.repository.get(name)
        model = self.models[name] = self._track(config)
        if self._user_unloaded(name):
            model.reason = "unloaded through the repository API"
        elif self.on_demand:
            model.state = READY
            self._schedule_model(config)
        return model

    def _register_version(self, config: ModelConfig) -> ModelState:
        """Start serving a version other than the default one, on its first request.

        It is a model like any other under its key `name@version`: with a memory budget it is
        loaded on demand and evictable; else it is placed on its replicas now, and accepts
        requests at once (READY): they queue until the load ends, and are dropped at their
        deadline if it has not (or failed at once if the load fails). It is not recorded in the
        store: what a restart restores is each model's default version.
        """
        model = self.versions[config.key] = self._track(config)
        self._schedule_model(config)
        if not self.on_demand:
            self._begin_load(model)
        model.state = READY
        return model

    def _is_default(self, model: ModelState) -> bool:
        return self.models.get(model.config.name) is model

    def _user_unloaded(self, name: str) -> bool:
        """Whether the model was unloaded through the API before this start."""
        return self._remembered.get(name, (0, "loaded", ""))[1] == "unloaded"

    def _schedule_model(self, config: ModelConfig) -> None:
        self.scheduler.add_model(
            config.key,
            max_batch=config.max_batch_size,
            batch_delay=config.batch_delay_ms / 1000.0,
            max_queue=config.max_queue,
            size_mb=size_estimate(config),
        )
        self._seed_profile(config)

    def _place(self, config: ModelConfig) -> list[int]:
        """Pick `replicas` distinct workers, the least loaded first; or, with an engine that
        starts workers for each model (Ray's actors), the workers it started for this one."""
        started = self.engine.place(config)
        if started is not None:
            for worker in started:
                self._placement.setdefault(worker, set())
            return list(started)
        workers = sorted(self._placement, key=lambda w: (len(self._placement[w]), w))
        return workers[: max(1, min(config.replicas, len(workers)))]

    def _release_idle_workers(self) -> None:
        """Hand back the workers that host nothing any more, with an engine that started them
        for a model (the model was unloaded: its replicas go)."""
        for worker in [w for w, keys in self._placement.items() if not keys]:
            if self.engine.retire(worker):
                del self._placement[worker]
                self._ready_workers.discard(worker)
                _, failed = self.scheduler.worker_lost(worker)
                self._fail_all(failed, ModelNotReady("the model was unloaded while it ran"))

    def scale(self, name: str, replicas: int) -> int:
        """Serve model `name` on `replicas` workers (the tuner's decision); returns how many it
        is placed on now. More: a worker the engine starts for it (`Engine.grow`), loaded once
        it is ready; an engine that cannot grow leaves the count as it is. Fewer: the newest
        replicas go; a worker started for them is retired (what it ran is retried elsewhere),
        another unloads the model. Never fewer than one."""
        model = self.model(name)
        key = model.config.key
        placed = sorted(w for w, keys in self._placement.items() if key in keys)
        replicas = max(1, replicas)
        while len(placed) < replicas:
            worker = self.engine.grow()
            if worker is None:
                break
            self._placement[worker] = {key}  # loaded when it says it is ready
            placed.append(worker)
        for worker in reversed(placed[replicas:]):
            placed.remove(worker)
            self._placement[worker].discard(key)
            self.scheduler.unplaced(key, worker)
            model.workers.discard(worker)
            model.loading.discard(worker)
            if self._placement[worker] or not self.engine.retire(worker):
                if worker in self._ready_workers:
                    self.scheduler.control(worker, UNLOAD, key, payload=name)
                continue
            del self._placement[worker]
            self._ready_workers.discard(worker)
            _, failed = self.scheduler.worker_lost(worker)  # the rest is retried elsewhere
            self._fail_all(failed, WorkerFailed(f"model {name!r}: its replica was retired"))
        self._kick()
        return len(placed)

    def worker_nodes(self) -> dict[int, str]:
        """The cluster node of each placed worker (empty for an engine on one machine)."""
        return self.engine.nodes()

    def nodes_of(self, model: ModelState) -> list[str]:
        """The nodes hosting the model's loaded replicas (empty for an engine on one machine)."""
        where = self.worker_nodes()
        return sorted({where[w] for w in model.workers if w in where})

    async def load(self, name: str, version: str | None = None) -> ModelState:
        """Load the model (its default version, or `version`) on its replicas; waits until
        they answered."""
        model = self.model(name, version)
        if model.state == READY:
            return model
        store = self.store if self._is_default(model) else None  # restarts restore defaults
        if self.on_demand:
            model.state, model.reason = READY, ""
            self._schedule_model(model.config)
            if store:
                store.set_model_state(name, model.config.version, "loaded")
            return model
        assert self._loop is not None
        waiter: asyncio.Future[None] = self._loop.create_future()
        model.waiters.append(waiter)
        self._begin_load(model)
        await waiter
        if store:
            store.set_model_state(name, model.config.version, "loaded")
        return model

    def _begin_load(self, model: ModelState) -> None:
        """Send the model's LOADs to the workers picked for it, unless they are on their way."""
        if model.state != LOADING:
            model.state, model.reason = LOADING, ""
            try:
                workers = self._place(model.config)
            except ModelNotReady as exc:  # no node of a cluster has what it needs
                self._unplaceable(model, exc)
                return
            for worker in workers:
                self._placement[worker].add(model.config.key)
                self._send_load(model, worker)

    def _unplaceable(self, model: ModelState, error: ModelNotReady) -> None:
        model.state, model.reason = UNAVAILABLE, error.message
        log.error("%s", error.message)
        self._fail_all(self.scheduler.remove_model(model.config.key), error)
        for waiter in model.waiters:
            if not waiter.done():
                waiter.set_result(None)
        model.waiters.clear()

    def _send_load(self, model: ModelState, worker: int) -> None:
        model.loading.add(worker)
        if worker in self._ready_workers:
            self.scheduler.control(worker, LOAD, model.config.key, payload=model.config.name)
            self._kick()

    async def unload(self, name: str, version: str | None = None) -> None:
        model = self.model(name, version)
        key = model.config.key
        for worker in list(model.workers):
            self.scheduler.unplaced(key, worker)
            if worker in self._ready_workers:
                self.scheduler.control(worker, UNLOAD, key, payload=name)
        for worker in self._placement:
            self._placement[worker].discard(key)
        self._release_idle_workers()
        self._fail_all(
            self.scheduler.remove_model(key), ModelNotReady(f"model {name!r} was unloaded")
        )
        model.workers.clear()
        model.loading.clear()
        model.state, model.reason = UNLOADED, "unloaded through the repository API"
        if self.store and self._is_default(model):
            self.store.set_model_state(name, model.config.version, "unloaded")
        self._kick()

    def _loaded(self, worker: int, key: str, reply: Reply) -> None:
        model = self._states.get(key)
        if model is None:
            return
        if self.on_demand:
            self._loaded_on_demand(worker, model, reply)
            return
        if worker not in model.loading:
            return
        model.loading.discard(worker)
        if reply["ok"]:
            config = model.config
            inferred_in = tuple(TensorSpec.parse(t, key) for t in reply.get("inputs") or ())
            inferred_out = tuple(TensorSpec.parse(t, key) for t in reply.get("outputs") or ())
            model.config = config.with_signature(inferred_in, inferred_out)
            model.memory_mb = max(model.memory_mb, float(reply.get("memory_mb") or 0.0))
            self.scheduler.add_model(
                config.key,
                max_batch=config.max_batch_size,
                batch_delay=config.batch_delay_ms / 1000.0,
                max_queue=config.max_queue,
            )
            first = not model.workers
            self.scheduler.placed(config.key, worker)
            model.workers.add(worker)
            model.state, model.reason = READY, ""
            if first:
                self._seed_profile(model.config)
                self._warm_up(model.config, WARMUP_RUNS)
        elif not model.workers:
            model.reason = f"failed to load: {reply.get('error')}"
            log.error("model %s %s", key, model.reason)
            self._placement[worker].discard(key)
            if not model.loading:
                model.state = UNAVAILABLE
                # requests queued while it loaded (a version asked for by name) fail now
                self._fail_all(
                    self.scheduler.remove_model(key),
                    ModelNotReady(f"model {model.config.name!r} {model.reason}"),
                )
        if not model.loading:
            for waiter in model.waiters:
                if not waiter.done():
                    waiter.set_result(None)
            model.waiters.clear()

    def _loaded_on_demand(self, worker: int, model: ModelState, reply: Reply) -> None:
        config = model.config
        if not reply["ok"]:
            self.scheduler.load_failed(config.key, worker)
            model.state = UNAVAILABLE
            model.reason = f"failed to load: {reply.get('error')}"
            log.error("model %s %s", config.name, model.reason)
            self._fail_all(
                self.scheduler.remove_model(config.key),
                ModelNotReady(f"model {config.name!r} {model.reason}"),
            )
            return
        inferred_in = tuple(TensorSpec.parse(t, config.name) for t in reply.get("inputs") or ())
        inferred_out = tuple(TensorSpec.parse(t, config.name) for t in reply.get("outputs") or ())
        model.config = config.with_signature(inferred_in, inferred_out)
        measured = float(reply.get("memory_mb") or 0.0)
        size = config.memory_mb if config.memory_mb is not None else None
        if size is None and measured > 0:
            size = max(measured, size_estimate(config))
        model.memory_mb = size or size_estimate(config)
        self.scheduler.placed(config.key, worker, size_mb=size)
        model.workers.add(worker)

    def _seed_profile(self, config: ModelConfig) -> None:
        """Start from the durations measured in an earlier run, when the store has them."""
        if self.store is None or self.scheduler.estimator.profiled(config.key):
            return
        for rows, seconds in self.store.profile(config.key).items():
            self.scheduler.estimator.observe(config.key, rows, seconds)

    def _warm_up(self, config: ModelConfig, runs: int, rows: int = 1) -> None:
        """Run a few one-row batches of zeros so the first real request meets a warm model
        and a profile (frameworks compile or allocate lazily on their first calls), then
        sweep bigger batch sizes, one run each (`probes.next_sweep_size`): a size never
        measured is otherwise estimated per row from batch 1, far too high for most models.
        Measuring runs go after every queued request (PROBE_PRIORITY)."""
        if runs <= 0:
            following = next_sweep_size(
                self.scheduler.predictions,
                config.key,
                rows,
                max_batch=config.max_batch_size,
                slo=config.slo_ms / 1000.0,
                inline=self.engine.runs_inline,
            )
            if following is not None:
                self._warm_up(config, 1, following)
            return
        # the very first run is cold: not a measurement
        cold = rows == 1 and runs == WARMUP_RUNS
        self._measure(config, rows, then=lambda: self._warm_up(config, runs - 1, rows), cold=cold)

    def _measure(
        self, config: ModelConfig, rows: int, *, then: Callable[[], None], cold: bool = False
    ) -> None:
        """Run a batch of `rows` rows of zeros after all queued work, to measure it; `then()`
        once it ran."""
        specs = config.inputs
        if not specs or any(s.datatype == "BYTES" or -1 in s.shape[1:] for s in specs):
            return
        if not self.scheduler.has_model(config.key):  # unloaded, or the server is stopping
            return
        inputs = {s.name: np.zeros((rows, *s.shape[1:]), numpy_dtype(s.datatype)) for s in specs}
        now = self.clock.now()
        request = Request(
            config.key, inputs, rows, now, now + WARMUP_DEADLINE_S, priority=PROBE_PRIORITY
        )
        request.measured = not cold
        assert self._loop is not None
        future: asyncio.Future[Prediction] = self._loop.create_future()
        future.add_done_callback(lambda f: None if f.exception() else then())
        request.token = future
        try:
            self.scheduler.submit(request)
        except HeadwayError:
            return
        self._kick()

    def _refresh_estimate(self, request: Request) -> None:
        """Measure the size of a request refused on its estimate, when the estimate may be
        wrong (`Scheduler.probe_wanted`): a size never measured, or an estimate inflated by
        one slow run, would otherwise turn such requests away for ever, as a refused request
        never runs to correct it."""
        model = self._states.get(request.model)
        if model is not None and self.scheduler.probe_wanted(request):
            self._measure(model.config, request.rows, then=lambda: None)

    def _on_worker_ready(self, worker: int, pid: int) -> None:
        self._ready_workers.add(worker)
        share = None if self.memory_budget_mb is None else self.memory_budget_mb / self.engine.size
        self.scheduler.add_worker(worker, memory_mb=share)
        for key in self._placement.get(worker, ()):
            model = self._states[key]
            if model.state in (READY, LOADING):
                model.loading.discard(worker)
                self._send_load(model, worker)
        if self._all_ready is not None and len(self._ready_workers) >= self.engine.size:
            self._all_ready.set()
        self._kick()

    def _on_worker_exit(self, worker: int, code: int | None) -> None:
        log.warning("worker %d exited (code %s); restarting it", worker, code)
        self._ready_workers.discard(worker)
        retried, failed = self.scheduler.worker_lost(worker)
        for model in self._states.values():
            model.workers.discard(worker)
        for request in failed:
            self._fail(
                request,
                WorkerFailed(
                    f"model {request.model!r}: the worker running the request died (exit code "
                    f"{code}) and the retry failed too; retry the request"
                ),
            )
        if retried:
            log.warning("requeued %d request(s) from worker %d", len(retried), worker)
        self._kick()
