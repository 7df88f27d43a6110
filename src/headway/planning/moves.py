"""The search's moves on a stage: InferLine's IncreaseBatch, RemoveReplica and
DowngradeHardware, and Reconfigure (each method says what it does and why;
`headway.planning.planner` how the search uses them).

`Moves` is the planner's half that proposes candidates; the planner estimates them
(`feasible`). Each action takes a `budget`, the most the whole configuration may cost per hour,
and searches only replica counts within it.
"""

from __future__ import annotations

import math

from headway.planning.pipeline import (
    Catalogue,
    Configuration,
    LatencyProfile,
    Pipeline,
    Profiles,
    profile_of,
)

#: Replicas per stage beyond which adding more is not tried (the load is out of reach).
MAX_REPLICAS = 256
#: Dollars per hour by which a candidate must be cheaper to count as cheaper (float sums).
CENT = 1e-6


class Moves:
    """Candidates for a pipeline's stages, given the planning trace's mean `rate`."""

    pipeline: Pipeline
    profiles: Profiles
    catalogue: Catalogue
    rate: float
    #: the share of each stage's throughput a plan leaves unused (`headway.planning.planner`)
    headroom: float = 0.0

    def feasible(self, config: Configuration) -> bool:
        raise NotImplementedError

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
        throughput, and loaded to at most 1 - headroom of it (fewer are infeasible without
        an estimate)."""
        c = config[stage]
        per_replica = self.profile(stage, c.hardware).throughput(c.max_batch)
        load = self.rate * self.pipeline[stage].scale / per_replica
        below = math.floor(load) + 1
        if self.headroom <= 0:
            return max(1, below)
        return max(1, below, math.ceil(load / (1.0 - self.headroom) - 1e-9))

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

    def floor(self, config: Configuration, stage: str, action: str) -> float:
        """The least `action` could make `config` cost, with no estimate: the stage at the
        fewest replicas below its throughput on each (kind, batch size) the action may pick
        (inf: the action has nothing to propose). The search tries the actions whose floor is
        lowest first, so that once one is feasible the rest cost no estimate."""
        c = config[stage]
        own = self.catalogue[c.hardware].cost_per_hour
        rest = self.cost(config) - c.replicas * own
        if action == "RemoveReplica":
            return rest + (c.replicas - 1) * own if c.replicas > 1 else math.inf
        kinds = self.hardware_for(stage)
        if action == "IncreaseBatch":
            kinds = [c.hardware]
        elif action == "DowngradeHardware":
            kinds = [k for k in kinds if self.catalogue[k].cost_per_hour < own][:1]
        least = math.inf
        for kind in kinds:
            price = self.catalogue[kind].cost_per_hour
            for size in self.profile(stage, kind).batch_sizes:
                if action == "IncreaseBatch" and size <= c.max_batch:
                    continue
                moved = config.with_stage(stage, hardware=kind, max_batch=size, replicas=1)
                count = self.least_replicas(moved, stage)
                if action != "IncreaseBatch" or count < c.replicas:
                    least = min(least, count * price)
        return rest + least

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
        """The stage on one of `kinds`, at the batch size and the fewest feasible replicas that
        cost least (ties: the kind listed first, the smaller batch), if that costs less than
        the stage now and the whole at most `budget`; else None.

        The (kind, batch) pairs are tried cheapest first by the fewest replicas that keep the
        stage below its throughput (a lower bound on their cost), each only within the cost
        of the best found so far: once one is feasible, the pairs whose bound is over it cost
        no estimate."""
        options = []
        for order, kind in enumerate(kinds):
            price = self.catalogue[kind].cost_per_hour
            for size in self.profile(stage, kind).batch_sizes:
                moved = config.with_stage(stage, hardware=kind, max_batch=size, replicas=1)
                options.append((self.least_replicas(moved, stage) * price, order, size, kind))
        cap = min(budget, self.cost(config) - CENT)  # cheaper than the stage now
        best: tuple[float, int, int, Configuration] | None = None
        for _, order, size, kind in sorted(options):
            # listed after the best so far (kind, then batch), it wins only by costing less
            strictly = best is not None and (order, size) > best[1:3]
            most = self._affordable(config, stage, kind, cap - CENT if strictly else cap)
            moved = config.with_stage(stage, hardware=kind, max_batch=size, replicas=max(most, 1))
            candidate = self.fewest_replicas(moved, stage, most) if most >= 1 else None
            if candidate is None:
                continue
            ranked = (self.cost(candidate), order, size, candidate)
            if best is None or ranked[:3] < best[:3]:
                best = ranked
                cap = ranked[0]  # a tie can still win on the kind's order or a smaller batch
        return best[3] if best is not None else None

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

    def reconfigure(
        self, config: Configuration, stage: str, budget: float = math.inf
    ) -> Configuration | None:
        """The stage on whichever kind (dearer ones and its own too) and batch size cost least
        with the fewest feasible replicas, if that is less than the stage now; else None."""
        return self.cheapest_on(config, stage, self.hardware_for(stage), budget)
