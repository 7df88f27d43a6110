"""The data plane every transport calls: admit, queue, batch, dispatch, answer.

The `Controller` drives the pure `Scheduler` from one asyncio event loop: a request becomes a
future in a deadline-ordered queue; each poll of the scheduler turns idle workers' slots into
actions sent through the engine; replies resolve the futures with their rows of the batch.
It holds no sockets itself: the engine (runtime layer) moves the bytes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from headway.clock import Clock, MonotonicClock
from headway.control.cache import PredictionCache, cache_key
from headway.control.models import (
    LOADING,
    READY,
    UNAVAILABLE,
    UNLOADED,
    ModelState,
    Prediction,
    size_estimate,
)
from headway.control.policy import HEADWAY, SchedulingPolicy
from headway.control.profiles import LatencyEstimator
from headway.control.request import Request, priority_level
from headway.control.scheduler import INFER, LOAD, UNLOAD, Dispatch, Scheduler
from headway.control.stats import ModelStats
from headway.control.validate import check_inputs, check_outputs
from headway.datatypes import numpy_dtype
from headway.errors import (
    DeadlineUnmeetable,
    HeadwayError,
    InvalidInput,
    ModelError,
    ModelNotFound,
    ModelNotReady,
    WorkerFailed,
)
from headway.repository import ModelConfig, Repository, TensorSpec
from headway.store import Store

log = logging.getLogger("headway.controller")

WARMUP_RUNS = 3
WARMUP_DEADLINE_S = 30.0
PROBE_INTERVAL_S = 0.05


class Engine(Protocol):
    """What the controller needs from the runtime: send actions, hear replies and exits."""

    size: int
    on_ready: Any
    on_message: Any
    on_exit: Any

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def send(self, worker: int, header: dict[str, Any], tensors: dict[str, np.ndarray]) -> bool: ...
    def pids(self) -> dict[int, int]: ...


class Controller:
    """Serves a repository's models from an engine's workers. See the module docstring."""

    def __init__(
        self,
        repository: Repository,
        engine: Engine,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        cache_bytes: int = 32 * 1024 * 1024,
        ready_timeout: float = 60.0,
        memory_budget_mb: float | None = None,
        policy: SchedulingPolicy = HEADWAY,
    ) -> None:
        self.repository = repository
        self.engine = engine
        self.store = store
        self.clock = clock or MonotonicClock()
        #: With a memory budget, models load on demand and are evicted to fit it.
        self.memory_budget_mb = memory_budget_mb
        self.on_demand = memory_budget_mb is not None
        self.scheduler = Scheduler(
            self.clock, LatencyEstimator(), policy=policy, demand_loading=self.on_demand
        )
        self.cache = PredictionCache(cache_bytes)
        self.models: dict[str, ModelState] = {}
        self.stats: dict[str, ModelStats] = {}
        self._remembered = store.model_states() if store else {}
        for name in repository.models:
            self._register(name)
        self.ready_timeout = ready_timeout
        self._placement: dict[int, set[str]] = {w: set() for w in range(engine.size)}
        self._ready_workers: set[int] = set()
        self._all_ready: asyncio.Event | None = None
        self._in_flight: dict[bytes, asyncio.Future[Prediction]] = {}
        self._pump_scheduled = False
        self._probed: dict[str, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = False
        engine.on_ready = self._on_worker_ready
        engine.on_message = self._on_reply
        engine.on_exit = self._on_worker_exit

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the workers, then load every model the store does not mark unloaded."""
        self._loop = asyncio.get_running_loop()
        self._all_ready = asyncio.Event()
        await self.engine.start()
        try:
            await asyncio.wait_for(self._all_ready.wait(), self.ready_timeout)
        except TimeoutError:
            raise WorkerFailed(
                f"workers did not start within {self.ready_timeout:.0f} s "
                f"({len(self._ready_workers)} of {self.engine.size} ready)"
            ) from None
        for name, reason in self.repository.broken.items():
            log.warning("model %s cannot be served: %s", name, reason)
        if not self.on_demand:
            loads = [self.load(name) for name in self.models if not self._user_unloaded(name)]
            await asyncio.gather(*loads, return_exceptions=True)
        self.started = True

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for model in self.models.values():
            self._fail_all(
                self.scheduler.remove_model(model.config.key), ModelNotReady("server stopping")
            )
        if self.store is not None:
            for key, estimates in self.scheduler.estimator.snapshot().items():
                self.store.save_profile(key, estimates)
        await self.engine.stop()

    @property
    def ready(self) -> bool:
        return self.started and not any(m.state == LOADING for m in self.models.values())

    # -- models ------------------------------------------------------------------------------
    def model(self, name: str, version: str | None = None) -> ModelState:
        """The served model by name (and version, when given); ModelNotFound otherwise."""
        state = self.models.get(name)
        if state is None:
            self.repository.get(name)  # raises with the reason it is missing or broken
            state = self._register(name)
        if version is not None:
            if not version.isdigit():
                raise InvalidInput(f"model {name!r}: version must be an integer, got {version!r}")
            if int(version) != state.config.version:
                if int(version) in state.config.versions:
                    raise ModelNotFound(
                        f"model {name!r} version {version} is in the repository but not served; "
                        f"version {state.config.version} is (pin it with 'version:' in model.yaml)"
                    )
                raise ModelNotFound(
                    f"model {name!r} has no version {version}; it has {list(state.config.versions)}"
                )
        return state

    def _register(self, name: str) -> ModelState:
        """Start tracking a model of the repository (at start-up, or lazily on first use)."""
        config = self.repository.get(name)
        model = self.models[name] = ModelState(config)
        self.stats[name] = ModelStats()
        if self._user_unloaded(name):
            model.reason = "unloaded through the repository API"
        elif self.on_demand:
            model.state = READY
            self._schedule_model(config)
        return model

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
        """Pick `replicas` distinct workers, the least loaded first."""
        workers = sorted(self._placement, key=lambda w: (len(self._placement[w]), w))
        return workers[: max(1, min(config.replicas, len(workers)))]

    async def load(self, name: str) -> ModelState:
        """Load the model's served version on its replicas; waits until they answered."""
        model = self.model(name)
        if model.state == READY:
            return model
        if self.on_demand:
            model.state, model.reason = READY, ""
            self._schedule_model(model.config)
            if self.store:
                self.store.set_model_state(name, model.config.version, "loaded")
            return model
        assert self._loop is not None
        waiter: asyncio.Future[None] = self._loop.create_future()
        model.waiters.append(waiter)
        if model.state != LOADING:
            model.state, model.reason = LOADING, ""
            for worker in self._place(model.config):
                self._placement[worker].add(name)
                self._send_load(model, worker)
        await waiter
        if self.store:
            self.store.set_model_state(name, model.config.version, "loaded")
        return model

    def _send_load(self, model: ModelState, worker: int) -> None:
        model.loading.add(worker)
        if worker in self._ready_workers:
            self.scheduler.control(worker, LOAD, model.config.key, payload=model.config.name)
            self._kick()

    async def unload(self, name: str) -> None:
        model = self.model(name)
        key = model.config.key
        for worker in list(model.workers):
            self.scheduler.unplaced(key, worker)
            if worker in self._ready_workers:
                self.scheduler.control(worker, UNLOAD, key, payload=name)
        for worker in self._placement:
            self._placement[worker].discard(name)
        self._fail_all(
            self.scheduler.remove_model(key), ModelNotReady(f"model {name!r} was unloaded")
        )
        model.workers.clear()
        model.loading.clear()
        model.state, model.reason = UNLOADED, "unloaded through the repository API"
        if self.store:
            self.store.set_model_state(name, model.config.version, "unloaded")
        self._kick()

    # -- inference ---------------------------------------------------------------------------
    async def infer(
        self,
        name: str,
        inputs: dict[str, np.ndarray],
        *,
        version: str | None = None,
        outputs: Sequence[str] | None = None,
        timeout: float | None = None,
        priority: int | None = None,
    ) -> Prediction:
        """Answer one request within its deadline, or raise a HeadwayError saying why not.

        `timeout` (seconds) overrides the model's slo_ms as the deadline.
        """
        model = self.model(name, version)
        stats = self.stats[name]
        stats.requests += 1
        started = self.clock.now()
        try:
            if model.state != READY:
                raise ModelNotReady(
                    f"model {name!r} is {model.state.lower()}"
                    + (f": {model.reason}" if model.reason else "")
                )
            config = model.config
            rows = check_inputs(name, config.inputs, inputs)
            wanted = tuple(outputs) if outputs else None
            check_outputs(name, config.outputs, wanted)
            deadline = started + (timeout if timeout is not None else config.slo_ms / 1000.0)
            request = Request(
                config.key, inputs, rows, started, deadline, priority_level(priority), wanted
            )
            if config.cache:
                prediction = await self._cached(model, request, stats)
            else:
                prediction = await self._submit(request)
        except HeadwayError as exc:
            stats.errors[exc.reason] += 1
            raise
        stats.successes += 1
        stats.latency.observe(self.clock.now() - started)
        return prediction

    async def _cached(self, model: ModelState, request: Request, stats: ModelStats) -> Prediction:
        key = cache_key(request.model, request.inputs, request.outputs)
        hit = self.cache.get(key)
        if hit is not None:
            stats.cache_hits += 1
            return hit  # type: ignore[no-any-return]
        shared = self._in_flight.get(key)
        if shared is not None:
            stats.cache_hits += 1
            return await asyncio.shield(shared)
        stats.cache_misses += 1
        assert self._loop is not None
        future: asyncio.Future[Prediction] = self._loop.create_future()
        self._in_flight[key] = future
        try:
            prediction = await self._submit(request)
        except HeadwayError as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: sharers re-raise it, nobody else must
            raise
        finally:
            self._in_flight.pop(key, None)
        future.set_result(prediction)
        self.cache.put(key, prediction, sum(a.nbytes for a in prediction.outputs.values()) + 64)
        return prediction

    async def _submit(self, request: Request) -> Prediction:
        assert self._loop is not None
        future: asyncio.Future[Prediction] = self._loop.create_future()
        request.token = future
        try:
            self.scheduler.submit(request)
        except DeadlineUnmeetable:
            self._refresh_estimate(request.model)
            raise
        self._kick()
        return await future

    def _refresh_estimate(self, key: str) -> None:
        """Re-measure an idle model whose estimate turns requests away.

        An estimate inflated by one slow run would otherwise reject every request, and a
        rejected request never runs to correct it. A probe of zeros (at most one per
        PROBE_INTERVAL_S, only while nothing is queued) brings fresh measurements instead.
        """
        now = self.clock.now()
        if self.scheduler.queue_length(key) or now - self._probed.get(key, -1e9) < PROBE_INTERVAL_S:
            return
        name = key.rpartition("@")[0]
        if name in self.models:
            self._warm_up(self.models[name].config, 1)

    # -- the pump: scheduler decisions -> engine -----------------------------------------------
    def _kick(self) -> None:
        if not self._pump_scheduled and self._loop is not None:
            self._pump_scheduled = True
            self._loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._pump_scheduled = False
        decisions = self.scheduler.poll()
        for request, error in decisions.rejected:
            self._fail(request, error)
        for dispatch in decisions.dispatches:
            self._send(dispatch)
        if decisions.wakeup is not None:
            self._wake_at(decisions.wakeup)

    def _wake_at(self, when: float) -> None:
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer_at = when
        self._timer = self._loop.call_later(max(0.0, when - self.clock.now()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        self._pump()

    def _send(self, dispatch: Dispatch) -> None:
        header: dict[str, Any] = {"op": dispatch.kind, "id": dispatch.id, "model": dispatch.model}
        tensors: dict[str, np.ndarray] = {}
        if dispatch.kind == INFER:
            header["rows"] = dispatch.rows
            requests = dispatch.requests
            header["outputs"] = _union_outputs(requests)
            if len(requests) == 1:
                tensors = requests[0].inputs
            else:
                tensors = {
                    name: np.concatenate([r.inputs[name] for r in requests])
                    for name in requests[0].inputs
                }
            self.stats[_name(dispatch.model)].batch_size.observe(dispatch.rows)
            if dispatch.latest is not None:
                header["latest"] = dispatch.latest
        elif dispatch.kind == LOAD:
            header["config"] = self.models[_name(dispatch.model)].config.to_wire()
            header["evict"] = dispatch.evict
            for key in dispatch.evict:
                evicted = self.models.get(_name(key))
                if evicted is not None:
                    evicted.workers.discard(dispatch.worker)
        # A failed send means the worker is gone: the watcher reports it and requeues.
        self.engine.send(dispatch.worker, header, tensors)

    # -- engine events -----------------------------------------------------------------------
    def _on_reply(
        self, worker: int, header: dict[str, Any], tensors: dict[str, np.ndarray]
    ) -> None:
        ok = bool(header.get("ok"))
        if header.get("late"):
            self.scheduler.refused(int(header["id"]))
            self._kick()
            return
        dispatch = self.scheduler.complete(
            int(header["id"]), header.get("duration") if ok else None
        )
        if dispatch is None:
            return
        if dispatch.kind == INFER:
            if ok:
                self._answer(dispatch, tensors)
            else:
                error = ModelError(f"model {dispatch.model!r} failed: {header.get('error')}")
                for request in dispatch.requests:
                    self._fail(request, error)
        elif dispatch.kind == LOAD:
            self._loaded(worker, _name(dispatch.model), header)
        self._kick()

    def _answer(self, dispatch: Dispatch, tensors: dict[str, np.ndarray]) -> None:
        name, _, version = dispatch.model.rpartition("@")
        now = self.clock.now()
        late = sum(1 for r in dispatch.requests if now > r.deadline and r.measured)
        if late:
            self.stats[name].late += late
        start = 0
        for request in dispatch.requests:
            end = start + request.rows
            future: asyncio.Future[Prediction] = request.token
            if not future.done():
                mine = (
                    tensors
                    if len(dispatch.requests) == 1
                    else {k: v[start:end] for k, v in tensors.items()}
                )
                if request.outputs is not None:
                    mine = {k: v for k, v in mine.items() if k in request.outputs}
                future.set_result(Prediction(name, int(version), mine))
            start = end

    def _loaded(self, worker: int, name: str, header: dict[str, Any]) -> None:
        model = self.models.get(name)
        if model is None:
            return
        if self.on_demand:
            self._loaded_on_demand(worker, model, header)
            return
        if worker not in model.loading:
            return
        model.loading.discard(worker)
        if header.get("ok"):
            config = model.config
            inferred_in = tuple(TensorSpec.parse(t, name) for t in header.get("inputs") or ())
            inferred_out = tuple(TensorSpec.parse(t, name) for t in header.get("outputs") or ())
            model.config = config.with_signature(inferred_in, inferred_out)
            model.memory_mb = max(model.memory_mb, float(header.get("memory_mb") or 0.0))
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
            model.reason = f"failed to load: {header.get('error')}"
            log.error("model %s %s", name, model.reason)
            self._placement[worker].discard(name)
            if not model.loading:
                model.state = UNAVAILABLE
        if not model.loading:
            for waiter in model.waiters:
                if not waiter.done():
                    waiter.set_result(None)
            model.waiters.clear()

    def _loaded_on_demand(self, worker: int, model: ModelState, header: dict[str, Any]) -> None:
        config = model.config
        if not header.get("ok"):
            self.scheduler.load_failed(config.key, worker)
            model.state = UNAVAILABLE
            model.reason = f"failed to load: {header.get('error')}"
            log.error("model %s %s", config.name, model.reason)
            self._fail_all(
                self.scheduler.remove_model(config.key),
                ModelNotReady(f"model {config.name!r} {model.reason}"),
            )
            return
        inferred_in = tuple(TensorSpec.parse(t, config.name) for t in header.get("inputs") or ())
        inferred_out = tuple(TensorSpec.parse(t, config.name) for t in header.get("outputs") or ())
        model.config = config.with_signature(inferred_in, inferred_out)
        measured = float(header.get("memory_mb") or 0.0)
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

    def _warm_up(self, config: ModelConfig, runs: int) -> None:
        """Run a few one-row batches of zeros so the first real request meets a warm model
        and a profile (frameworks compile or allocate lazily on their first calls)."""
        specs = config.inputs
        if runs <= 0 or not specs or any(s.datatype == "BYTES" or -1 in s.shape[1:] for s in specs):
            return
        inputs = {s.name: np.zeros((1, *s.shape[1:]), numpy_dtype(s.datatype)) for s in specs}
        now = self.clock.now()
        self._probed[config.key] = now
        request = Request(config.key, inputs, 1, now, now + WARMUP_DEADLINE_S)
        request.measured = runs < WARMUP_RUNS  # the very first run is cold: not a measurement
        assert self._loop is not None
        future: asyncio.Future[Prediction] = self._loop.create_future()
        future.add_done_callback(lambda f: f.exception() or self._warm_up(config, runs - 1))
        request.token = future
        try:
            self.scheduler.submit(request)
        except HeadwayError:
            return
        self._kick()

    def _on_worker_ready(self, worker: int, pid: int) -> None:
        self._ready_workers.add(worker)
        share = None if self.memory_budget_mb is None else self.memory_budget_mb / self.engine.size
        self.scheduler.add_worker(worker, memory_mb=share)
        for name in self._placement.get(worker, ()):
            model = self.models[name]
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
        for model in self.models.values():
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

    # -- helpers -----------------------------------------------------------------------------
    def _fail(self, request: Request, error: HeadwayError) -> None:
        future: asyncio.Future[Prediction] | None = request.token
        if future is not None and not future.done():
            future.set_exception(error)

    def _fail_all(self, requests: list[Request], error: HeadwayError) -> None:
        for request in requests:
            self._fail(request, error)

    def statistics(self) -> dict[str, Any]:
        """A snapshot for metrics, the dashboard and tests."""
        scheduling = self.scheduler.statistics()["models"]
        return {
            "models": {
                name: {
                    "state": m.state,
                    "reason": m.reason,
                    "version": m.config.version,
                    "workers": sorted(m.workers),
                    "memory_mb": m.memory_mb,
                    "queue": self.scheduler.queue_length(m.config.key),
                    "scheduling": scheduling.get(m.config.key, {}),
                    **self.stats[name].to_dict(),
                }
                for name, m in self.models.items()
            },
            "cache": {
                "entries": len(self.cache),
                "bytes": self.cache.size,
                "hits": self.cache.hits,
                "misses": self.cache.misses,
            },
            "workers": self.engine.pids(),
        }


def _name(key: str) -> str:
    """The model name of a `name@version` key."""
    return key.rpartition("@")[0]


def _union_outputs(requests: list[Request]) -> list[str] | None:
    wanted: set[str] = set()
    for request in requests:
        if request.outputs is None:
            return None
        wanted.update(request.outputs)
    return sorted(wanted)
