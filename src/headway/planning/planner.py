"""InferLine's planner: the cheapest configuration whose simulated P99 meets the SLO.

1. Start every stage on its fastest hardware, at batch 1, with one replica. If the critical
   path's service time alone exceeds the SLO, no configuration can meet it: infeasible.
   Otherwise add a replica to the bottleneck -- the stage with the least throughput for the
   share of queries it sees -- until the estimator's P99 meets the SLO.
2. Then, greedily, try on every stage each action below, estimate each candidate, and apply the
   cheapest feasible one, until no candidate is both feasible and cheaper:
   - IncreaseBatch: of every larger profiled batch size, the one at which the fewest replicas
     are feasible (ties: the smaller batch). A larger batch alone costs the same; InferLine
     raises it because the throughput it adds lets replicas go (mechanisms.md section 3.3), so
     the action is worth as much as the replicas it saves. Stopping at the first size that
     saves one can leave the stage two replicas where a larger batch needs one, and the greedy
     loop then prefers slower hardware it never leaves again.
   - RemoveReplica: one replica fewer.
   - DowngradeHardware: the next cheaper hardware that has a profile of the stage's model, at
     the batch size there needing the fewest feasible replicas (ties: the smaller batch), if
     they cost less than the stage now. The batch is chosen again because slower
     hardware may meet the SLO only at a smaller batch.
   - ChangeHardware (not InferLine's): any other kind with a profile of the model, dearer ones
     included, at the batch size and replica count that cost least, if less than the stage
     now. InferLine's three actions move one step at a time; a stage moved early to a slower
     kind at a small batch can need a faster kind at a larger batch to be cheap again, which
     no single one of them reaches (neither a faster kind nor a larger batch alone is feasible
     for less), and the greedy loop stops there.

The answer is the cheapest feasible configuration the search estimated, the greedy loop's end
or any candidate on the way. Within a step, each action searches only replica counts that could
win (no dearer than the cheapest feasible candidate of the step so far), from the fewest that
keep the stage below its throughput upwards, so most candidates cost no estimate.

Each candidate is estimated with `simulate` on the planning trace; results are cached, as the
greedy loop proposes the same configurations again. A candidate is feasible when its estimated
P99 meets the SLO and every stage's planned utilisation is below 1 (a stage at or over its
throughput has a queue that grows for ever, which a finite trace can hide).

With `frontend_seconds` (the server's own time per query, `headway.planning.frontend`), every
estimate runs the pipeline behind a frontend stage taking that long per query, one at a time;
the planner never changes it (one event loop per server), and a trace faster than it can take
is infeasible whatever the models get.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from headway.planning.frontend import with_frontend, with_server
from headway.planning.pipeline import (
    Catalogue,
    Configuration,
    LatencyProfile,
    Pipeline,
    Profiles,
    StageConfig,
    profile_of,
)
from headway.planning.simulator import Estimate, simulate

#: Replicas per stage beyond which adding more is not tried (the load is out of reach).
MAX_REPLICAS = 256
#: Dollars per hour by which a candidate must be cheaper to count as cheaper (float sums).
CENT = 1e-6

Action = Callable[[Configuration, str, float], Configuration | None]


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


class Planner:
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
    ) -> None:
        self.pipeline = pipeline
        self.profiles = profiles
        self.catalogue = catalogue
        self.arrivals = np.asarray(arrivals, dtype=np.float64)
        self.slo = slo
        self.seed = seed
        self.rpc_seconds = rpc_seconds
        #: estimate with each action drawn from its profile's mean and p99 (`simulate`)
        self.spread = spread
        #: the server's time per query outside the models (0: not modelled)
        self.frontend_seconds = frontend_seconds
        self._estimates: dict[tuple[tuple[str, int, int], ...], Estimate] = {}
        #: the cheapest configuration found feasible so far (the first of equal cost)
        self.cheapest: Configuration | None = None
        duration = float(self.arrivals[-1] - self.arrivals[0]) if len(self.arrivals) > 1 else 1.0
        #: queries per second of the planning trace
        self.rate = len(self.arrivals) / max(duration, 1e-9)

    # -- estimates ----------------------------------------------------------------------------
    def estimate(self, config: Configuration) -> Estimate:
        key = tuple(
            (config[n].hardware, config[n].max_batch, config[n].replicas)
            for n in self.pipeline.names
        )
        found = self._estimates.get(key)
        if found is None:
            found = self._estimates[key] = self.simulate(config, give_up=self.slo)
        return found

    def simulate(
        self,
        config: Configuration,
        arrivals: np.ndarray | None = None,
        give_up: float | None = None,
    ) -> Estimate:
        """Replay `arrivals` (the planning trace by default) under `config`, behind the
        frontend stage when there is one; not cached."""
        pipeline, profiles, catalogue = self.pipeline, self.profiles, self.catalogue
        if self.frontend_seconds > 0:
            pipeline, config, profiles = with_frontend(
                pipeline, config, profiles, self.frontend_seconds
            )
            catalogue = with_server(catalogue)
        return simulate(
            pipeline,
            config,
            profiles,
            self.arrivals if arrivals is None else arrivals,
            seed=self.seed,
            rpc_seconds=self.rpc_seconds,
            catalogue=catalogue,
            give_up=give_up,
            spread=self.spread,
        )

    @property
    def frontend_utilisation(self) -> float:
        """The share of the frontend's time the trace asks for (0 when it is not modelled)."""
        return self.rate * self.frontend_seconds

    def feasible(self, config: Configuration) -> bool:
        """The estimated P99 meets the SLO, and no stage (the frontend included) is loaded to
        its throughput or beyond: such a stage's queue grows for ever, but can grow slowly
        enough to stay short over a planning trace that ends first."""
        if self.frontend_utilisation >= 1.0:
            return False
        if any(u >= 1.0 for u in self.utilisation(config).values()):
            return False
        if self.estimate(config).p99 > self.slo:
            return False
        cost = self.cost(config)
        if self.cheapest is None or cost < self.cost(self.cheapest) - CENT:
            self.cheapest = config
        return True

    def cost(self, config: Configuration) -> float:
        return config.cost(self.catalogue)

    # -- what the actions need ---------------------------------------------------------------
    def profile(self, stage: str, hardware: str) -> LatencyProfile:
        return profile_of(self.profiles, self.pipeline[stage].model, hardware)

    def hardware_for(self, stage: str) -> list[str]:
        """Catalogue kinds with a profile of the stage's model, most expensive first."""
        model = self.pipeline[stage].model
        kinds = [k for k in self.catalogue if k in self.profiles.get(model, {})]
        return sorted(kinds, key=lambda k: (-self.catalogue[k].cost_per_hour, k))

    def throughput(self, config: Configuration, stage: str) -> float:
        """Queries per second of the pipeline that `stage` can take (its share counted)."""
        c = config[stage]
        per_replica = self.profile(stage, c.hardware).throughput(c.max_batch)
        return c.replicas * per_replica / self.pipeline[stage].scale

    def bottleneck(self, config: Configuration) -> str:
        return min(self.pipeline.names, key=lambda s: self.throughput(config, s))

    def utilisation(self, config: Configuration) -> dict[str, float]:
        """InferLine's planned utilisation per stage: rate * share / (replicas * throughput)."""
        return {s: self.rate / self.throughput(config, s) for s in self.pipeline.names}

    # -- the actions --------------------------------------------------------------------------
    def least_replicas(self, config: Configuration, stage: str) -> int:
        """The fewest replicas of `stage`, as configured otherwise, that keep it below its
        throughput (fewer are infeasible without an estimate)."""
        c = config[stage]
        per_replica = self.profile(stage, c.hardware).throughput(c.max_batch)
        return max(1, math.floor(self.rate * self.pipeline[stage].scale / per_replica) + 1)

    def fewest_replicas(self, config: Configuration, stage: str, most: int) -> Configuration | None:
        """`config` with the fewest replicas of `stage` in [1, most] that is feasible, or None
        if `most` is not. More replicas never make a stage slower, so the count is searched
        upwards from `least_replicas` in doubling steps, then bisected: the answer is usually
        within a few of that bound, where a search down from `most` would estimate every
        halving on the way."""

        def at(count: int) -> Configuration:
            return config.with_stage(stage, replicas=count)

        low = self.least_replicas(config, stage)
        if low > most:
            return None
        probe, step = low, 1
        while not self.feasible(at(probe)):
            if probe >= most:
                return None
            low = probe + 1
            probe, step = min(most, probe + step), step * 2
        high = probe  # feasible; every count below `low` is not
        while low < high:
            middle = (low + high) // 2
            if self.feasible(at(middle)):
                high = middle
            else:
                low = middle + 1
        return at(high)

    def _affordable(self, config: Configuration, stage: str, kind: str, budget: float) -> int:
        """The most replicas of `stage` on `kind` for which `config` costs at most `budget`."""
        price = self.catalogue[kind].cost_per_hour
        if price <= 0 or budget == math.inf:
            return MAX_REPLICAS
        c = config[stage]
        rest = self.cost(config) - c.replicas * self.catalogue[c.hardware].cost_per_hour
        return min(MAX_REPLICAS, math.floor((budget - rest) / price + 1e-9))

    def increase_batch(
        self, config: Configuration, stage: str, budget: float = math.inf
    ) -> Configuration | None:
        """The stage at the larger batch size needing the fewest feasible replicas, fewer than
        now (ties go to the smaller batch); None if no larger size lets a replica go (or none
        costs at most `budget` per hour).

        InferLine's IncreaseBatch (mechanisms.md section 3.3) raises the batch for the replicas
        the added throughput lets go; every larger size is looked at, not only the first that
        saves one. Each size only searches below the best count so far.
        """
        c = config[stage]
        best: Configuration | None = None
        # only strictly fewer replicas are worth a larger batch
        most = min(c.replicas - 1, self._affordable(config, stage, c.hardware, budget))
        for size in self.profile(stage, c.hardware).batch_sizes:
            if most < 1:
                break
            if size <= c.max_batch:
                continue
            larger = config.with_stage(stage, max_batch=size, replicas=most)
            candidate = self.fewest_replicas(larger, stage, most)
            if candidate is not None:
                best = candidate
                most = candidate[stage].replicas - 1
        return best

    def remove_replica(
        self, config: Configuration, stage: str, budget: float = math.inf
    ) -> Configuration | None:
        c = config[stage]
        if c.replicas <= 1 or self._affordable(config, stage, c.hardware, budget) < c.replicas - 1:
            return None
        return config.with_stage(stage, replicas=c.replicas - 1)

    def cheapest_on(
        self, config: Configuration, stage: str, kinds: list[str], budget: float = math.inf
    ) -> Configuration | None:
        """The stage moved to one of `kinds`, at the batch size and the fewest feasible
        replicas that cost least (ties: the kind listed first, the smaller batch), if that
        costs less than the stage now and the whole at most `budget`; else None."""
        now = self.cost(config)
        best: Configuration | None = None
        for kind in kinds:
            # strictly cheaper than the best so far (or the stage now), and within the budget
            cap = min(budget, (self.cost(best) if best is not None else now) - CENT)
            most = self._affordable(config, stage, kind, cap)
            for size in self.profile(stage, kind).batch_sizes:
                if most < 1:
                    break
                moved = config.with_stage(stage, hardware=kind, max_batch=size, replicas=most)
                candidate = self.fewest_replicas(moved, stage, most)
                if candidate is not None:
                    best = candidate
                    most = candidate[stage].replicas - 1
        return best

    def downgrade_hardware(
        self, config: Configuration, stage: str, budget: float = math.inf
    ) -> Configuration | None:
        """The stage on the next cheaper hardware, at the batch size there needing the fewest
        feasible replicas (ties: the smaller batch), if that costs less than the stage now;
        else None.

        InferLine's DowngradeHW re-adds replicas to keep the stage's throughput; here as many
        as the load needs (found under the stage's cost now). The batch is chosen again
        because a batch that fits the SLO on fast hardware may not on slow: kept, the cheaper
        kind looks infeasible however many replicas it gets, and the search stays on the
        dearer one (no other InferLine action reaches a cheaper kind at a smaller batch).
        """
        price = self.catalogue[config[stage].hardware].cost_per_hour
        cheaper = [k for k in self.hardware_for(stage) if self.catalogue[k].cost_per_hour < price]
        return self.cheapest_on(config, stage, cheaper[:1], budget)

    def change_hardware(
        self, config: Configuration, stage: str, budget: float = math.inf
    ) -> Configuration | None:
        """The stage on whichever other kind (dearer ones too) costs least at its best batch
        size and fewest feasible replicas, if that is less than the stage now; else None."""
        others = [k for k in self.hardware_for(stage) if k != config[stage].hardware]
        return self.cheapest_on(config, stage, others, budget)

    # -- the algorithm ------------------------------------------------------------------------
    def initial(self) -> Configuration:
        """Every stage on its fastest hardware (lowest batch-1 latency), batch 1, 1 replica."""
        chosen: dict[str, StageConfig] = {}
        for stage in self.pipeline.names:
            kinds = self.hardware_for(stage)
            if not kinds:
                self.profile(stage, "any")  # raises, naming the model to profile
            fastest = min(kinds, key=lambda k: (self.profile(stage, k).latency(1), k))
            chosen[stage] = StageConfig(fastest, 1, 1)
        return Configuration(chosen)

    def plan(self) -> Plan:
        steps: list[str] = []
        config = self.initial()
        service = {s: self.profile(s, config[s].hardware).latency(1) for s in self.pipeline.names}
        critical = self.frontend_seconds + self.pipeline.critical_path(service)
        if self.frontend_utilisation >= 1.0:
            return self._infeasible(
                f"the server takes {self.frontend_seconds * 1e3:.2f} ms per query outside the "
                f"models (measured by `headway profile --frontend`): at most "
                f"{1 / self.frontend_seconds:.0f} queries/s, and the trace has {self.rate:.0f}",
                steps,
            )
        if critical > self.slo:
            return self._infeasible(
                f"the critical path's service time on the fastest hardware"
                f"{' (the frontend included)' if self.frontend_seconds > 0 else ''} is "
                f"{critical * 1e3:.1f} ms, over the SLO of {self.slo * 1e3:.1f} ms",
                steps,
            )
        while not self.feasible(config):
            stage = self.bottleneck(config)
            if config[stage].replicas >= MAX_REPLICAS:
                return self._infeasible(
                    f"stage {stage!r} would need more than {MAX_REPLICAS} replicas", steps
                )
            config = config.with_stage(stage, replicas=config[stage].replicas + 1)
            steps.append(f"add a replica to the bottleneck {stage}")
        actions: dict[str, Action] = {
            "RemoveReplica": self.remove_replica,
            "IncreaseBatch": self.increase_batch,
            "DowngradeHardware": self.downgrade_hardware,
            "ChangeHardware": self.change_hardware,
        }
        while True:
            # the cheapest feasible candidate (then the lowest P99, then stage and action order)
            best: tuple[float, float, int, int, str, str, Configuration] | None = None
            for a, (name, action) in enumerate(actions.items()):
                for s, stage in enumerate(self.pipeline.names):
                    budget = best[0] if best is not None else self.cost(config) - CENT
                    candidate = action(config, stage, budget)
                    if candidate is None or not self.feasible(candidate):
                        continue
                    ranked = (self.cost(candidate), self.estimate(candidate).p99, s, a)
                    if best is None or ranked < best[:4]:
                        best = (*ranked, name, stage, candidate)
            if best is None or best[0] >= self.cost(config) - CENT:
                break
            config = best[6]
            steps.append(f"{best[4]} on {best[5]}: ${best[0]:.3f}/h")
        if self.cheapest is not None and self.cost(self.cheapest) < self.cost(config) - CENT:
            config = self.cheapest
            steps.append(f"the cheapest feasible candidate estimated: ${self.cost(config):.3f}/h")
        return Plan(
            feasible=True,
            config=config,
            cost_per_hour=self.cost(config),
            p99=self.estimate(config).p99,
            utilisation=self.utilisation(config),
            steps=steps,
            estimates=len(self._estimates),
        )

    def _infeasible(self, reason: str, steps: list[str]) -> Plan:
        return Plan(False, None, 0.0, float("inf"), {}, reason, steps, len(self._estimates))
