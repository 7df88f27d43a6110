"""Replica counts that change during a replay: the tuner, and a utilisation-based baseline.

`TunerScaling` runs InferLine's tuner on the arrivals as they come; `UtilisationScaling` is a
reactive autoscaler of the usual kind (Ray Serve's, Kubernetes' HPA), for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial

import numpy as np

from headway.clock import ManualClock
from headway.planning.plan_file import PlanFile
from headway.planning.tuner import HOLD_DOWN, Tuner
from headway.sim import ServerSimulation


class _Scaling:
    """What both autoscalers share: ticking, asking the controller for replicas, the cost.

    It decides every `interval` seconds of simulated time and asks `Controller.scale` for each
    stage's count, as the server's tuner does: a new replica is a worker that serves `startup`
    seconds after it was asked for (a worker process starts and loads its model) and is paid
    from the moment it was asked for; a removed replica is the newest, retired at once (what it
    was running is run again elsewhere, as in the server). A stage has at most `spare` replicas
    more than it started with. `cost_per_hour()` is the time-average of the replicas' prices
    over the replay; `timeline` and `reasons` hold every change (in the arrivals' time)."""

    def __init__(
        self,
        prices: Mapping[str, float],
        *,
        interval: float = 0.5,
        startup: float = 2.0,
        spare: int = 32,
    ) -> None:
        self.prices = dict(prices)  # stage -> $/h of one replica
        self.interval = interval
        self.startup = startup
        self.spare = spare
        self.timeline: list[tuple[float, dict[str, int]]] = []
        self.reasons: list[tuple[float, str, int, int, str]] = []

    def start(self, sim: ServerSimulation, arrivals: np.ndarray, offset: float) -> None:
        self.sim, self.offset = sim, offset
        self.arrivals = arrivals
        self.first, self.end = float(arrivals[0]), float(arrivals[-1])
        self.asked = {stage: self.serving(stage) for stage in self.prices}
        self.most = {stage: count + self.spare for stage, count in self.asked.items()}
        self.timeline.append((self.first, dict(self.asked)))
        self._next(self.first + self.interval)

    def serving(self, stage: str) -> int:
        """The replicas of `stage` that have started (loaded its model)."""
        return len(self.sim.controller.model(stage).workers)

    def decide(self, now: float) -> tuple[dict[str, int], str]:
        raise NotImplementedError

    def _next(self, when: float) -> None:
        self.sim.at(when + self.offset, partial(self._tick, when))

    def _tick(self, now: float) -> None:
        target, reason = self.decide(now)
        changed = False
        for stage, count in target.items():
            count = max(1, min(count, self.most[stage]))
            before = self.asked[stage]
            if count != before:
                self.sim.controller.scale(stage, count)
                self.reasons.append((now, stage, before, count, reason))
                self.asked[stage] = count
                changed = True
        if changed:
            self.timeline.append((now, dict(self.asked)))
        if now + self.interval <= self.end:
            self._next(now + self.interval)

    def replicas_at(self, times: np.ndarray) -> dict[str, np.ndarray]:
        """Replicas asked for per stage at each of `times`."""
        starts = np.array([t for t, _ in self.timeline])
        where = np.clip(np.searchsorted(starts, times, side="right") - 1, 0, None)
        return {
            stage: np.array([self.timeline[i][1][stage] for i in where]) for stage in self.prices
        }

    def cost_per_hour(self) -> float:
        """The replicas' prices averaged over the replay (first to last arrival)."""
        total = 0.0
        for (start, counts), (end, _) in zip(
            self.timeline, [*self.timeline[1:], (self.end, {})], strict=True
        ):
            total += (end - start) * sum(counts[s] * self.prices[s] for s in counts)
        return total / max(self.end - self.first, 1e-9)


class TunerScaling(_Scaling):
    """InferLine's tuner, fed the arrivals as simulated time passes."""

    def __init__(self, plan: PlanFile, prices: Mapping[str, float], **options: float) -> None:
        super().__init__(prices, **options)  # type: ignore[arg-type]
        self.clock = ManualClock()
        self.tuner = Tuner(plan, self.clock)
        self._cursor = 0

    def decide(self, now: float) -> tuple[dict[str, int], str]:
        times = self.arrivals
        while self._cursor < len(times) and times[self._cursor] <= now:
            self.clock.set(float(times[self._cursor]))
            self.tuner.arrived()
            self._cursor += 1
        self.clock.set(now)
        changes = self.tuner.tick()
        return dict(self.tuner.replicas), changes[0].reason if changes else ""


class UtilisationScaling(_Scaling):
    """Each stage's busy share over the last `window` s against a `target` share:
    k' = ceil(k * busy / target), up at once, down after the same hold-down as the tuner."""

    def __init__(
        self,
        prices: Mapping[str, float],
        *,
        target: float = 0.7,
        window: float = 10.0,
        hold_down: float = HOLD_DOWN,
        **options: float,
    ) -> None:
        super().__init__(prices, **options)  # type: ignore[arg-type]
        self.target = target
        self.window = window
        self.hold_down = hold_down
        self._history: list[tuple[float, dict[str, float]]] = []
        self._last_change = 0.0

    def _busy(self) -> dict[str, float]:
        computing = self.sim.engine.computing
        return {
            stage: computing.get(self.sim.controller.model(stage).config.key, 0.0)
            for stage in self.prices
        }

    def decide(self, now: float) -> tuple[dict[str, int], str]:
        busy = self._busy()
        self._history.append((now, busy))
        while self._history and self._history[0][0] < now - self.window:
            self._history.pop(0)
        then, before = self._history[0]
        span = max(now - then, self.interval)
        target: dict[str, int] = {}
        shares = []
        for stage, current in self.asked.items():
            serving = max(self.serving(stage), 1)
            share = (busy[stage] - before[stage]) / (span * serving)
            shares.append(f"{stage} {share:.0%}")
            wanted = max(1, math.ceil(serving * share / self.target - 1e-9))
            if wanted > current or (wanted < current and now - self._last_change >= self.hold_down):
                target[stage] = wanted
            else:
                target[stage] = current
        if any(target[s] != self.asked[s] for s in target):
            self._last_change = now
        return target, f"busy over the last {self.window:g} s: " + ", ".join(shares)
