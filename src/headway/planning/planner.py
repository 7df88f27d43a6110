"""InferLine's planner: the cheapest configuration whose simulated P99 meets the SLO, with a
headroom.

The plan is held to a **goal**, the SLO less a `headroom` share of it (20% by default), and
each stage to at most 1 - headroom of its throughput: the margin InferLine's tuner keeps for
what the planning trace did not show and the estimate does not model (a plan at its SLO and
at 96% of a stage's throughput is feasible in simulation and fragile on a real machine).
`headroom=0` plans to the SLO itself, as InferLine's planner does.

0. Before any search, the SLO is checked against what no configuration can beat
   (`headway.planning.bounds`: the critical path, the models' own tail, the replicas a stage
   would need): under it, the plan is **infeasible**, and says which bound and by how much.
1. Start every stage on its fastest hardware, at batch 1, with one replica, and add a replica
   to the bottleneck -- the stage with the least throughput for the share of queries it
   sees -- until the estimator's P99 meets the goal. The configurations on the way are known
   by arithmetic, so the first that meets it is found by doubling and bisection
   (`headway.planning.ladder`), not by an estimate per replica.
2. Then, greedily, try on every stage each of InferLine's three actions, IncreaseBatch,
   RemoveReplica and DowngradeHardware (`headway.planning.moves` says what each does and
   why), estimate each candidate, and apply the cheapest feasible one, until no candidate is
   both feasible and cheaper. Reconfigure, not InferLine's, joins them in the descents of
   step 3: InferLine's actions move one step at a time, so a kind beyond a next cheaper one
   that cannot meet the SLO is never tried, and a stage moved early to a slow kind at a small
   batch, or to a batch too large for a later SLO share, never comes back.
3. With `restarts` (the default), run step 2 again with Reconfigure too, from InferLine's
   start and from a `batched_start` on each hardware kind: every stage on that kind at the
   largest batch whose service time along the critical path is within half the goal, with as
   many replicas as the load needs. A greedy descent that takes the cheapest move first can
   leave the stages in a corner no single move gets out of (a stage at a batch whose latency
   leaves the next too little of the SLO); starting from large batches on each kind reaches
   configurations the descent from batch 1 does not, and InferLine's own descent stays one of
   the searches, so the plan never costs more than InferLine's.

The search may be given a time `budget` (`headway plan` gives it `BUDGET_S`; without one it
runs to its end, and its answer does not depend on the machine): once it is spent, no further
descent starts and the one under way stops at the configuration it has reached, so a plan
answers in seconds whatever the pipeline, the trace and the machine's load; InferLine's
descent runs first, and the steps say what was left out.

The answer is the cheapest feasible configuration the search estimated: a descent's end or
any candidate on the way. Within a step, each action searches only replica counts that could
win (no dearer than the cheapest feasible candidate of the step so far), from the fewest that
keep the stage below its throughput upwards, so most candidates cost no estimate.

Each candidate is estimated with `simulate` on the planning trace, and judged feasible or not
(`headway.planning.feasibility`); one that InferLine's greedy estimator
(`headway.planning.greedy`) already puts clearly over the goal is refused without it.

A trace longer than `screen` queries is searched on its first `screen` (a replay costs time in
proportion to its queries, and the search makes hundreds), against the goal less a `margin`;
the answer must then meet the goal on the whole trace (`_confirm`): the cheapest candidates
that met it on the prefix are replayed in full, and if none holds, replicas are added at the
bottleneck of the cheapest until it does. The margin makes the first of them likely to hold.

With `frontend_seconds` (the server's own time per query, `headway.planning.frontend`), every
estimate runs the pipeline behind a frontend stage taking that long per query, one at a time;
the planner never changes it (one event loop per server), and a trace faster than it can take
is infeasible whatever the models get.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from headway.errors import ConfigError
from headway.planning.bounds import (
    critical_path,
    frontend_waits,
    most_replicas_needed,
    service_tail,
)
from headway.planning.estimates import EstimateCache
from headway.planning.feasibility import Feasibility
from headway.planning.ladder import Ladder, climb, first_rung
from headway.planning.moves import CENT, MAX_REPLICAS
from headway.planning.pipeline import (
    Catalogue,
    Configuration,
    Pipeline,
    Profiles,
)

Action = Callable[[Configuration, str, float], Configuration | None]
#: Queries the search estimates candidates on by default (the trace's first): 50 over a P99.
SCREEN = 5_000
#: The share of the SLO a candidate leaves unused on the prefix, by default, when screened.
MARGIN = 0.1
#: Candidates that met the SLO on the prefix replayed on the whole trace, cheapest first.
CONFIRM_TRIES = 3
#: Replays of the whole trace the descent after the confirmation may make, by default.
POLISH = 10
#: The share of the SLO a plan leaves unused, and of each stage's throughput, by default:
#: the margin InferLine's tuner keeps (it holds each stage at its planned utilisation) for
#: what the planning trace did not show and the estimate does not model.
HEADROOM = 0.2
#: Seconds `headway plan`'s search (the descents and the polish; not the bounds and the
#: confirmation on the whole trace) may take by default before it answers with the cheapest
#: plan found.
BUDGET_S = 10.0


@dataclass(frozen=True)
class Plan:
    """The planner's answer: a configuration (None when infeasible) and what it is expected to do."""

    feasible: bool
    config: Configuration | None
    cost_per_hour: float
    p99: float
    utilisation: dict[str, float]
    reason: str = ""
    steps: list[str] = field(default_factory=list)
    estimates: int = 0
    #: queries the search estimated candidates on (the whole trace unless it was longer)
    screened: int = 0


