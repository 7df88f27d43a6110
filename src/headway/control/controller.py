"""The data plane every caller crosses: two doors for a request, and the model administration.

A caller hands the `Controller` an `InferenceRequest` (`request`) through one of two doors:
`screen`, before its tensors are decoded (may overload refuse it now?), and `submit`, which
admits it (or raises the HeadwayError that says why not) and answers it through a `Receiver`.
Behind them the controller composes its parts: the `Scheduler` (what runs where next), the
`Relay` (its decisions sent through the engine, the replies that answer requests),
`ModelLifecycle` (what is loaded where), `Measuring` (warm-up runs and probes),
`UnreadRefusals` (refusals before decoding) and `CachedAnswers` (models with a prediction
cache). What it did is published as frozen records (`statistics`, `snapshots`). It holds no
sockets itself: the engine (runtime layer) moves the bytes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from headway.clock import LoopClock, TimerClock
from headway.control.admission.reasons import Refusal
from headway.control.admission.unread import UnreadRefusals
from headway.control.cache import CachedAnswers, PredictionCache
from headway.control.dispatch.relay import Relay, ReplyWatch
from headway.control.engine import Engine
from headway.control.estimates.profiles import LatencyEstimator
from headway.control.jobs import Job, Sequence, input_units
from headway.control.models.lifecycle import ModelLifecycle
from headway.control.models.measuring import WARMUP_RUNS, Measuring
from headway.control.models.states import READY, ModelState
from headway.control.models.validate import check_inputs, check_outputs
from headway.control.policy import HEADWAY, SchedulingPolicy
from headway.control.request import (
    FutureReceiver,
    InferenceRequest,
    Prediction,
    Receiver,
    Ticket,
    priority_level,
)
from headway.control.scheduling.scheduler import Scheduler
from headway.control.snapshots import (
    CacheSnapshot,
    ControllerSnapshot,
    ModelCounts,
    ModelSnapshot,
    ModelStatus,
    WorkerSnapshot,
)
from headway.errors import (
    DeadlineUnmeetable,
    HeadwayError,
    InvalidInput,
    ModelNotReady,
    WorkerFailed,
)
from headway.repository import ModelConfig, Repository, TensorSpec
from headway.store import Store

log = logging.getLogger("headway.controller")


def first_part_timeout(request: InferenceRequest, config: ModelConfig) -> float | None:
    """Seconds a streamed answer's first part may take: the request's `ttft`, else its
    `timeout`, else the model's `ttft_ms` (None: its `slo_ms`)."""
    if request.ttft is not None:
        return request.ttft
    if request.timeout is not None:
        return request.timeout
    return None if config.ttft_ms is None else config.ttft_ms / 1000.0


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
        self.policy = policy
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
        #: The pump and the reply path (`dispatch.relay`).
        self.relay = Relay(self.scheduler, engine, self.clock)
        self.measuring = Measuring(
            self.scheduler,
            self.clock,
            store,
            new_future=self._new_future,
            kick=self.relay.kick,
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
            kick=self.relay.kick,
            fail=self.relay.fail,
            new_future=self._new_future,
        )
        self.relay.serve(self.lifecycle)
        self.ready_timeout = ready_timeout
        #: Refusals before a request is decoded (`admission.unread`): `screen`.
        self.unread = UnreadRefusals(
            self.clock,
            self.scheduler.durations,
            self.scheduler.placement,
            self.scheduler.backlogs,
            self.scheduler.tally,
            self.lifecycle.stats,
            self._ready,
            early_reject=policy.early_reject,
            inline=engine.holds_loop,
        )
        self.started = False
        #: Whether the engine can run an action inside `submit` (it runs them in this process).
        self._runs_inline = engine.runs_inline
        self._runs_on_loop = engine.holds_loop
        engine.on_ready = self.lifecycle.on_worker_ready
        engine.on_message = self.relay.on_reply
        engine.on_exit = self.lifecycle.on_worker_exit

    @property
    def tracing(self) -> bool:
        """Whether requests may carry traces (`InferenceRequest.trace`); off: not looked at."""
        return self.relay.tracing

    @tracing.setter
    def tracing(self, on: bool) -> None:
        self.relay.tracing = on

    def watch_replies(self, watch: ReplyWatch | None) -> None:
        """Tell `watch` of each INFER sent and of the reply that leaves no worker busy (the
        HTTP server polls for a reply due soon instead of sleeping); None: nobody."""
        self.relay.reply_watch = watch

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the workers, then load every model the store does not mark unloaded."""
        self._loop = self.relay.loop = asyncio.get_running_loop()
        await self.engine.start()
        lifecycle = self.lifecycle
        if len(lifecycle.ready_workers) >= self.engine.size:
            lifecycle.all_ready.set()  # none to wait for (Ray: workers come per model)
        try:
            await asyncio.wait_for(lifecycle.all_ready.wait(), self.ready_timeout)
        except TimeoutError:
            raise WorkerFailed(
                f"workers did not start within {self.ready_timeout:.0f} s "
                f"({len(lifecycle.ready_workers)} of {self.engine.size} ready)"
            ) from None
        for name, reason in self.repository.broken.items():
            log.warning("model %s cannot be served: %s", name, reason)
        if not self.on_demand:
            loads = [
                self.load(name) for name in lifecycle.models if not lifecycle.user_unloaded(name)
            ]
            await asyncio.gather(*loads, return_exceptions=True)
        self.started = True

    async def stop(self) -> None:
        self.relay.stop()
        for model in self.lifecycle.states.values():
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
            state = self.lifecycle.models.get(name)
            if state is not None:
                return state
        return self.lifecycle.model(name, version)

    def served(self, name: str, version: int | None = None) -> ModelState | None:
        """The state serving `name` (at `version`) if it is registered; registers nothing and
        never raises (for readiness checks that run on every query)."""
        state = self.lifecycle.models.get(name)
        if version is None or state is None or state.config.version == version:
            return state
        return self.lifecycle.versions.get(f"{name}@{version}")

    def register(self, config: ModelConfig) -> None:
        """Serve a model that the repository folder does not hold, by `config.name` (a flow's
        stage model, whose worker runs the stage's chain in one action); it loads like any
        other (`load`). Registering a name again replaces its config."""
        self.repository.models[config.name] = config

    def deregister(self, name: str) -> None:
        """Forget a model that `register` added (after `unload`); nothing if it is unknown."""
        self.repository.models.pop(name, None)

    def _ready(self, name: str, version: int | None) -> ModelConfig | None:
        """The config of the model serving `name` (at `version`) if it is ready (`screen`)."""
        state = self.served(name, version)
        return state.config if state is not None and state.state == READY else None

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

    def warming(self, name: str, version: int | None = None) -> bool:
        """Whether the model serving `name` (at `version`) has not ended its first warm-up runs
        and sweep of batch sizes (the server is not ready while one has not)."""
        state = self.served(name, version)
        return state is not None and state.config.key in self.measuring.warming

    def warm_up(self, name: str, inputs: tuple[TensorSpec, ...]) -> None:
        """Warm the model `name` (its default version) with rows of zeros of `inputs`, as it
        warms a model whose inputs it knows at load (`Measuring.warm_up`): for a model that
        declares none, whose caller can make them up (a flow's fused stage)."""
        state = self.model(name)
        self.measuring.warm_up(replace(state.config, inputs=inputs), WARMUP_RUNS)

    def seed_estimates(
        self, name: str, infer: Mapping[int, float], load: float | None = None
    ) -> None:
        """Start the estimates of model `name` (its default version) from durations measured
        elsewhere: INFER seconds by batch size, and LOAD seconds, as many samples of each as
        are trusted (as a server starting from a store of profiles would)."""
        self.measuring.seed(self.model(name).config.key, infer, load)

    def queue_length(self, name: str) -> int:
        """How many requests of model `name` (its default version) are queued now."""
        state = self.lifecycle.models.get(name)
        return 0 if state is None else self.scheduler.queue_length(state.config.key)

    def _new_future(self) -> asyncio.Future[Any]:
        assert self._loop is not None, "the controller has not started"
        return self._loop.create_future()

    def shares_workers(self, name: str) -> bool:
        """Whether the model `name` (its default version) shares a worker with another model."""
        state = self.lifecycle.models.get(name)
        return state is not None and self.scheduler.placement.shares_workers(state.config.key)

    def keep_apart(self, names: list[str], why: str) -> None:
        """Serve the models `names` (the competing copies of a flow stage, `why`) on distinct
        workers, starting the workers they need; a ConfigError says why when it cannot."""
        self.lifecycle.keep_apart(names, why)

    def withdraw_queued(self, ticket: Ticket) -> bool:
        """`withdraw` a request only if it is still queued (whether it was); one already
        sent is left to run and be answered (a race's loser, whose time is counted)."""
        job = cast(Job, ticket)
        if job.receiver is None or not self.scheduler.withdraw(job):
            return False
        job.receiver = None
        return True

    def stop_running(self, ticket: Ticket) -> bool:
        """Ask the worker running a request that was sent (a race's loser) to stop it, where
        the engine can (`Engine.stop_action`); whether it was asked. The request is then
        answered with a ModelStopped carrying the CPU time it had spent."""
        job = cast(Job, ticket)
        for dispatch in self.scheduler.placement.inflight.values():
            if job in dispatch.requests:
                return self.engine.stop_action(dispatch.worker, dispatch.id)
        return False

    # -- the two doors -----------------------------------------------------------------------
    def may_refuse(self, waited: float) -> bool:
        """Whether `screen` may refuse a request that waited `waited` s to be read; False while
        the server keeps up, when a transport need not ask (`UnreadRefusals.may_refuse`)."""
        return self.unread.may_refuse(waited)

    def observe_wait(self, waited: float) -> None:
        """A request the frontend read after waiting `waited` s, and leaves unscreened (it
        cannot read its deadline cheaply): its wait still tells how far behind the frontend
        is (`admission.overload.FrontendLag`)."""
        self.unread.lag.observe(waited, self.clock.now())

    def screen(self, request: InferenceRequest) -> Refusal | None:
        """The first door, before the request's tensors are decoded: why overload refuses it
        now (`admission.reasons.LATE`, `BACKLOG` or `SHED`, counted as a refusal of its
        model), or None: decode it and `submit` it. See `UnreadRefusals.screen`."""
        return self.unread.screen(request)

    def submit(self, request: InferenceRequest, receiver: Receiver) -> Ticket:
        """The second door: admit the decoded `request` now, or raise the HeadwayError that says
        why not; its answer goes to `receiver` (`done` or `fail`, once) when it is known.
        Returns its ticket, to `withdraw` it.

        `receiver` is called at the very moment the answer is known (possibly inside this
        call), not a loop turn later as a future's done-callback would be: under load a turn
        is a full round of reads (docs/decisions.md). With an engine that runs actions in this
        process, a request that finds its model idle runs inside this call
        (`Scheduler.start_now`). (For a model with a prediction cache, the answer comes from a
        task.)"""
        model = self.model(request.model, request.version)
        config = model.config
        stats = self.lifecycle.stats[config.key]
        stats.requests += 1
        arrival = request.arrival
        started = self.clock.now() if arrival is None else arrival
        try:
            if model.state != READY:
                raise ModelNotReady(
                    f"model {request.model!r} is {model.state.lower()}"
                    + (f": {model.reason}" if model.reason else "")
                )
            inputs = request.inputs
            if inputs is None:
                raise InvalidInput(f"model {request.model!r}: the request has no inputs")
            rows = check_inputs(request.model, config.inputs, inputs)
            outputs = request.outputs
            wanted = tuple(outputs) if outputs else None
            check_outputs(request.model, config.outputs, wanted)
            timeout = request.timeout
            if config.streams:
                timeout = first_part_timeout(request, config)
            deadline = started + (timeout if timeout is not None else config.slo_ms / 1000.0)
            if config.generative is not None:
                return self._submit_sequence(request, config, started, deadline, receiver)
            job = Job(
                config.key,
                inputs,
                rows,
                started,
                deadline,
                priority_level(request.priority),
                wanted,
                receiver,
                stream=request.stream,
            )
            if config.cache:
                self._cached.submit(job, stats, self._run)
            else:
                job.trace = request.trace
                job.counted = True  # the relay counts its outcome as it settles it
                if not (self._runs_inline and self.relay.run_alone(job)):
                    self._enqueue(job)
        except HeadwayError as exc:
            stats.errors[exc.reason] += 1
            raise
        return job

    def _submit_sequence(
        self,
        request: InferenceRequest,
        config: ModelConfig,
        arrival: float,
        deadline: float,
        receiver: Receiver,
    ) -> Sequence:
        """Admit a generative model's request as one sequence (`Scheduler.submit` judges its
        two targets), or raise why not."""
        inputs = request.inputs
        assert inputs is not None and config.generative is not None
        rows = next(iter(inputs.values())).shape[0]
        if rows != 1:
            raise InvalidInput(
                f"model {config.name!r} is generative: a request is one sequence (one row); "
                f"got {rows} rows, send them as {rows} requests"
            )
        if self.on_demand:
            raise ModelNotReady(
                f"model {config.name!r} is generative, and generative models are not loaded on "
                "demand: serve it without --memory-budget-mb"
            )
        parameters = dict(request.parameters or {})
        cap = config.generative.max_parts
        asked = parameters.get("max_tokens")
        if asked is not None:
            if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
                raise InvalidInput(f"parameter max_tokens must be an integer >= 1, got {asked!r}")
            cap = min(cap, asked)
        tpot = request.tpot
        if tpot is None and config.tpot_ms is not None:
            tpot = config.tpot_ms / 1000.0
        if tpot is not None and tpot <= 0:
            raise InvalidInput(f"tpot must be above 0 seconds, got {tpot!r}")
        outputs = request.outputs
        sequence = Sequence(
            config.key,
            inputs,
            arrival,
            deadline,
            number=self.scheduler.steps.new_number(),
            cap=cap,
            units=input_units(inputs),
            tpot=tpot,
            parameters=parameters or None,
            priority=priority_level(request.priority),
            outputs=tuple(outputs) if outputs else None,
            receiver=receiver,
            stream=request.stream,
            counted=True,
        )
        sequence.trace = request.trace
        self.scheduler.submit(sequence)
        self.relay.kick()
        return sequence

    def withdraw(self, ticket: Ticket) -> bool:
        """Withdraw a request that `submit` admitted and that is no longer wanted (a competing
        copy that lost, a query cut off at its deadline): it is never answered, and if it is
        still queued it leaves the queue and never runs. One already sent runs on its worker,
        and its answer is dropped. Whether it was still queued."""
        job = cast(Job, ticket)
        if job.receiver is None:
            return False  # answered already (or withdrawn)
        job.receiver = None
        queued = self.scheduler.withdraw(job)
        if isinstance(job, Sequence):
            self.relay.kick()  # a running one is stopped with its worker's next step
        return queued

    async def infer(self, request: InferenceRequest) -> Prediction:
        """`submit`, awaited: the prediction, or the HeadwayError that says why not. An awaiter
        that gives up leaves the request to run, unanswered and uncounted."""
        assert self._loop is not None, "the controller has not started"
        future: asyncio.Future[Prediction] = self._loop.create_future()
        ticket = self.submit(request, FutureReceiver(future))
        try:
            return await future
        except asyncio.CancelledError:
            cast(Job, ticket).receiver = None
            raise

    def _run(self, job: Job) -> asyncio.Future[Prediction]:
        """Queue a copy of `job` and return the future of its answer (a cached model's run)."""
        assert self._loop is not None
        future: asyncio.Future[Prediction] = self._loop.create_future()
        run = Job(
            job.model,
            job.inputs,
            job.rows,
            job.arrival,
            job.deadline,
            job.priority,
            job.outputs,
            FutureReceiver(future),
        )
        self._enqueue(run)
        return future

    def _enqueue(self, job: Job) -> None:
        """Queue `job` with the scheduler (DeadlineUnmeetable or Overloaded if it cannot be)."""
        try:
            self.scheduler.submit(job)
        except DeadlineUnmeetable:
            state = self.lifecycle.states.get(job.model)
            self.measuring.refresh_estimate(job, state.config if state else None)
            if self.scheduler.load_probes.pending:
                self.relay.kick()  # a refused cold start may be measured by a probe load
            raise
        if self._runs_on_loop:
            self.relay.run_full_batch(job.model)
        self.relay.kick()

    @property
    def loop_held_until(self) -> float:
        """When an action last ended that held the event loop (`Engine.held_until`)."""
        return self.engine.held_until

    def catch_up(self) -> None:
        """Hear the workers' waiting replies now, and send what they free up.

        For a frontend deep in a long turn of reads (under overload, many milliseconds): the
        replies' requests are answered at once (their receivers are called inside the reply)
        and a freed worker gets its next batch, instead of both waiting for the turn to end. A
        no-op for an engine that has nothing to catch up on (the inline one)."""
        self.relay.catch_up()

    # -- statistics: frozen records (`snapshots`) -------------------------------------------
    def status(self) -> tuple[ModelStatus, ...]:
        """How each model version is served now (default versions first, by name): cheaper
        than `statistics`, for readiness and the repository index."""
        lifecycle = self.lifecycle
        nodes = lifecycle.worker_nodes()
        return (
            *(self._status(name, m, nodes) for name, m in lifecycle.models.items()),
            *(self._status(key, m, nodes) for key, m in lifecycle.versions.items()),
        )

    def statistics(self) -> ControllerSnapshot:
        """What the controller did so far: each model version (default versions first, by
        name), each worker, the cache, the scheduler and the engine."""
        self.unread.count()  # the refusals counted in bulk, first
        nodes = self.lifecycle.worker_nodes()
        pids = self.engine.pids()
        placement = self.scheduler.placement
        memory, activity = placement.worker_memory(), placement.worker_activity()
        workers = tuple(
            WorkerSnapshot(w, pids.get(w), nodes.get(w), used, budget, resident, *activity[w])
            for w, (used, budget, resident) in sorted(memory.items())
        )
        cache = self.cache
        return ControllerSnapshot(
            at=self.clock.now(),
            models=tuple(self._snapshot(status) for status in self.status()),
            workers=workers,
            cache=CacheSnapshot(len(cache), cache.size, cache.hits, cache.misses),
            scheduler=self.scheduler.statistics(),
            engine=self.engine.kind,
            size=self.engine.size,
            pids=pids,
        )

    def model_statistics(self, name: str, version: str | None = None) -> ModelSnapshot:
        """What the controller did with model `name` (its default version, or `version`; a
        version not served yet is registered, as `model` does)."""
        self.unread.count()
        state = self.model(name, version)
        label = name if self.lifecycle.is_default(state) else state.config.key
        return self._snapshot(self._status(label, state, self.lifecycle.worker_nodes()))

    def _status(self, label: str, state: ModelState, nodes: dict[int, str]) -> ModelStatus:
        config = state.config
        return ModelStatus(
            label=label,
            key=config.key,
            default=self.lifecycle.is_default(state),
            config=config,
            state=state.state,
            reason=state.reason,
            warming=config.key in self.measuring.warming,
            workers=tuple(sorted(state.workers)),
            nodes=tuple(sorted({nodes[w] for w in state.workers if w in nodes})),
            memory_mb=state.memory_mb,
        )

    def _snapshot(self, status: ModelStatus) -> ModelSnapshot:
        key = status.key
        return ModelSnapshot(
            status=status,
            counts=ModelCounts.of(self.lifecycle.stats[key], self.clock.now()),
            scheduling=self.scheduler.model_statistics(key),
        )
