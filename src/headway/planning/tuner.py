"""InferLine's tuner: replicas per stage from live traffic envelopes, against the plan's.

It scales a stage up at once when live traffic exceeds, in some window, what the plan was made
for, and down only after a hold-down (`Tuner`; docs/planning.md).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from headway.clock import Clock
from headway.planning.envelope import LONGEST, envelope
from headway.planning.plan_file import PlanFile

HOLD_DOWN = 15.0
TRAILING = 30.0
#: a scale-down keeps room for this much more than the trailing maximum (never above the plan's
#: own rate, which scaling up needs to exceed), so the two rules do not meet at one point
DOWN_MARGIN = 0.25
MAX_REPLICAS = 64


@dataclass(frozen=True)
class Ratio:
    """Live over planned rate at the window length where it is largest."""

    ratio: float
    length: float
    live: float
    planned: float


@dataclass(frozen=True)
class Change:
    """One stage's replica count changed, when and why (for /metrics and the log)."""

    stage: str
    before: int
    after: int
    at: float
    reason: str

    @property
    def direction(self) -> str:
        return "up" if self.after > self.before else "down"


class Tuner:
    """Replica counts for a planned pipeline, decided on `tick()`.

    The plan records the planning trace's envelope (`headway.planning.envelope`: the highest rate
    in any window of each length) and each stage's planned utilisation rho_m = lambda * s_m /
    (k_m * mu_m). The tuner keeps the last minute of arrivals and:

    - **scales up at once** when any window's live rate exceeds the plan's at that length (each
      decision looks at the windows that ended since the last one, so a burst counts once). The load
      to provision for is lambda' = lambda * max over windows of (live rate / planned rate): each
      window's rate is compared with the plan's at the same length, since a 10 ms window always
      shows a higher rate than a minute. Then k_m = ceil(lambda' * s_m / (mu_m * rho_m)), which
      keeps the planner's slack for burstiness. Only replica counts change; hardware and batch
      sizes wait for the next plan.
    - **scales down** only after `hold_down` seconds since the last change, to what the trailing
      `trailing` seconds need (the same rule over windows in that history) with `margin` on top:
      the peak p is provisioned as p * (1 + margin), or as the plan's rate where that is less
      and p is within it (scaling up needs more than the plan's rate). Without the margin a
      scale-down lands exactly where the next slightly larger window scales up again (flapping).
      Never below what the scale-up rule asks for at that moment, nor below one replica."""

    def __init__(
        self,
        plan: PlanFile,
        clock: Clock,
        *,
        hold_down: float = HOLD_DOWN,
        trailing: float = TRAILING,
        margin: float = DOWN_MARGIN,
        history: float = LONGEST,
        max_replicas: int = MAX_REPLICAS,
        shortest: float = 0.0,
    ) -> None:
        if not plan.envelope:
            raise ValueError("the plan has no traffic envelope: plan it again with headway plan")
        self.plan = plan
        self.clock = clock
        self.hold_down = hold_down
        self.trailing = trailing
        self.margin = margin
        self.history = max(history, max(plan.envelope))
        self.max_replicas = max_replicas
        #: windows shorter than this are not compared (arrivals counted per tick cannot
        #: resolve them); the longest window always is
        self.lengths = [length for length in plan.envelope if length >= shortest] or [
            max(plan.envelope)
        ]
        self.replicas: dict[str, int] = {s.name: s.replicas for s in plan.stages}
        self.changes: list[Change] = []
        self._arrivals: deque[float] = deque()
        self._started = clock.now()
        self._last_change = self._started
        self._last_tick = self._started

    def arrived(self, count: int = 1) -> None:
        """`count` queries arrived now."""
        now = self.clock.now()
        self._arrivals.extend([now] * count)

    def load_ratio(self, since: float, *, longest: float | None = None) -> Ratio:
        """The largest (live rate / planned rate) over window lengths up to `longest`: over
        the windows that end after `since` or, with `longest`, lie wholly after it."""
        now = self.clock.now()
        span = now - self._started
        lengths = [
            length
            for length in self.lengths
            if length <= span + 1e-9 and (longest is None or length <= longest + 1e-9)
        ] or [min(self.lengths)]
        times = np.fromiter(self._arrivals, dtype=np.float64)
        best = Ratio(0.0, lengths[0], 0.0, self.plan.envelope[lengths[0]])
        for length in lengths:
            recent = times[times >= (since if longest is not None else since - length)]
            live = envelope(recent, [length])[length]
            planned = self.plan.envelope[length]
            if live / planned > best.ratio:
                best = Ratio(live / planned, length, live, planned)
        return best

    def needed(self, ratio: float) -> dict[str, int]:
        """Replicas per stage for lambda' = lambda * ratio: ceil(lambda' s / (mu rho))."""
        rate = self.plan.rate_qps * ratio
        return {
            s.name: min(
                self.max_replicas,
                max(1, math.ceil(rate * s.scale / (s.throughput_qps * s.utilisation) - 1e-9)),
            )
            for s in self.plan.stages
        }

    def tick(self) -> list[Change]:
        """Decide now; returns the changes made (also kept in `changes`)."""
        now = self.clock.now()
        while self._arrivals and self._arrivals[0] < now - self.history:
            self._arrivals.popleft()
        # windows that ended since the last decision: a burst counts at once, and only once
        recent = self.load_ratio(self._last_tick)
        self._last_tick = now
        made: list[Change] = []
        if recent.ratio > 1.0:
            reason = (
                f"{recent.length:g} s window: {recent.live:.1f} queries/s over the plan's "
                f"{recent.planned:.1f}"
            )
            made = self._apply(self.needed(recent.ratio), reason, up=True)
        if not made and now - self._last_change >= self.hold_down:
            trailing = self.load_ratio(now - self.trailing, longest=self.trailing)
            reason = (
                f"trailing {self.trailing:g} s: at most {trailing.live:.1f} queries/s in a "
                f"{trailing.length:g} s window (plan: {trailing.planned:.1f})"
            )
            if recent.ratio > trailing.ratio:  # never below what scaling up would ask for
                reason += (
                    f"; the {recent.length:g} s window still holds {recent.live:.1f} queries/s "
                    f"(plan: {recent.planned:.1f})"
                )
            peak = max(trailing.ratio, recent.ratio)
            covered = peak * (1.0 + self.margin)
            if peak <= 1.0:  # the scale-up rule fires only above the plan's rate
                covered = min(covered, 1.0)
            reason += f"; provisioned for {covered:.2f}x the plan's rate ({self.margin:.0%} margin)"
            made = self._apply(self.needed(covered), reason, up=False)
        return made

    def _apply(self, target: Mapping[str, int], reason: str, *, up: bool) -> list[Change]:
        now = self.clock.now()
        made = []
        for stage, count in target.items():
            current = self.replicas[stage]
            if (up and count > current) or (not up and count < current):
                made.append(Change(stage, current, count, now, reason))
                self.replicas[stage] = count
        if made:
            self._last_change = now
            self.changes.extend(made)
        return made
