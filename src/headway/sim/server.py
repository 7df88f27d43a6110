"""A simulation of the server itself: the real `Controller` over simulated workers, in virtual time.

What the controller adds to the scheduler runs here as it does in the server: validation, the
prediction cache and its in-flight dedupe, loads at start and their warm-up runs, estimate
probes after a refusal, and loads on demand. Only the workers (`FakeEngine` on the clock,
replaying profiled durations) and the network (a fixed one-way delay) are simulated. The clock
jumps from one event to the next; between two, the event loop runs only what is due now.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import selectors
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from headway.clock import ManualClock
from headway.control.actions import INFER, LOAD
from headway.control.controller import Controller
from headway.control.engine import Action, Tensors
from headway.control.models import Prediction
from headway.control.scheduling_policy import HEADWAY, SchedulingPolicy
from headway.errors import HeadwayError
from headway.repository import ModelConfig, Repository, TensorSpec
from headway.sim.results import ModelProfile, Outcome, SimulationResult, seed_profile
from headway.testing import FakeEngine

T = TypeVar("T")

#: The one input of a simulated model: one FP32 column, as many rows as the request has.
INPUT = TensorSpec("x", "FP32", (-1, 1))
#: A bound on the turns one event may cause (a loop of callbacks would otherwise hang the run).
MAX_TURNS = 10_000


def simulated_repository(
    profiles: dict[str, ModelProfile], *, slo_ms: float, cache: bool = False, max_queue: int = 4096
) -> Repository:
    """A repository of the profiled models (version 1 each), held in memory."""
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
        )
        for name, profile in profiles.items()
    }
    return Repository(root, models=models, names=sorted(models))


class _NoIO(selectors.BaseSelector):
    """A selector with nothing to watch: the simulated server has no sockets."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        raise NotImplementedError("the simulated server does no I/O")

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return {}


class VirtualLoop(asyncio.BaseEventLoop):
    """An event loop without I/O, turned by the simulation itself (`turns`) between the
    `ManualClock`'s events: a turn runs the callbacks ready at its start, as asyncio's does,
    with no system call and no task of the simulation's own in between."""

    def __init__(self) -> None:
        super().__init__()
        self._selector = _NoIO()

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Let the caller's code turn the loop (`turns`) as if it were running."""
        asyncio._set_running_loop(self)
        try:
            yield
        finally:
            asyncio._set_running_loop(None)

    def turns(self) -> None:
        """Run turns until no callback is ready (at most MAX_TURNS)."""
        ready = self._ready  # type: ignore[attr-defined]
        for _ in range(MAX_TURNS):
            if not ready:
                return
            self._run_once()  # type: ignore[attr-defined]


def _zeros(action: Action, tensors: Tensors) -> Tensors:
    return {"y": np.zeros((action.get("rows", 1), 1), np.float32)}


class ServerSimulation:
    """The controller serving `profiles` from `workers` simulated workers. See the module
    docstring. With `memory_mb` (per worker) models load on demand and are evicted to fit;
    without, every model is loaded (and warmed up) at start, as `headway serve` does."""

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
    ) -> None:
        self.profiles = profiles
        self.policy = policy
        self.noise = noise
        #: Each worker's durations vary by a factor (1 + noise * |N(0, 1)|), drawn from its RNG.
        self.rngs = [random.Random(seed * 7919 + worker) for worker in range(workers)]
        self.clock = ManualClock()
        self.engine = FakeEngine(
            workers, compute=_zeros, clock=self.clock, durations=self._duration, rpc=rpc_seconds
        )
        self.controller = Controller(
            simulated_repository(profiles, slo_ms=slo_ms, cache=cache, max_queue=max_queue),
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
            key = self.controller.model(name).config.key
            seed_profile(self.controller.scheduler, key, profile)

    def _duration(self, worker: int, action: Action) -> float:
        name = action.get("model", "").rpartition("@")[0]
        profile = self.profiles[name]
        if action["op"] == LOAD:
            base = profile.load_seconds
        elif action["op"] == INFER:
            base = profile.duration(action.get("rows", 1))
        else:
            return 0.0
        if not self.noise:
            return base
        return base * (1.0 + self.noise * abs(self.rngs[worker].gauss(0.0, 1.0)))

    def batches(self, name: str) -> int:
        """How many INFERs of model `name` ran, warm-up runs and probes included (what
        `/metrics` counts as headway_batch_size_count)."""
        return self.controller.stats[self.controller.model(name).config.key].batch_size.count

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
        with self._loop.entered():
            if self.started_at is None:
                self._start()
            return self._run(np.asarray(times, dtype=np.float64), models, slo, drain)

    def _run(
        self, times: np.ndarray, models: Sequence[str], slo: float | None, drain: float
    ) -> SimulationResult:
        begun = self.clock.now()
        arrivals = times + begun
        total = len(arrivals)
        finished = np.full(total, np.nan)
        deadlines = np.full(total, np.nan)
        outcome = np.zeros(total, dtype=np.int8)
        reasons: dict[str, int] = {}
        #: each request's one row holds its index (repeats of an index hit the cache)
        rows = np.arange(total, dtype=np.float32).reshape(total, 1, 1)

        def rejected(index: int, error: BaseException | None) -> None:
            outcome[index] = Outcome.REJECTED
            finished[index] = self.clock.now()
            reason = error.reason if isinstance(error, HeadwayError) else "error"
            reasons[reason] = reasons.get(reason, 0) + 1

        def answered(index: int, future: asyncio.Future[Prediction]) -> None:
            if future.cancelled():
                return
            error = future.exception()
            if error is not None:
                rejected(index, error)
                return
            outcome[index] = Outcome.ANSWERED
            finished[index] = self.clock.now()

        for index, (when, name) in enumerate(zip(arrivals.tolist(), models, strict=True)):
            self._advance(when)
            state = self.controller.model(name)
            deadlines[index] = when + (slo if slo is not None else state.config.slo_ms / 1000.0)
            try:
                self.controller.submit(
                    name,
                    {INPUT.name: rows[index]},
                    timeout=slo,
                    then=partial(answered, index),
                )
            except HeadwayError as error:
                rejected(index, error)
        self._advance((arrivals[-1] if total else self.clock.now()) + drain)
        duration = float(times[-1] - times[0]) if total > 1 else 1.0
        span = max(self.clock.now() - begun, duration) * self.engine.size
        return SimulationResult(
            self.policy.name,
            arrivals,
            deadlines,
            finished,
            outcome,
            reasons,
            dict(vars(self.controller.scheduler.counters)),
            duration,
            extra={"utilisation": {kind: t / span for kind, t in self.engine.busy.items()}},
        )

    def _advance(self, until: float) -> None:
        """Run every event due by `until`, each at its time and followed by the loop turns it
        causes, then move the clock there."""
        turns = self._loop.turns
        turns()
        while (due := self.clock.next_timer()) is not None and due <= until:
            self.clock.run_next()
            turns()
        if until > self.clock.now():
            self.clock.set(until)
        turns()

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
