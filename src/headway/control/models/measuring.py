"""Measuring models: warm-up runs after a load, a sweep of batch sizes, probes after a refusal.

A refused request never runs, so an estimate that turns requests away would never be corrected
by them; these runs of zeros (after all queued work) keep the estimates honest. The controller
owns one `Measuring`, and submits its runs through the same scheduler as every request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import numpy as np

from headway.clock import Clock
from headway.control.estimates.durations import TRUSTED_LOADS
from headway.control.jobs import Job, Sequence, input_units
from headway.control.request import FutureReceiver, Prediction
from headway.control.scheduling.probes import PROBE_PRIORITY, next_sweep_size
from headway.control.scheduling.scheduler import Scheduler
from headway.datatypes import numpy_dtype
from headway.errors import HeadwayError
from headway.repository import ModelConfig
from headway.store import Store

#: One cold run (not a measurement), then three measured: the model is profiled (its
#: estimates no longer stretched) before its sweep and its first requests.
WARMUP_RUNS = 4
WARMUP_DEADLINE_S = 30.0
#: Parts each warm-up sequence of a generative model makes: enough steps per batch size for
#: the step profile (`estimates.steps.MIN_STEPS` in all) to be fitted after the first sizes.
WARMUP_PARTS = 8
#: The most rounds of warm-up sequences a generative model is given to profile its steps.
WARMUP_ROUNDS = 4


class Measuring:
    """Runs measuring batches of zeros through `scheduler`. `new_future` makes the future a
    request's answer resolves; `kick` asks the controller to poll the scheduler soon; `inline`:
    the engine runs actions in the frontend's process."""

    def __init__(
        self,
        scheduler: Scheduler,
        clock: Clock,
        store: Store | None,
        *,
        new_future: Callable[[], asyncio.Future[Prediction]],
        kick: Callable[[], None],
        inline: bool = False,
        track_warming: bool = True,
    ) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.store = store
        self._new_future = new_future
        self._kick = kick
        #: Runs happen in the frontend's own process (the inline engine): the sweep stops early.
        self.inline = inline
        #: Models whose first warm-up and sweep have not ended: the server is not ready while
        #: it has any, so that traffic sent on readiness does not queue behind measuring runs.
        self.warming: set[str] = set()
        self.track_warming = track_warming

    def seed_profile(self, config: ModelConfig) -> None:
        """Start from the durations measured in an earlier run, when the store has them."""
        if self.store is None or self.scheduler.estimator.profiled(config.key):
            return
        for rows, seconds in self.store.profile(config.key).items():
            self.scheduler.estimator.observe(config.key, rows, seconds)

    def seed(self, key: str, infer: Mapping[int, float], load: float | None = None) -> None:
        """Start model `key`'s estimates from durations measured elsewhere: INFER seconds by
        batch size and LOAD seconds, as many samples of each as the estimates trust."""
        durations = self.scheduler.durations
        for _ in range(durations.estimator.min_samples):
            for rows, seconds in infer.items():
                durations.estimator.observe(key, rows, seconds)
        if load is not None:
            for _ in range(TRUSTED_LOADS):  # as many as are trusted over other models' loads
                durations.loads.observe(key, 1, load)

    def warm_up_steps(
        self, config: ModelConfig, sizes: list[int] | None = None, rounds: int = 0
    ) -> None:
        """Warm a generative model up and profile its steps: one cold sequence first (not a
        measurement), then 1, 2, 4 ... up to `max_sequences` sequences at once, each making
        up to WARMUP_PARTS parts from inputs of zeros (empty texts), after every queued
        request; again (up to WARMUP_ROUNDS times) while the profile has fewer than twice the
        steps it needs, as when the model ends such sequences early. The step profile then
        predicts steps of any size the model runs, so its first streams are judged on its own
        measurements."""
        generation = config.generative
        assert generation is not None
        if sizes is None:
            sizes = [1]
            while sizes[-1] < generation.max_sequences:
                sizes.append(min(sizes[-1] * 2, generation.max_sequences))
            if rounds == 0:
                sizes.insert(0, 0)  # the cold one
                if self.track_warming:
                    self.warming.add(config.key)
        if not sizes:
            profile = self.scheduler.step_estimates.profile(config.key)
            if len(profile) < 2 * profile.min_steps and rounds + 1 < WARMUP_ROUNDS:
                self.warm_up_steps(config, None, rounds + 1)
                return
            self.warming.discard(config.key)
        elif not self._start_sequences(config, sizes, rounds):
            self.warming.discard(config.key)

    def _start_sequences(self, config: ModelConfig, sizes: list[int], rounds: int) -> bool:
        size, rest = sizes[0], sizes[1:]
        count = max(size, 1)
        specs = config.inputs
        if not specs or not self.scheduler.placement.has_model(config.key):
            return False
        inputs = {
            s.name: np.full(
                (1, *(max(d, 1) for d in s.shape[1:])),
                b"" if s.datatype == "BYTES" else 0,
                object if s.datatype == "BYTES" else numpy_dtype(s.datatype),
            )
            for s in specs
        }
        left = [count]

        def ended(future: asyncio.Future[Prediction]) -> None:
            left[0] -= 1
            if future.exception() is not None:
                self.warming.discard(config.key)
            elif left[0] == 0:
                self.warm_up_steps(config, rest, rounds)

        now = self.clock.now()
        for _ in range(count):
            future = self._new_future()
            future.add_done_callback(ended)
            sequence = Sequence(
                config.key,
                inputs,
                now,
                now + WARMUP_DEADLINE_S,
                number=self.scheduler.steps.new_number(),
                cap=WARMUP_PARTS,
                units=input_units(inputs),
                priority=PROBE_PRIORITY,
                receiver=FutureReceiver(future),
                measured=size > 0,
                measuring=True,
            )
            try:
                self.scheduler.submit(sequence)
            except HeadwayError:
                return False
        self._kick()
        return True

    def warm_up(self, config: ModelConfig, runs: int, rows: int = 1) -> None:
        """Run a few one-row batches of zeros so the first real request meets a warm model
        and a profile (frameworks compile or allocate lazily on their first calls), then
        sweep bigger batch sizes, one run each (`probes.next_sweep_size`): a size never
        measured is otherwise estimated per row from batch 1, far too high for most models.
        Measuring runs go after every queued request (PROBE_PRIORITY)."""
        if runs == WARMUP_RUNS and rows == 1 and self.track_warming:
            self.warming.add(config.key)
        if runs <= 0:
            following = next_sweep_size(
                self.scheduler.durations,
                config.key,
                rows,
                max_batch=config.max_batch_size,
                slo=config.slo_ms / 1000.0,
                inline=self.inline,
            )
            if following is None:
                self.warming.discard(config.key)
            else:
                self.warm_up(config, 1, following)
            return
        # the very first run is cold: not a measurement
        cold = rows == 1 and runs == WARMUP_RUNS
        if not self.measure(
            config,
            rows,
            then=lambda: self.warm_up(config, runs - 1, rows),
            cold=cold,
            failed=lambda: self.warming.discard(config.key),
        ):
            self.warming.discard(config.key)

    def measure(
        self,
        config: ModelConfig,
        rows: int,
        *,
        then: Callable[[], None],
        cold: bool = False,
        failed: Callable[[], None] | None = None,
    ) -> bool:
        """Run a batch of `rows` rows of zeros after all queued work, to measure it; `then()`
        once it ran, `failed()` if it did not. False when nothing was submitted."""
        specs = config.inputs
        if not specs or any(s.datatype == "BYTES" or -1 in s.shape[1:] for s in specs):
            return False
        if not self.scheduler.placement.has_model(
            config.key
        ):  # unloaded, or the server is stopping
            return False
        inputs = {s.name: np.zeros((rows, *s.shape[1:]), numpy_dtype(s.datatype)) for s in specs}
        now = self.clock.now()
        future = self._new_future()

        def ended(future: asyncio.Future[Prediction]) -> None:
            if not future.exception():
                then()
            elif failed is not None:
                failed()

        future.add_done_callback(ended)  # a loop turn after the run, as for any awaiter
        job = Job(
            config.key,
            inputs,
            rows,
            now,
            now + WARMUP_DEADLINE_S,
            priority=PROBE_PRIORITY,
            receiver=FutureReceiver(future),
            measured=not cold,
            measuring=True,
        )
        try:
            self.scheduler.submit(job)
        except HeadwayError:
            return False
        self._kick()
        return True

    def refresh_estimate(self, request: Job, config: ModelConfig | None) -> None:
        """Measure the size of a request refused on its estimate, when the estimate may be
        wrong (`Scheduler.probe_size`): a size never measured, or an estimate inflated by
        one slow run, would otherwise turn such requests away for ever, as a refused request
        never runs to correct it."""
        rows = self.scheduler.probe_size(request) if config is not None else None
        if config is not None and rows is not None:
            self.measure(config, rows, then=lambda: None)
