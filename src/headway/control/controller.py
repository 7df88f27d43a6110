"""The data plane every transport calls: admit, validate, cache, queue.

The `Controller` turns a request into a future in the scheduler's deadline-ordered queue, and
composes the parts that do the rest: `Dispatcher` (the pump that sends the scheduler's
decisions through the engine, and the replies that resolve the futures), `ModelLifecycle`
(what is loaded where), `Measuring` (warm-up runs and probes), `UnreadRefusals` (requests
refused before they are decoded) and `CachedAnswers` (models with a prediction cache). It holds
no sockets itself: the engine (runtime layer) moves the bytes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from headway.clock import LoopClock, TimerClock
from headway.control.cache import PredictionCache
from headway.control.cached import CachedAnswers
from headway.control.dispatch import Dispatcher
from headway.control.engine import Engine
from headway.control.lifecycle import ModelLifecycle
from headway.control.measuring import Measuring
from headway.control.models import (
    READY,
    ModelState,
    Prediction,
)
from headway.control.profiles import LatencyEstimator
from headway.control.request import Request, priority_level
from headway.control.scheduler import Scheduler
from headway.control.scheduling_policy import HEADWAY, SchedulingPolicy
from headway.control.unread import UnreadRefusals
from headway.control.validate import check_inputs, check_outputs
from headway.errors import DeadlineUnmeetable, HeadwayError, ModelNotReady, WorkerFailed
from headway.repository import Repository
from headway.store import Store

log = logging.getLogger("headway.controller")


class Controller:
    """Serves a repository's models from an engine's workers. See the module docstring."""

    def __init__(
        self,
        repository: Repository,
        engine: Engine,
        *,
        store: Store | None = None,
        clock: TimerClock | None = None,
        cache_bytes: int = 32 * 1024 * 1024,
        ready_timeout: float = 60.0,
        memory_budget_mb: float | None = None,
        policy: SchedulingPolicy = HEADWAY,
    ) -> None:
        self.repository = repository
        self.engine = engine
        self.store = store
        self.clock: TimerClock = clock or LoopClock()
        #: With a memory budget, models load on demand and are evicted to fit it.
        self.on_demand = memory_budget_mb is not None
        self.scheduler = Scheduler(
            self.clock,
            LatencyEstimator(),
            policy=policy,
            demand_loading=self.on_demand,
            inline=engine.holds_loop,
            # the runs' thread beside the loop (`--inline-runs thread`)
            own_in_flight=engine.runs_inline and not engine.holds_loop,
        )
        self.cache = PredictionCache(cache_bytes)
        self._cached = CachedAnswers(self.cache, self.clock)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The pump and the reply path (`control/dispatch.py`).
        self.dispatch = Dispatcher(self.scheduler, engine, self.clock)
        self._kick = self.dispatch.kick
        self.measuring = Measuring(
            self.scheduler,
            self.clock,
            store,
            new_future=self._new_future,
            kick=self._kick,
            inline=engine.runs_inline,
            # loaded at start, a model is ready once warm; loaded on demand, at once
            track_warming=not self.on_demand,
        )
        self.lifecycle = ModelLifecycle(
            repository,
            engine,
            self.scheduler,
            self.measuring,
            store=store,
            memory_budget_mb=memory_budget_mb,
            kick=self._kick,
            fail=self.dispatch.fail,
            new_future=self._new_future,
        )
        self.dispatch.serve(self.lifecycle)
        #: The lifecycle's registry of models, under the names the transports use: default
        #: versions by name, other versions by `name@version`, every state and its statistics
        #: by `name@version`.
        self.models = self.lifecycle.models
        self.versions = self.lifecycle.versions
        self.stats = self.lifecycle.stats
        self._states = self.lifecycle.states
        self.ready_timeout = ready_timeout
        #: Refusals before a request is decoded (`control/unread.py`), asked by the transports
        #: of every request: bound here, so asking makes no call more.
        self.unread = UnreadRefusals(
            self.scheduler, self.clock, self.stats, self.served, inline=engine.holds_loop
        )
        self.lag = self.unread.lag
        self.refuse_late = self.unread.refuse_late
        self.quick_refusal = self.unread.quick_refusal
        self.refuse_read = self.unread.refuse_read
        #: Counts what `refuse_read` refused and has not counted yet: ask before reading
        #: `stats` or the scheduler's tally (`statistics` does).
        self.count_refusals = self.unread.count
        self.started = False
        #: Whether the engine can run an action inside `submit` (it runs them in this process).
        self._runs_inline = engine.runs_inline
        self._runs_on_loop = engine.holds_loop
        engine.on_ready = self.lifecycle.on_worker_ready
        engine.on_message = self.dispatch.on_reply
        engine.on_exit = self.lifecycle.on_worker_exit

    @property
    def tracing(self) -> bool:
        """Whether requests may carry traces (`submit(trace=...)`); off: not looked at."""
        return self.dispatch.tracing

    @tracing.setter
    def tracing(self, on: bool) -> None:
        self.dispatch.tracing = on

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the workers, then load every model the store does not mark unloaded."""
        self._loop = self.dispatch.loop = asyncio.get_running_loop()
        await self.engine.start()
        if len(self.lifecycle.ready_workers) >= self.engine.size:
            self.lifecycle.all_ready.set()  # none to wait for (Ray: workers come per model)
        try:
            await asyncio.wait_for(self.lifecycle.all_ready.wait(), self.ready_timeout)
        except TimeoutError:
            raise WorkerFailed(
                f"workers did not start within {self.ready_timeout:.0f} s "
                f"({len(self.lifecycle.ready_workers)} of {self.engine.size} ready)"
            ) from None
        for name, reason in self.repository.broken.items():
            log.warning("model %s cannot be served: %s", name, reason)
        if not self.on_demand:
            loads = [
                self.load(name) for name in self.models if not self.lifecycle.user_unloaded(name)
            ]
            await asyncio.gather(*loads, return_exceptions=True)
        self.started = True

    async def stop(self) -> None:
        self.dispatch.stop()
        for model in self._states.values():
            self.lifecycle.fail_all(
                self.scheduler.remove_model(model.config.key), ModelNotReady("server stopping")
            )
        if self.store is not None:
            for key, estimates in self.scheduler.estimator.snapshot().items():
                self.store.save_profile(key, estimates)
        await self.engine.stop()

    # -- models ------------------------------------------------------------------------------
    def model(self, name: str, version: str | None = None) -> ModelState:
        """The model by name: its default version, or `version` when given (any version in the
        repository, registered and loaded on first use); ModelNotFound otherwise.

        The unversioned lookup of a registered model is one dict lookup: it is on every
        request's path."""
        if version is None:
            state = self.models.get(name)
            if state is not None:
                return state
        return self.lifecycle.model(name, version)

    def served(self, name: str, version: int | None = None) -> ModelState | None:
        """The state serving `name` (at `version`) if it is registered; registers nothing and
        never raises (for readiness checks that run on every query)."""
        state = self.models.get(name)
        if version is None or state is None or state.config.version == version:
            return state
        return self.versions.get(f"{name}@{version}")

    async def load(self, name: str, version: str | None = None) -> ModelState:
        """Load the model (its default version, or `version`) on its replicas; waits until
        they answered."""
        return await self.lifecycle.load(name, version)

    async def unload(self, name: str, version: str | None = None) -> None:
        await self.lifecycle.unload(name, version)

    def scale(self, name: str, replicas: int) -> int:
        """Serve model `name` on `replicas` workers (the tuner's decision); returns how many it
        is placed on now (`ModelLifecycle.scale`)."""
        return self.lifecycle.scale(name, replicas)

    def worker_nodes(self) -> dict[int, str]:
        """The cluster node of each placed worker (empty for an engine on one machine)."""
        return self.lifecycle.worker_nodes()

    def nodes_of(self, model: ModelState) -> list[str]:
        """The nodes hosting the model's loaded replicas (empty for an engine on one machine)."""
        return self.lifecycle.nodes_of(model)

    def _new_future(self) -> asyncio.Future[Any]:
        assert self._loop is not None, "the controller has not started"
        return self._loop.create_future()

    def shares_workers(self, name: str) -> bool:
        """Whether the model `name` (its default version) shares a worker with another model."""
        state = self.models.get(name)
        return state is not None and self.scheduler.placement.shares_workers(state.config.key)

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
        waited: float = 0.0,
    ) -> Prediction:
        """Answer one request within its deadline, or raise a HeadwayError saying why not.

        `timeout` (seconds) overrides the model's slo_ms as the deadline. `waited` is how long
        the request already waited in the transport (its clock starts at arrival).
        """
        return await self.submit(
            name,
            inputs,
            version=version,
            outputs=outputs,
            timeout=timeout,
            priority=priority,
            waited=waited,
        )

    def submit(
        self,
        name: str,
        inputs: dict[str, np.ndarray],
        *,
        version: str | None = None,
        outputs: Sequence[str] | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        waited: float = 0.0,
        then: Callable[[asyncio.Future[Prediction]], None] | None = None,
        trace: Any = None,
    ) -> asyncio.Future[Prediction]:
        """`infer` without awaiting: admit the request now (a HeadwayError at once if it
        cannot be), and return the future of its prediction, which fails with a HeadwayError
        when it cannot be answered in time. With an engine that runs actions in this process,
        a request that finds its model idle runs inside this call (`Scheduler.start_now`): the
        future is done when it returns, with no loop turn between.

        `then(future)`, if given, is called once the future is done, at that very moment
        (possibly inside this call), not a loop turn later as a done-callback would be: under
        load a turn is a full round of reads (docs/decisions.md). The HTTP server answers
        through it. Not called when this raises. (For a model with a prediction cache, it
        runs as a done-callback.)"""
        model = self.model(name, version)
        stats = self.stats[model.config.key]
        stats.requests += 1
        started = self.clock.now() - waited
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
            future: asyncio.Future[Prediction]
            if config.cache:
                future = self._cached.submit(request, stats, self._enqueue, started, then)
            else:
                request.then = then
                request.trace = trace
                request.counted = True  # the dispatcher counts its outcome as it settles it
                if self._runs_inline:
                    future = self.dispatch.run_alone(request) or self._enqueue(request)
                else:
                    future = self._enqueue(request)
        except HeadwayError as exc:
            stats.errors[exc.reason] += 1
            raise
        return future

    def cancel(
        self, future: asyncio.Future[Prediction], name: str, version: str | None = None
    ) -> bool:
        """Withdraw a request that `submit(name, version=version)` made and that is no longer
        wanted (a competing copy that lost, a query cut off at its deadline): its future is
        cancelled, and if the request is still queued it leaves the queue and never runs. One
        already sent runs on its worker, and its answer is ignored. Whether it was still queued.
        """
        if future.done() and not future.cancelled():
            return False  # answered already
        future.cancel()
        state = self.served(name, None if version is None else int(version))
        if state is None:
            return False
        return self.scheduler.withdraw(state.config.key, future) is not None

    def _enqueue(self, request: Request) -> asyncio.Future[Prediction]:
        """Queue `request` with the scheduler; its token is the future of its prediction."""
        assert self._loop is not None
        future: asyncio.Future[Prediction] = self._loop.create_future()
        request.token = future
        try:
            self.scheduler.submit(request)
        except DeadlineUnmeetable:
            state = self._states.get(request.model)
            self.measuring.refresh_estimate(request, state.config if state else None)
            if self.scheduler.load_probes.pending:
                self._kick()  # a refused cold start may be measured by a probe load
            raise
        if self._runs_on_loop:
            self.dispatch.run_full_batch(request.model)
        self._kick()
        return future

    @property
    def loop_held_until(self) -> float:
        """When an action last ended that held the event loop (`Engine.held_until`)."""
        return self.engine.held_until

    def catch_up(self) -> None:
        """Hear the workers' waiting replies now, and send what they free up.

        For a frontend deep in a long turn of reads (under overload, many milliseconds): the
        replies' requests are answered at once (their `then` runs inside the reply) and a
        freed worker gets its next batch, instead of both waiting for the turn to end. A no-op
        for an engine that has nothing to catch up on (the inline one)."""
        self.dispatch.catch_up()

    def statistics(self) -> dict[str, Any]:
        """A snapshot for metrics, the dashboard and tests."""
        self.count_refusals()
        scheduling = self.scheduler.statistics()["models"]

        def describe(m: ModelState, default: bool) -> dict[str, Any]:
            return {
                "state": m.state,
                "reason": m.reason,
                "version": m.config.version,
                "default": default,
                "workers": sorted(m.workers),
                "nodes": self.nodes_of(m),
                "memory_mb": m.memory_mb,
                "queue": self.scheduler.queue_length(m.config.key),
                "scheduling": scheduling.get(m.config.key, {}),
                **self.stats[m.config.key].to_dict(),
            }

        return {
            # default versions by name (as the unversioned routes), other versions by name@version
            "models": {
                **{name: describe(m, True) for name, m in self.models.items()},
                **{key: describe(m, False) for key, m in self.versions.items()},
            },
            "cache": {
                "entries": len(self.cache),
                "bytes": self.cache.size,
                "hits": self.cache.hits,
                "misses": self.cache.misses,
            },
            "workers": self.engine.pids(),
        }
