"""A simulation of the server itself: the real `Controller` over simulated workers, in virtual time.

What the controller adds to the scheduler runs here as it does in the server: validation, the
prediction cache and its in-flight dedupe, loads at start and their warm-up runs, estimate
probes after a refusal, and loads on demand. Only the workers (`SimulatedEngine` on the clock,
replaying profiled durations) and the network (a fixed one-way delay) are simulated. The clock
jumps from one event to the next; between two, the event loop runs only what is due now.
"""

from __future__ import annotations

import contextlib
import gc
import random
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD, STEP
from headway.control.controller import Controller
from headway.control.engine import Action, Tensors
from headway.control.policy import HEADWAY, SchedulingPolicy
from headway.control.request import InferenceRequest, Prediction
from headway.errors import HeadwayError
from headway.repository import ModelConfig, Repository, TensorSpec
from headway.sim.results import ModelProfile, Outcome, SimulationResult, StreamsResult
from headway.sim.virtual_loop import VirtualLoop
from headway.sim.workers import SimulatedEngine

T = TypeVar("T")

#: The one input of a simulated model: one FP32 column, as many rows as the request has.
INPUT = TensorSpec("x", "FP32", (-1, 1))


def simulated_repository(
    profiles: dict[str, ModelProfile],
    *,
    slo_ms: float,
    cache: bool = False,
    max_queue: int = 4096,
    replicas: Mapping[str, int] | None = None,
) -> Repository:
    """A repository of the profiled models (version 1 each, on `replicas` workers: one by
    default), held in memory."""
    root = Path("simulated")
    models = {
        name: ModelConfig(
            name=name,
            version=1,
            framework="python",
            path=root / name,
            inputs=(INPUT,),
            max_batch_size=profile.max_batch,
            slo_ms=slo_ms,
            cache=cache,
            max_queue=max_queue,
            memory_mb=profile.size_mb,
            replicas=(replicas or {}).get(name, 1),
            streams=profile.generative is not None,
            generative=profile.generative,
        )
        for name, profile in profiles.items()
    }
    return Repository(root, models=models, names=sorted(models))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (if it runs) for the duration."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()


class Settled:
    """The receiver of a simulated request: `answered()` or `rejected(error)`, once."""

    __slots__ = ("answered", "rejected")

    def __init__(
        self, answered: Callable[[], None], rejected: Callable[[BaseException], None]
    ) -> None:
        self.answered = answered
        self.rejected = rejected

    def part(self, outputs: Tensors) -> None:
        raise NotImplementedError("a simulated request is answered whole")

    def done(self, prediction: Prediction) -> None:
        self.answered()

    def fail(self, error: Exception) -> None:
        self.rejected(error)


class Streamed:
    """The receiver of a simulated streamed request: `parted()` per part, then `ended(error)`
    (None: it ended normally)."""

    __slots__ = ("ended", "parted")

    def __init__(
        self, parted: Callable[[], None], ended: Callable[[BaseException | None], None]
    ) -> None:
        self.parted = parted
        self.ended = ended

    def part(self, outputs: Tensors) -> None:
        self.parted()

    def done(self, prediction: Prediction) -> None:
        self.ended(None)

    def fail(self, error: Exception) -> None:
        self.ended(error)


