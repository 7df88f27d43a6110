"""The planner's half that estimates candidates and judges them feasible.

Each candidate is estimated with `simulate` on the planning trace (its first `screen` queries
when screened, `Feasibility.estimate`, or the whole trace, `Feasibility.whole`); results are
cached, as the greedy loop proposes the same configurations again, and a configuration that
differs from one replayed only in max batch sizes its queues never reached takes that replay's
estimate (`headway.planning.estimates`). A candidate is feasible when its estimated P99 meets
the SLO and every stage's planned utilisation is below 1 (a stage at or over its throughput has
a queue that grows for ever, which a finite trace can hide). `Moves` and `Starts` propose
configurations; `headway.planning.planner` searches with them.
"""

from __future__ import annotations

import numpy as np

from headway.planning.estimates import EstimateCache
from headway.planning.frontend import with_frontend, with_server
from headway.planning.greedy import greedy_latencies
from headway.planning.moves import CENT
from headway.planning.pipeline import Configuration
from headway.planning.simulator import Estimate, simulate
from headway.planning.starts import Starts

#: How far over its goal a candidate's greedy estimate must be for the candidate to be refused
#: without the controller's replay (the greedy estimate is the replay's, or below it, where
#: both form the same batches: this is room for the rest).
QUICK_MARGIN = 0.05
#: The estimate of a candidate that was not replayed: out of replays, or refused by the
#: greedy estimate. Neither is feasible.
UNESTIMATED = Estimate(np.zeros(0), {}, {}, 0.0, complete=False)
REFUSED = Estimate(np.zeros(0), {}, {}, 0.0, complete=False)


class Feasibility(Starts):
    """Estimates and feasibility of a pipeline's configurations on a planning trace (the
    attributes are set by `Planner`, which says what each is)."""

    arrivals: np.ndarray
    seed: int
    rpc_seconds: float
    spread: bool
    screening: np.ndarray
    screened: bool
    target: float
    replays: int
    #: greedy estimates made, and candidates they refused without a replay
    greedy: int
    refused: int
    cheapest: Configuration | None
    _left: int | None
    _estimates: EstimateCache
    _whole: EstimateCache
    _passed: dict[tuple[tuple[str, int, int], ...], Configuration]
    _missing: dict[tuple[tuple[str, int], ...], list[tuple[int, ...]]]

    def key(self, config: Configuration) -> tuple[tuple[str, int, int], ...]:
        return tuple(
            (config[n].hardware, config[n].max_batch, config[n].replicas)
            for n in self.pipeline.names
        )

    def estimate(self, config: Configuration) -> Estimate:
        """`config` replayed on the search's trace (the prefix when screened), cached; or
        refused without the replay when the greedy estimate is clearly over (`_quickly`)."""
        found = self._estimates.get(config)
        if found is None and self._left is not None:
            if self._left <= 0:  # out of replays: not estimated, so not feasible
                return UNESTIMATED
            self._left -= 1
        if found is None:
            found = self._quickly(config, self.screening, self.target) or self.simulate(
                config, self.screening, give_up=self.target
            )
            self._estimates.add(config, found)
            self.replays += found is not REFUSED
        return found

    def whole(self, config: Configuration) -> Estimate:
        """`config` replayed on the whole planning trace, cached (and screened as
        `estimate` is)."""
        if not self.screened:
            return self.estimate(config)
        found = self._whole.get(config)
        if found is None:
            found = self._quickly(config, self.arrivals, self.goal) or self.simulate(
                config, give_up=self.goal
            )
            self._whole.add(config, found)
            self.replays += found is not REFUSED
        return found

    def _quickly(self, config: Configuration, arrivals: np.ndarray, goal: float) -> Estimate | None:
        """REFUSED when `config`'s greedy estimate on `arrivals` (InferLine's estimator,
        `headway.planning.greedy`) has a P99 over `goal` by more than `QUICK_MARGIN`, else
        None (replay it). The greedy estimate leaves out what the controller adds to the
        greedy rule, so it is as fast or faster than the replay where they differ; the
        margin covers the rest."""
        pipeline, profiles = self.pipeline, self.profiles
        if self.frontend_seconds > 0:
            pipeline, config, profiles = with_frontend(
                pipeline, config, profiles, self.frontend_seconds
            )
        latencies = greedy_latencies(
            pipeline,
            config,
            profiles,
            arrivals,
            seed=self.seed,
            spread=self.spread,
            rpc_seconds=self.rpc_seconds,
        )
        self.greedy += 1
        if float(np.percentile(latencies, 99)) > goal * (1 + QUICK_MARGIN):
            self.refused += 1
            return REFUSED
        return None

    def simulate(
        self,
        config: Configuration,
        arrivals: np.ndarray | None = None,
        give_up: float | None = None,
        draws: np.ndarray | None = None,
    ) -> Estimate:
        """Replay `arrivals` (the planning trace by default) under `config`, behind the
        frontend stage when there is one; not cached. `draws`: which stages each query
        reaches (`simulate`)."""
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
            draws=draws,
        )

    @property
    def frontend_utilisation(self) -> float:
        """The share of the frontend's time the trace asks for (0 when it is not modelled)."""
        return self.rate * self.frontend_seconds

    def within_capacity(self, config: Configuration) -> bool:
        """Every stage, the frontend included, below its throughput and loaded to at most
        1 - headroom of it (no estimate needed)."""
        most = 1.0 - self.headroom
        if self.frontend_utilisation >= 1.0 or self.frontend_utilisation > most:
            return False
        return all(u < 1.0 and u <= most for u in self.utilisation(config).values())

    def feasible(self, config: Configuration) -> bool:
        """The estimated P99 meets the goal (the SLO less the headroom), and no stage (the
        frontend included) is loaded past 1 - headroom of its throughput, nor to it or beyond:
        such a stage's queue grows for ever, but can grow slowly enough to stay short over a
        planning trace that ends first.

        More replicas never make a query later (the search's bisections rely on it), so a
        configuration with the same kinds and batches as one whose estimate missed the SLO,
        and no more replicas at any stage, misses it too: refused without an estimate."""
        if not self.within_capacity(config):
            return False
        shape = tuple((config[n].hardware, config[n].max_batch) for n in self.pipeline.names)
        counts = tuple(config[n].replicas for n in self.pipeline.names)
        misses = self._missing.setdefault(shape, [])
        if any(all(c <= m for c, m in zip(counts, missed, strict=True)) for missed in misses):
            return False  # no more replicas anywhere than a configuration that missed the SLO
        if self.estimate(config).p99 > self.target:
            misses.append(counts)
            return False
        self._note_feasible(config)
        return True

    def _note_feasible(self, config: Configuration) -> None:
        """Keep `config` among those found feasible, and as the cheapest if it is."""
        self._passed.setdefault(self.key(config), config)
        cost = self.cost(config)
        if self.cheapest is None or cost < self.cost(self.cheapest) - CENT:
            self.cheapest = config