class Planner(Feasibility):
    """Plans `pipeline` for `arrivals` (sorted seconds) under a P99 of `slo` seconds."""

    def __init__(
        self,
        pipeline: Pipeline,
        profiles: Profiles,
        catalogue: Catalogue,
        arrivals: np.ndarray,
        slo: float,
        *,
        seed: int = 0,
        rpc_seconds: float = 0.0,
        spread: bool = False,
        frontend_seconds: float = 0.0,
        restarts: bool = True,
        screen: int | None = SCREEN,
        margin: float = MARGIN,
        polish: int = POLISH,
        headroom: float = HEADROOM,
        budget: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0.0 <= headroom < 1.0:
            raise ConfigError(f"the headroom is a share of the SLO in [0, 1), not {headroom}")
        self.pipeline = pipeline
        self.profiles = profiles
        self.catalogue = catalogue
        self.arrivals = np.asarray(arrivals, dtype=np.float64)
        self.slo = slo
        #: the share of the SLO, and of each stage's throughput, a plan leaves unused
        self.headroom = headroom
        #: the P99 a plan must meet: the SLO less the headroom
        self.goal = slo * (1.0 - headroom)
        self.seed = seed
        self.rpc_seconds = rpc_seconds
        #: estimate with each action drawn from its profile's mean and p99 (`simulate`)
        self.spread = spread
        #: the server's time per query outside the models (0: not modelled)
        self.frontend_seconds = frontend_seconds
        #: also search from a `batched_start` on every hardware kind (`starts`)
        self.restarts = restarts
        #: the search's trace: the first `screen` queries, against the SLO less `margin`
        self.screening = self.arrivals[:screen] if screen else self.arrivals
        self.screened = len(self.screening) < len(self.arrivals)
        #: queries the search estimates candidates on
        self.screened_queries = len(self.screening)
        self.target = self.goal * (1 - margin) if self.screened else self.goal
        #: seconds the search may take (None: no limit), read on `clock`
        self.budget, self.clock = budget, clock
        self._deadline = math.inf
        #: replays of the whole trace InferLine's descent may make after the confirmation
        #: (`_polish`; 0: none)
        self.polish = polish
        #: replays left before an estimate is refused unmade (None: no limit)
        self._left: int | None = None
        # (configurations that replay the same as one replayed are found again:
        # `headway.planning.estimates`)
        self._estimates = EstimateCache(pipeline.names)
        #: replays of the whole trace (`_confirm`), when the search ran on a prefix
        self._whole = EstimateCache(pipeline.names)
        #: replays made (each configuration once per trace)
        self.replays = 0
        #: greedy estimates made (`Feasibility._quickly`), and candidates they refused
        self.greedy = self.refused = 0
        #: every configuration found feasible, in the order found
        self._passed: dict[tuple[tuple[str, int, int], ...], Configuration] = {}
        #: (kind, batch) per stage -> replica counts whose estimate missed the SLO
        self._missing: dict[tuple[tuple[str, int], ...], list[tuple[int, ...]]] = {}
        #: the cheapest configuration found feasible so far (the first of equal cost)
        self.cheapest: Configuration | None = None
        duration = float(self.arrivals[-1] - self.arrivals[0]) if len(self.arrivals) > 1 else 1.0
        #: queries per second of the planning trace
        self.rate = len(self.arrivals) / max(duration, 1e-9)

    # -- the algorithm ------------------------------------------------------------------------
    def _spent(self) -> bool:
        """Whether the search's time budget is spent."""
        return self.clock() > self._deadline

    def plan(self) -> Plan:
        steps: list[str] = []
        if self.budget is not None:
            self._deadline = self.clock() + self.budget
        self.initial()  # raises, naming a model with no profile
        if self.frontend_utilisation >= 1.0:
            return self._infeasible(
                f"the server takes {self.frontend_seconds * 1e3:.2f} ms per query outside the "
                f"models (measured by `headway profile --frontend`): at most "
                f"{1 / self.frontend_seconds:.0f} queries/s, and the trace has {self.rate:.0f}",
                steps,
            )
        options = {
            s: [self.profile(s, k) for k in self.hardware_for(s)] for s in self.pipeline.names
        }
        waits = frontend_waits(self.arrivals, self.frontend_seconds)
        critical = critical_path(self.pipeline, options, waits)
        if self.target < critical.p99 <= self.goal:  # the margin would leave nothing feasible
            self.target = self.goal
            steps.append("no margin on the prefix: the critical path alone takes more")
        bounds = [critical, most_replicas_needed(self.pipeline, options, self.rate)]
        if self.spread:
            bounds.append(service_tail(self.pipeline, options, waits, seed=self.seed))
        for bound in bounds:
            if bound is not None and bound.p99 > self.goal:
                return self._infeasible(f"{bound.reason}, over {self._goal_text()}", steps)
        reason, ends = "", []
        starts = self.starts()
        for index, (label, start, reconfigure) in enumerate(starts):
            if index and self._spent() and self.cheapest is not None:
                left = ", ".join(label for label, _, _ in starts[index:])
                steps.append(
                    f"the time budget of {self.budget:g} s spent: not restarted from {left}"
                )
                break
            if index:
                steps.append(f"restart from {label}")
            feasible = self._make_feasible(start, steps, inferline=index < 2)
            if isinstance(feasible, str):
                reason = reason or feasible
                continue
            ends.append(self._descend(feasible, steps, reconfigure))
        if self.cheapest is None:
            return self._infeasible(reason, steps)
        config = min(ends, key=self.cost) if ends else self.cheapest  # the first end of equals
        if self.cost(self.cheapest) < self.cost(config) - CENT:
            config = self.cheapest
        if config is not ends[0]:
            steps.append(
                f"the cheapest feasible configuration estimated: ${self.cost(config):.3f}/h"
            )
        confirmed = self._confirm(config, steps) if self.screened else config
        if isinstance(confirmed, str):
            return self._infeasible(confirmed, steps)
        if self.screened and self.polish and not self._spent():
            confirmed = self._polish(confirmed, steps)
        return Plan(
            feasible=True,
            config=confirmed,
            cost_per_hour=self.cost(confirmed),
            p99=self.whole(confirmed).p99,
            utilisation=self.utilisation(confirmed),
            steps=steps,
            estimates=self.replays,
            screened=self.screened_queries,
        )

    def _confirm(self, config: Configuration, steps: list[str]) -> Configuration | str:
        """The cheapest configuration that met the SLO on the prefix and meets it on the whole
        trace, of the `CONFIRM_TRIES` cheapest (`config` first of equals); else the cheapest
        with replicas added at its bottleneck until it does (or why it cannot)."""
        found = sorted(self._passed.values(), key=lambda c: (round(self.cost(c), 6), c != config))
        whole = len(self.arrivals)
        for candidate in found[:CONFIRM_TRIES]:
            estimate = self.whole(candidate)
            if estimate.p99 <= self.goal:
                steps.append(
                    f"${self.cost(candidate):.3f}/h meets the goal on the whole trace ({whole:,} "
                    f"queries): P99 {estimate.p99 * 1e3:.1f} ms"
                )
                return candidate
            steps.append(f"${self.cost(candidate):.3f}/h misses the goal on the whole trace")
        ladder = climb(found[0], self.bottleneck, lambda _, __: MAX_REPLICAS)
        rung = first_rung(len(ladder.rungs), lambda i: self.whole(ladder.rungs[i]).p99 <= self.goal)
        if rung is None:
            return f"stage {ladder.stopped!r} would need more than {MAX_REPLICAS} replicas"
        steps += self._added(ladder, rung, " (the whole trace)")
        return ladder.rungs[rung]

    def _polish(self, config: Configuration, steps: list[str]) -> Configuration:
        """InferLine's descent again from the confirmed plan, on the whole trace, within
        `polish` replays of it: the prefix may be burstier than the whole (its plan then
        dearer than needed), the margin more than the whole needs, or the bottleneck's added
        replicas more than one step needed. From here on every estimate is the whole trace's;
        once the replays are spent, the candidates not yet estimated count as infeasible, so
        the answer is always one that met the SLO on the whole trace."""
        steps.append("InferLine's descent on the whole trace")
        self.screening, self.target, self._left = self.arrivals, self.goal, self.polish
        self._estimates, self._missing, self.cheapest = self._whole, {}, config
        # InferLine's order: the floors' optimistic picks, mostly infeasible, would spend the
        # few replays on the whole trace before the small sure savings are tried
        end = self._descend(config, steps, reconfigure=False, by_floor=False)
        cheapest = self.cheapest or end
        return cheapest if self.cost(cheapest) < self.cost(end) - CENT else end

    def _make_feasible(
        self, config: Configuration, steps: list[str], inferline: bool
    ) -> Configuration | str:
        """`config` with replicas added at the bottleneck until it is feasible, or why not.
        A start other than InferLine's is given up once its bottleneck has four times the
        replicas that keep it below its throughput (its batches are then too slow).

        The configurations on the way are known by arithmetic (`headway.planning.ladder`):
        the first feasible one is found by doubling and bisection from the first with every
        stage below its throughput, the configuration one replica at a time would stop at."""

        def most(rung: Configuration, stage: str) -> int:
            if inferline:
                return MAX_REPLICAS
            return min(MAX_REPLICAS, 4 * self.least_replicas(rung, stage))

        ladder = climb(config, self.bottleneck, most)
        rungs = ladder.rungs
        start = next((i for i, c in enumerate(rungs) if self.within_capacity(c)), len(rungs))
        known, cheapest, tried = set(self._passed), self.cheapest, []

        def holds(i: int) -> bool:
            tried.append(i)
            return self.feasible(rungs[i])

        rung = first_rung(len(rungs), holds, start=start)
        if rung is not None:  # the search's record as if it had walked up to `rung` alone
            for i in tried:
                if i > rung and self.key(rungs[i]) not in known:
                    self._passed.pop(self.key(rungs[i]), None)
            self.cheapest = cheapest
            self._note_feasible(rungs[rung])
        if rung is None:
            count = rungs[-1][ladder.stopped].replicas
            if count >= MAX_REPLICAS:
                return (
                    f"stage {ladder.stopped!r} misses the SLO even at {MAX_REPLICAS} replicas "
                    "(more replicas shorten the queues, not the batches' own times)"
                )
            return f"stage {ladder.stopped!r} misses the SLO at {count} replicas"
        steps += self._added(ladder, rung)
        return rungs[rung]

    @staticmethod
    def _added(ladder: Ladder, rung: int, where: str = "") -> list[str]:
        return [
            f"add {'a replica' if n == 1 else f'{n} replicas'} to the bottleneck {stage}{where}"
            for stage, n in ladder.stages_added(rung).items()
        ]

    def _descend(
        self, config: Configuration, steps: list[str], reconfigure: bool, by_floor: bool = True
    ) -> Configuration:
        """Greedily apply the cheapest feasible action until none is cheaper; with `by_floor`,
        each step tries the actions by the least they could cost, else in InferLine's order
        (RemoveReplica, IncreaseBatch, DowngradeHardware, each on every stage)."""
        actions: dict[str, Action] = {
            "RemoveReplica": self.remove_replica,
            "IncreaseBatch": self.increase_batch,
            "DowngradeHardware": self.downgrade_hardware,
        }
        if reconfigure:
            actions["Reconfigure"] = self.reconfigure
        while True:
            if self._spent():
                steps.append(
                    f"the time budget of {self.budget:g} s spent: stopped at ${self.cost(config):.3f}/h"
                )
                return config
            # the cheapest feasible candidate (then the lowest P99, then stage and action
            # order), trying the actions that could cost least first (`Moves.floor`)
            best: tuple[float, float, int, int, str, str, Configuration] | None = None
            tries = sorted(
                (
                    self.floor(config, stage, name) if by_floor else -math.inf,
                    a,
                    s,
                    name,
                    action,
                    stage,
                )
                for a, (name, action) in enumerate(actions.items())
                for s, stage in enumerate(self.pipeline.names)
            )
            for floor, a, s, name, action, stage in tries:
                if best is not None and self._spent():
                    break  # the step's best so far is taken; the next step stops
                budget = best[0] if best is not None else self.cost(config) - CENT
                if floor > budget + CENT:
                    break  # neither this nor any after it can be cheaper than `best`
                candidate = action(config, stage, budget)
                if candidate is None or not self.feasible(candidate):
                    continue
                ranked = (self.cost(candidate), self.estimate(candidate).p99, s, a)
                if best is None or ranked < best[:4]:
                    best = (*ranked, name, stage, candidate)
            if best is None or best[0] >= self.cost(config) - CENT:
                return config
            config = best[6]
            steps.append(f"{best[4]} on {best[5]}: ${best[0]:.3f}/h")

    def _goal_text(self) -> str:
        slo = f"the SLO of {self.slo * 1e3:.1f} ms"
        if self.headroom <= 0:
            return slo
        return (
            f"{self.goal * 1e3:.1f} ms ({slo} less the {self.headroom:.0%} headroom; a smaller "
            "--headroom leaves less margin for the real server)"
        )

    def _infeasible(self, reason: str, steps: list[str]) -> Plan:
        return Plan(False, None, 0.0, float("inf"), {}, reason, steps, self.replays)
