"""Model lifecycle: registering, loading, unloading and placing models, and following
workers as they start and die: what is loaded where.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from headway.control.actions import LOAD, UNLOAD
from headway.control.engine import Engine, Reply
from headway.control.jobs import Job
from headway.control.model_stats import ModelStats
from headway.control.models.apart import apart_workers, workers_short
from headway.control.models.measuring import WARMUP_RUNS, Measuring
from headway.control.models.states import (
    LOADING,
    READY,
    UNAVAILABLE,
    UNLOADED,
    ModelState,
    size_estimate,
)
from headway.control.scheduling.scheduler import Scheduler
from headway.errors import (
    ConfigError,
    HeadwayError,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    WorkerFailed,
)
from headway.repository import MAX_VERSION_DIGITS, ModelConfig, Repository, TensorSpec
from headway.store import Store

log = logging.getLogger("headway.controller")


class ModelLifecycle:
    """Which model is loaded on which worker, from registration to unload, and the workers'
    comings and goings, through `engine`. The controller owns one; `kick` asks it to poll the scheduler soon,
    `fail` fails a request, `new_future` makes a future on the controller's loop."""

    def __init__(
        self,
        repository: Repository,
        engine: Engine,
        scheduler: Scheduler,
        measuring: Measuring,
        *,
        store: Store | None,
        memory_budget_mb: float | None,
        kick: Callable[[], None],
        fail: Callable[[Job, HeadwayError], None],
        new_future: Callable[[], asyncio.Future[Any]],
    ) -> None:
        self.repository = repository
        self.engine = engine
        self.scheduler = scheduler
        self.measuring = measuring
        self.store = store
        #: With a memory budget, models load on demand and are evicted to fit it.
        self.memory_budget_mb = memory_budget_mb
        self.on_demand = memory_budget_mb is not None
        self._kick = kick
        self._fail = fail
        self._new_future = new_future
        #: The default (served) version of each model, by name: what unversioned routes answer.
        self.models: dict[str, ModelState] = {}
        #: Other versions of the repository's models, by `name@version`, registered on first use.
        self.versions: dict[str, ModelState] = {}
        #: Every model state, default or not, by `name@version` (what the scheduler and the
        #: workers call a model); `stats` is keyed the same way.
        self.states: dict[str, ModelState] = {}
        self.stats: dict[str, ModelStats] = {}
        self.remembered = store.model_states() if store else {}
        #: The models placed on each worker, and the workers that said they are ready.
        self.placement: dict[int, set[str]] = {w: set() for w in range(engine.size)}
        self.ready_workers: set[int] = set()
        #: Set once every worker is ready.
        self.all_ready = asyncio.Event()
        #: The models each model must not share a worker with (`keep_apart`), by key.
        self.apart: dict[str, frozenset[str]] = {}
        for name in repository.models:
            self.register(name)

    def model(self, name: str, version: str | None = None) -> ModelState:
        """The model by name: its default version, or `version` when given (any version in the
        repository, registered and loaded on first use); ModelNotFound otherwise.

        """
        state = self.models.get(name)
        if state is None:
            self.repository.get(name)  # raises with the reason it is missing or broken
            state = self.register(name)
        if version is None:
            return state
        found = self.versions.get(f"{name}@{version}")
        if found is not None:
            return found
        if not (version.isascii() and version.isdigit()):
            raise InvalidInput(f"model {name!r}: version must be an integer, got {version!r}")
        if len(version.lstrip("0")) > MAX_VERSION_DIGITS:  # no folder is named so (int() refuses)
            raise ModelNotFound(
                f"model {name!r} has no version of {len(version)} digits; it has "
                f"{list(state.config.versions)}"
            )
        number = int(version)
        if number == state.config.version:
            return state
        known = self.versions.get(f"{name}@{number}")  # asked as e.g. "02"
        if known is not None:
            return known
        return self.register_version(self.repository.version(name, number))

    def fail_all(self, requests: list[Job], error: HeadwayError) -> None:
        for request in requests:
            self._fail(request, error)

    def track(self, config: ModelConfig) -> ModelState:
        model = self.states[config.key] = ModelState(config)
        self.stats[config.key] = ModelStats()
        return model

    def register(self, name: str) -> ModelState:
        """Start tracking a model's default version (at start-up, or lazily on first use)."""
        config = self.repository.get(name)
        model = self.models[name] = self.track(config)
        if self.user_unloaded(name):
            model.reason = "unloaded through the repository API"
        elif self.on_demand:
            model.state = READY
            self.schedule_model(config)
        return model

    def register_version(self, config: ModelConfig) -> ModelState:
        """Start serving a version other than the default one, on its first request.

        It is a model like any other under its key `name@version`: with a memory budget it is
        loaded on demand and evictable; else it is placed on its replicas now, and accepts
        requests at once (READY): they queue until the load ends, and are dropped at their
        deadline if it has not (or failed at once if the load fails). It is not recorded in the
        store: what a restart restores is each model's default version.
        """
        model = self.versions[config.key] = self.track(config)
        self.schedule_model(config)
        if not self.on_demand:
            self.begin_load(model)
        model.state = READY
        return model

    def is_default(self, model: ModelState) -> bool:
        return self.models.get(model.config.name) is model

    def user_unloaded(self, name: str) -> bool:
        """Whether the model was unloaded through the API before this start."""
        return self.remembered.get(name, (0, "loaded", ""))[1] == "unloaded"

    def schedule_model(self, config: ModelConfig) -> None:
        self.scheduler.placement.add_model(
            config.key,
            max_batch=config.max_batch_size,
            batch_delay=config.batch_delay_ms / 1000.0,
            max_queue=config.max_queue,
            size_mb=size_estimate(config),
            generation=config.generative,
        )
        self.measuring.seed_profile(config)

    def place(self, config: ModelConfig) -> list[int]:
        """Pick `replicas` distinct workers, the least loaded first; or, with an engine that
        starts workers for each model (Ray's actors), the workers it started for this one."""
        started = self.engine.place(config)
        if started is not None:
            for worker in started:
                self.placement.setdefault(worker, set())
            return list(started)
        siblings = self.apart.get(config.key)
        if siblings:
            return self.place_apart(config, siblings)
        workers = sorted(self.placement, key=lambda w: (len(self.placement[w]), w))
        return workers[: max(1, min(config.replicas, len(workers)))]

    def keep_apart(self, names: list[str], why: str) -> None:
        """Place the models `names` (the competing copies of a flow stage, `why`) on distinct
        workers: the engine starts the workers they need beyond those it has, now; a
        ConfigError says why when it cannot (then nothing is kept apart). An engine that
        starts workers for each model (Ray's actors) gives each its own already."""
        keys = [self.model(name).config.key for name in names]
        short = workers_short(len(self.placement), len(keys))
        started: list[int] = []
        if self.engine.kind != "ray" and not self.on_demand:
            for _ in range(short):
                worker = self.engine.grow(self.states[keys[0]].config)
                if worker is None:
                    for grown in started:
                        self.engine.retire(grown)
                        del self.placement[grown]
                    raise ConfigError(
                        f"{why} races {len(keys)} copies, which need {len(keys)} distinct "
                        f"workers; the server has {len(self.placement)} and its "
                        f"{self.engine.kind} engine cannot start more: serve with more "
                        "--workers (or --engine local), or turn compete off for the app"
                    )
                self.placement[worker] = set()
                started.append(worker)
        for key in keys:
            self.apart[key] = frozenset(keys) - {key}

    def place_apart(self, config: ModelConfig, siblings: frozenset[str]) -> list[int]:
        """Workers for a model kept apart from `siblings`: ones holding none of them, more
        started where too few are free (ModelNotReady when the engine cannot)."""
        chosen, short = apart_workers(self.placement, siblings, max(1, config.replicas))
        for _ in range(short):
            worker = self.engine.grow(config)
            if worker is None:
                break
            self.placement[worker] = set()
            chosen.append(worker)
        if not chosen:
            raise ModelNotReady(
                f"model {config.name!r}: every worker holds one of its competing copies, and "
                f"the {self.engine.kind} engine cannot start another"
            )
        return chosen

    def release_idle_workers(self) -> None:
        """Hand back the workers that host nothing any more, with an engine that started them
        for a model (the model was unloaded: its replicas go)."""
        for worker in [w for w, keys in self.placement.items() if not keys]:
            if self.engine.retire(worker):
                del self.placement[worker]
                self.ready_workers.discard(worker)
                _, failed = self.scheduler.worker_lost(worker)
                self.fail_all(failed, ModelNotReady("the model was unloaded while it ran"))

    def scale(self, name: str, replicas: int) -> int:
        """Serve model `name` on `replicas` workers (the tuner's decision); returns how many it
        is placed on now. More: a worker the engine starts for it (`Engine.grow`), loaded once
        it is ready; an engine that cannot grow leaves the count as it is. Fewer: the newest
        replicas go; a worker started for them is retired (what it ran is retried elsewhere),
        another unloads the model. Never fewer than one."""
        model = self.model(name)
        key = model.config.key
        placed = sorted(w for w, keys in self.placement.items() if key in keys)
        replicas = max(1, replicas)
        while len(placed) < replicas:
            worker = self.engine.grow(model.config)
            if worker is None:
                break
            self.placement[worker] = {key}  # loaded when it says it is ready
            placed.append(worker)
        for worker in reversed(placed[replicas:]):
            placed.remove(worker)
            self.placement[worker].discard(key)
            self.scheduler.unplaced(key, worker)
            model.workers.discard(worker)
            model.loading.discard(worker)
            if self.placement[worker] or not self.engine.retire(worker):
                if worker in self.ready_workers:
                    self.scheduler.control(worker, UNLOAD, key, payload=name)
                continue
            del self.placement[worker]
            self.ready_workers.discard(worker)
            _, failed = self.scheduler.worker_lost(worker)  # the rest is retried elsewhere
            self.fail_all(failed, WorkerFailed(f"model {name!r}: its replica was retired"))
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
        store = self.store if self.is_default(model) else None  # restarts restore defaults
        if self.on_demand:
            model.state, model.reason = READY, ""
            self.schedule_model(model.config)
            if store:
                store.set_model_state(name, model.config.version, "loaded")
            return model
        waiter: asyncio.Future[None] = self._new_future()
        model.waiters.append(waiter)
        self.begin_load(model)
        await waiter
        if store:
            store.set_model_state(name, model.config.version, "loaded")
        return model

    def begin_load(self, model: ModelState) -> None:
        """Send the model's LOADs to the workers picked for it, unless they are on their way."""
        if model.state != LOADING:
            model.state, model.reason = LOADING, ""
            try:
                workers = self.place(model.config)
            except ModelNotReady as exc:  # no node of a cluster has what it needs
                self.unplaceable(model, exc)
                return
            for worker in workers:
                self.placement[worker].add(model.config.key)
                self.send_load(model, worker)

    def unplaceable(self, model: ModelState, error: ModelNotReady) -> None:
        model.state, model.reason = UNAVAILABLE, error.message
        log.error("%s", error.message)
        self.fail_all(self.scheduler.remove_model(model.config.key), error)
        for waiter in model.waiters:
            if not waiter.done():
                waiter.set_result(None)
        model.waiters.clear()

    def send_load(self, model: ModelState, worker: int) -> None:
        model.loading.add(worker)
        if worker in self.ready_workers:
            self.scheduler.control(worker, LOAD, model.config.key, payload=model.config.name)
            self._kick()

    async def unload(self, name: str, version: str | None = None) -> None:
        model = self.model(name, version)
        key = model.config.key
        for worker in list(model.workers):
            self.scheduler.unplaced(key, worker)
            if worker in self.ready_workers:
                self.scheduler.control(worker, UNLOAD, key, payload=name)
        for worker in self.placement:
            self.placement[worker].discard(key)
        self.release_idle_workers()
        self.fail_all(
            self.scheduler.remove_model(key), ModelNotReady(f"model {name!r} was unloaded")
        )
        model.workers.clear()
        model.loading.clear()
        model.state, model.reason = UNLOADED, "unloaded through the repository API"
        if self.store and self.is_default(model):
            self.store.set_model_state(name, model.config.version, "unloaded")
        self._kick()

    def loaded(self, worker: int, key: str, reply: Reply) -> None:
        model = self.states.get(key)
        if model is None:
            return
        if self.on_demand:
            self.loaded_on_demand(worker, model, reply)
            return
        if worker not in model.loading:
            return
        model.loading.discard(worker)
        if reply["ok"]:
            config = model.config
            inferred_in = tuple(TensorSpec.parse(t, key) for t in reply.get("inputs") or ())
            inferred_out = tuple(TensorSpec.parse(t, key) for t in reply.get("outputs") or ())
            model.config = config.with_signature(inferred_in, inferred_out)
            # counted on its worker with or without a budget: what it declares, else what its
            # load measured (the worker's resident memory grew by it)
            size = config.memory_mb
            if size is None:
                size = float(reply.get("memory_mb") or 0.0)
            model.memory_mb = max(model.memory_mb, size)
            if reply.get("streams"):
                model.config = replace(model.config, streams=True)
            self.scheduler.placement.add_model(
                config.key,
                max_batch=config.max_batch_size,
                batch_delay=config.batch_delay_ms / 1000.0,
                max_queue=config.max_queue,
                generation=config.generative,
            )
            first = not model.workers
            self.scheduler.placed(config.key, worker, size_mb=size)
            model.workers.add(worker)
            model.state, model.reason = READY, ""
            if first:
                self.measuring.seed_profile(model.config)
                if model.config.generative is not None:
                    self.measuring.warm_up_steps(model.config)
                else:
                    self.measuring.warm_up(model.config, WARMUP_RUNS)
        elif not model.workers:
            model.reason = f"failed to load: {reply.get('error')}"
            log.error("model %s %s", key, model.reason)
            self.placement[worker].discard(key)
            if not model.loading:
                model.state = UNAVAILABLE
                # requests queued while it loaded (a version asked for by name) fail now
                self.fail_all(
                    self.scheduler.remove_model(key),
                    ModelNotReady(f"model {model.config.name!r} {model.reason}"),
                )
        if not model.loading:
            for waiter in model.waiters:
                if not waiter.done():
                    waiter.set_result(None)
            model.waiters.clear()

    def loaded_on_demand(self, worker: int, model: ModelState, reply: Reply) -> None:
        config = model.config
        if not reply["ok"]:
            self.scheduler.load_failed(config.key, worker)
            model.state = UNAVAILABLE
            model.reason = f"failed to load: {reply.get('error')}"
            log.error("model %s %s", config.name, model.reason)
            self.fail_all(
                self.scheduler.remove_model(config.key),
                ModelNotReady(f"model {config.name!r} {model.reason}"),
            )
            return
        inferred_in = tuple(TensorSpec.parse(t, config.name) for t in reply.get("inputs") or ())
        inferred_out = tuple(TensorSpec.parse(t, config.name) for t in reply.get("outputs") or ())
        model.config = config.with_signature(inferred_in, inferred_out)
        if reply.get("streams"):
            model.config = replace(model.config, streams=True)
        measured = float(reply.get("memory_mb") or 0.0)
        size = config.memory_mb if config.memory_mb is not None else None
        if size is None and measured > 0:
            size = max(measured, size_estimate(config))
        model.memory_mb = size or size_estimate(config)
        self.scheduler.placed(config.key, worker, size_mb=size)
        model.workers.add(worker)

    def on_worker_ready(self, worker: int, pid: int) -> None:
        self.ready_workers.add(worker)
        share = None if self.memory_budget_mb is None else self.memory_budget_mb / self.engine.size
        self.scheduler.placement.add_worker(worker, memory_mb=share)
        for key in self.placement.get(worker, ()):
            model = self.states[key]
            if model.state in (READY, LOADING):
                model.loading.discard(worker)
                self.send_load(model, worker)
        if len(self.ready_workers) >= self.engine.size:
            self.all_ready.set()
        self._kick()

    def on_worker_exit(self, worker: int, code: int | None) -> None:
        log.warning("worker %d exited (code %s); restarting it", worker, code)
        self.ready_workers.discard(worker)
        retried, failed = self.scheduler.worker_lost(worker)
        for model in self.states.values():
            model.workers.discard(worker)
        for request in failed:
            if request.made:
                error = WorkerFailed(
                    f"model {request.model!r}: the worker running the stream died (exit code "
                    f"{code}) after {request.made} parts, and its sequence with it; retry "
                    "the request"
                )
            else:
                error = WorkerFailed(
                    f"model {request.model!r}: the worker running the request died (exit code "
                    f"{code}) and the retry failed too; retry the request"
                )
            self._fail(request, error)
        if retried:
            log.warning("requeued %d request(s) from worker %d", len(retried), worker)
        self._kick()
