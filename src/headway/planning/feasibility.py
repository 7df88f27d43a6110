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
from headway.planning.moves import CENT
from headway.planning.pipeline import Configuration
from headway.planning.simulator import Estimate, simulate
from headway.planning.starts import Starts


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
        """`config` replayed on the search's trace (the prefix when screened), cached."""
        found = self._estimates.get(config)
        if found is None and self._left is not None:
            if self._left <= 0:  # out of replays: not estimated, so not feasible
                return Estimate(np.zeros(0), {}, {}, 0.0, complete=False)
            self._left -= 1
        if found is None:
            found = self._estimates.add(
                config, self.simulate(config, self.screening, give_up=self.target)
            )
            self.replays += 1
        return found

    def whole(self, config: Configuration) -> Estimate:
        """`config` replayed on the whole planning trace, cached."""
        if not self.screened:
            return self.estimate(config)
        found = self._whole.get(config)
        if found is None:
            found = self._whole.add(config, self.simulate(config, give_up=self.slo))
            self.replays += 1
        return found

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

    def feasible(self, config: Configuration) -> bool:
        """The estimated P99 meets the SLO, and no stage (the frontend included) is loaded to
        its throughput or beyond: such a stage's queue grows for ever, but can grow slowly
        enough to stay short over a planning trace that ends first.

        More replicas never make a query later (the search's bisections rely on it), so a
        configuration with the same kinds and batches as one whose estimate missed the SLO,
        and no more replicas at any stage, misses it too: refused without an estimate."""
        if self.frontend_utilisation >= 1.0:
            return False
        if any(u >= 1.0 for u in self.utilisation(config).values()):
            return False
        shape = tuple((config[n].hardware, config[n].max_batch) for n in self.pipeline.names)
        counts = tuple(config[n].replicas for n in self.pipeline.names)
        misses = self._missing.setdefault(shape, [])
        if any(all(c <= m for c, m in zip(counts, missed, strict=True)) for missed in misses):
            return False  # no more replicas anywhere than a configuration that missed the SLO
        if self.estimate(config).p99 > self.target:
            misses.append(counts)
            return False
        self._passed.setdefault(self.key(config), config)
        cost = self.cost(config)
        if self.cheapest is None or cost < self.cost(self.cheapest) - CENT:
            self.cheapest = config
        return True
