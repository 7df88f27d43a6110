"""A simulated worker: executes actions one at a time in virtual time, from profiles.

To the scheduler it is indistinguishable from a real worker: it takes the same `Dispatch`
objects, refuses an INFER that would start after its `latest`, and reports a measured
duration (the profile, with optional multiplicative noise).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from headway.control.actions import INFER, LOAD, Dispatch

#: (model key, rows) -> seconds, for INFER; (model key, 0) -> seconds, for LOAD.
DurationFn = Callable[[str, int], float]


@dataclass
class Execution:
    """What happened to one action: when it finished, how long it ran, whether refused."""

    dispatch: Dispatch
    finished: float
    duration: float | None
    refused: bool = False


class SimulatedWorker:
    """One executor that replays profiled durations, with noise drawn from a seeded RNG."""

    def __init__(self, worker: int, durations: DurationFn, *, noise: float = 0.0, seed: int = 0):
        self.id = worker
        self.durations = durations
        self.noise = noise
        self.rng = random.Random(seed * 7919 + worker)
        self.busy_until = 0.0
        self.resident: set[str] = set()
        #: Seconds spent on each kind of action (for utilisation figures).
        self.busy: dict[str, float] = {INFER: 0.0, LOAD: 0.0}

    def execute(self, dispatch: Dispatch, arrives: float) -> Execution:
        """Run `dispatch`, which reaches the worker at `arrives`, after what it already holds."""
        start = max(arrives, self.busy_until)
        if dispatch.kind == INFER and dispatch.latest is not None and start > dispatch.latest:
            return Execution(dispatch, start, None, refused=True)
        if dispatch.kind == LOAD:
            for key in dispatch.evict:
                self.resident.discard(key)
            base = self.durations(dispatch.model, 0)
            self.resident.add(dispatch.model)
        elif dispatch.kind == INFER:
            if dispatch.model not in self.resident:
                return Execution(dispatch, start, None)  # not loaded: the action fails
            base = self.durations(dispatch.model, dispatch.rows)
        else:
            self.resident.discard(dispatch.model)
            base = 0.0
        duration = base * (1.0 + self.noise * abs(self.rng.gauss(0.0, 1.0))) if self.noise else base
        self.busy_until = start + duration
        if dispatch.kind in self.busy:
            self.busy[dispatch.kind] += duration
        return Execution(dispatch, self.busy_until, duration)