class ServerSimulation:
    """The controller serving `profiles` from `workers` simulated workers. See the module
    docstring. With `memory_mb` (per worker) models load on demand and are evicted to fit;
    without, every model is loaded (and warmed up) at start on `replicas` workers (one by
    default), placed by the controller, as `headway serve` does.

    `sample(name, rows)`, when given, is each INFER's duration instead of the profile's (with
    `noise`). With `startup` (seconds), `Controller.scale` can add replicas: each a new worker,
    ready that long after it was asked for."""

    def __init__(
        self,
        profiles: dict[str, ModelProfile],
        *,
        workers: int = 1,
        memory_mb: float | None = None,
        slo_ms: float = 1000.0,
        policy: SchedulingPolicy = HEADWAY,
        rpc_seconds: float = 0.0002,
        cache: bool = False,
        noise: float = 0.0,
        seed_profiles: bool = False,
        max_queue: int = 4096,
        seed: int = 0,
        replicas: Mapping[str, int] | None = None,
        sample: Callable[[str, int], float] | None = None,
        startup: float | None = None,
    ) -> None:
        self.profiles = profiles
        self.sample = sample
        self.policy = policy
        self.noise = noise
        #: Each worker's durations vary by a factor (1 + noise * |N(0, 1)|), drawn from its RNG.
        self.rngs = [random.Random(seed * 7919 + worker) for worker in range(workers)]
        self.clock = ManualClock()
        self.engine = SimulatedEngine(
            workers,
            clock=self.clock,
            durations=self._duration,
            rpc=rpc_seconds,
            startup=startup,
        )
        repository = simulated_repository(
            profiles, slo_ms=slo_ms, cache=cache, max_queue=max_queue, replicas=replicas
        )
        self.controller = Controller(
            repository,
            self.engine,
            clock=self.clock,
            memory_budget_mb=None if memory_mb is None else memory_mb * workers,
            policy=policy,
        )
        if seed_profiles:  # measured profiles, as many samples as the scheduler trusts
            self._seed_profiles()
        #: When the server had started (its loads and warm-up runs done); arrivals count from it.
        self.started_at: float | None = None
        #: The controller keeps the loop it started on: every run goes through this one.
        self._loop = VirtualLoop()

    def __enter__(self) -> ServerSimulation:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the simulated server and close its event loop."""
        if not self._loop.is_closed():
            if self.started_at is not None:
                self._loop.run_until_complete(self.controller.stop())
            self._loop.close()

    def _seed_profiles(self) -> None:
        for name, profile in self.profiles.items():
            self.controller.seed_estimates(name, profile.durations, profile.load_seconds)

    def _duration(self, worker: int, action: Action) -> float:
        name = action.get("model", "").rpartition("@")[0]
        profile = self.profiles[name]
        if action["op"] == LOAD:
            base = profile.load_seconds
        elif action["op"] == INFER:
            rows = action.get("rows", 1)
            if self.sample is not None:
                return self.sample(name, rows)
            base = profile.duration(rows)
        elif action["op"] == STEP:  # a generative model's step: by the sequences it runs
            base = profile.step(len(action.get("run") or ()), len(action.get("start") or ()))
        else:
            return 0.0
        if not self.noise:
            return base
        return base * (1.0 + self.noise * abs(self.rngs[worker].gauss(0.0, 1.0)))

    def batches(self, name: str) -> int:
        """How many INFERs of model `name` ran, warm-up runs and probes included (the
        traffic's, `headway_batch_size_count` in `/metrics`, and the measuring runs)."""
        counts = self.controller.model_statistics(name).counts
        return counts.batch_size.count + counts.measuring.runs

    def run(
        self,
        times: np.ndarray,
        models: Sequence[str],
        *,
        slo: float | None = None,
        drain: float = 10.0,
    ) -> SimulationResult:
        """Start the server (once), then send it one single-row request per arrival (`times`
        sorted, seconds from now; `models` their names), each with deadline `slo`
        seconds (None: the model's SLO), and follow them until answered or `drain` seconds
        after the last arrival."""
        times = np.asarray(times, dtype=np.float64)
        total = len(times)
        finished = np.full(total, np.nan)
        deadlines = np.full(total, np.nan)
        outcome = np.zeros(total, dtype=np.int8)
        reasons: dict[str, int] = {}
        #: each request's one row holds its index (repeats of an index hit the cache)
        rows = np.arange(total, dtype=np.float32).reshape(total, 1, 1)

        def rejected(index: int, error: BaseException) -> None:
            outcome[index] = Outcome.REJECTED
            finished[index] = self.clock.now()
            reason = error.reason if isinstance(error, HeadwayError) else "error"
            reasons[reason] = reasons.get(reason, 0) + 1

        def answered(index: int) -> None:
            outcome[index] = Outcome.ANSWERED
            finished[index] = self.clock.now()

        def arrive(index: int) -> None:
            name = models[index]
            now = self.clock.now()
            state = self.controller.model(name)
            deadlines[index] = now + (slo if slo is not None else state.config.slo_ms / 1000.0)
            try:
                self.controller.submit(
                    InferenceRequest(name, timeout=slo, inputs={INPUT.name: rows[index]}),
                    Settled(partial(answered, index), partial(rejected, index)),
                )
            except HeadwayError as error:
                rejected(index, error)

        begun = self.replay(times, arrive, drain=drain)
        duration = float(times[-1] - times[0]) if total > 1 else 1.0
        span = max(self.clock.now() - begun, duration) * self.engine.size
        return SimulationResult(
            self.policy.name,
            times + begun,
            deadlines,
            finished,
            outcome,
            reasons,
            dict(self.controller.statistics().scheduler.counters),
            duration,
            extra={"utilisation": {kind: t / span for kind, t in self.engine.busy.items()}},
        )

    def run_streams(
        self,
        times: np.ndarray,
        models: Sequence[str],
        parts: Sequence[int],
        *,
        ttft: float | None = None,
        tpot: float | None = None,
        drain: float = 10.0,
    ) -> StreamsResult:
        """Start the server (once), then send a generative model one streamed request per
        arrival (`times` sorted, seconds from now; `models` their names; `parts` how many
        parts each asks for, its `max_tokens`), each with targets `ttft` and `tpot` (None:
        the model's), and follow them until they end or `drain` seconds after the last
        arrival."""
        times = np.asarray(times, dtype=np.float64)
        total = len(times)
        first = np.full(total, np.nan)
        last = np.full(total, np.nan)
        made = np.zeros(total, dtype=np.int64)
        outcome = np.zeros(total, dtype=np.int8)
        reasons: dict[str, int] = {}
        rows = np.arange(total, dtype=np.float32).reshape(total, 1, 1)

        def parted(index: int) -> None:
            now = self.clock.now()
            if made[index] == 0:
                first[index] = now
            last[index] = now
            made[index] += 1

        def ended(index: int, error: BaseException | None) -> None:
            if error is None:
                outcome[index] = Outcome.ANSWERED
                return
            outcome[index] = Outcome.REJECTED
            reason = error.reason if isinstance(error, HeadwayError) else "error"
            reasons[reason] = reasons.get(reason, 0) + 1

        def arrive(index: int) -> None:
            request = InferenceRequest(
                models[index],
                inputs={INPUT.name: rows[index]},
                stream=True,
                ttft=ttft,
                tpot=tpot,
                parameters={"max_tokens": int(parts[index])},
            )
            receiver = Streamed(partial(parted, index), partial(ended, index))
            try:
                self.controller.submit(request, receiver)
            except HeadwayError as error:
                ended(index, error)

        begun = self.replay(times, arrive, drain=drain)
        duration = float(times[-1] - times[0]) if total > 1 else 1.0
        return StreamsResult(times + begun, first, last, made, outcome, reasons, duration)

    def replay(
        self,
        times: np.ndarray,
        arrive: Callable[[int], None],
        *,
        drain: float,
        done: Callable[[], bool] | None = None,
    ) -> float:
        """Start the server (once), then call `arrive(index)` at each of `times` (sorted,
        seconds from now), which submits to `self.controller`, and run the events that follow
        until `drain` seconds after the last arrival, or until `done()` says so (asked after
        every event and before every arrival). Returns the clock's time that `times` count from.

        The cyclic garbage collector is paused meanwhile: a replay allocates objects per event
        by the hundred thousand, and a collection pass every few hundred of them costs more
        than the few cycles among them hold (they are collected when it resumes)."""
        with self._loop.entered(), collector_paused():
            if self.started_at is None:
                self._start()
            begun = self.clock.now()
            for index, when in enumerate((times + begun).tolist()):
                if self._advance(when, done) or (done is not None and done()):
                    return begun
                arrive(index)
            last = float(times[-1]) + begun if len(times) else begun
            self._advance(last + drain, done)
        return begun

    def idle_until(self, when: float) -> None:
        """Start the server (once), then run the events due by `when` (no arrivals) and move
        the clock there."""
        with self._loop.entered(), collector_paused():
            if self.started_at is None:
                self._start()
            self._advance(when)

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Call `action()` at time `when` on the clock, while a replay runs (what changes the
        cluster as it runs, e.g. an autoscaler asking `Controller.scale` for a replica)."""
        self.clock.call_at(when, action)

    def _advance(self, until: float, done: Callable[[], bool] | None = None) -> bool:
        """Run every event due by `until`, each at its time and followed by the loop turns it
        causes, then move the clock there; or stop as soon as `done()` (True: stopped)."""
        turns, run_next = self._loop.turns, self.clock.run_next
        turns()
        while run_next(until):
            turns()
            if done is not None and done():
                return True
        if until > self.clock.now():
            self.clock.set(until)
        turns()
        return False

    def _quiet(self) -> None:
        """Run events until no action is on its way to or from a worker."""
        self._loop.turns()
        while self.engine.in_flight and self.clock.run_next():
            self._loop.turns()

    def _until(self, work: Coroutine[Any, Any, T]) -> T:
        """Run events until `work` is done."""
        task = self._loop.create_task(work)
        self._loop.turns()
        while not task.done():
            if not self.clock.run_next():
                raise RuntimeError("the simulated server waits for an event that never comes")
            self._loop.turns()
        return task.result()

    def start(self) -> float:
        """Start the server: load its models (every one, without a memory budget) and let
        their warm-up runs finish. Returns the time it took; `run` starts it if need be."""
        if self.started_at is None:
            with self._loop.entered():
                self._start()
        assert self.started_at is not None
        return self.started_at

    def _start(self) -> None:
        self._until(self.controller.start())
        self._quiet()
        self.started_at = self.clock.now()
