"""InferLine's coarse-grained baselines, to compare a plan with: CG-Mean and CG-Peak.

A coarse-grained deployment treats the whole pipeline as one unit: every model once, all on
one hardware kind (a model that kind has no profile of runs on `fallback`, e.g. a CPU kind for
preprocessing in a GPU unit), all at one batch size -- the largest whose unit latency (the
critical path, each model at the rows of a batch that reach it) meets the SLO, where a unit
takes the most queries per second -- and the unit replicated for a rate: the trace's mean
(CG-Mean) or its peak (CG-Peak, `peak_rate`). Each model of a unit is a replica priced by its
kind, as in a plan. Of the kinds, InferLine's takes the one where a unit is fastest
("fastest"); "cheapest" takes the one where the deployment costs least instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from headway.planning.envelope import max_count
from headway.planning.pipeline import (
    Catalogue,
    Configuration,
    Pipeline,
    Profiles,
    Stage,
    StageConfig,
    profile_of,
)


def peak_rate(arrivals: np.ndarray, window: float) -> float:
    """The highest rate in any window of `window` seconds: its most arrivals / `window`."""
    return max_count(np.asarray(arrivals, dtype=np.float64), window) / window


class CoarseGrained:
    """Units of `pipeline` on each kind of `catalogue`, at `sizes` (batch sizes to choose from)."""

    def __init__(
        self,
        pipeline: Pipeline,
        profiles: Profiles,
        catalogue: Catalogue,
        sizes: Sequence[int],
        fallback: str,
    ) -> None:
        self.pipeline, self.profiles, self.catalogue = pipeline, profiles, catalogue
        self.sizes, self.fallback = sorted(sizes), fallback

    def kind_of(self, stage: Stage, kind: str) -> str:
        """Where the stage's model runs in a unit on `kind`: there, or on the fallback, or
        (a model profiled on neither, such as one only measured on GPUs) on the cheapest kind
        it has a profile on."""
        profiled = self.profiles.get(stage.model, {})
        if kind in profiled or self.fallback in profiled or not profiled:
            return kind if kind in profiled else self.fallback
        return min(
            (k for k in profiled if k in self.catalogue),
            key=lambda k: self.catalogue[k].cost_per_hour,
            default=self.fallback,
        )

    def latency(self, kind: str, batch: int) -> float:
        """A unit's service time for `batch` queries: its critical path, each model at the
        rows that reach it (a cascade's second model sees its share of them)."""
        service = {
            s.name: profile_of(self.profiles, s.model, self.kind_of(s, kind)).latency(
                max(1, math.ceil(s.scale * batch))
            )
            for s in self.pipeline.stages
        }
        return self.pipeline.critical_path(service)

    def throughput(self, kind: str, batch: int) -> float:
        """Queries per second one unit takes at `batch`: its slowest model, share counted."""
        return min(
            profile_of(self.profiles, s.model, self.kind_of(s, kind)).throughput(batch) / s.scale
            for s in self.pipeline.stages
        )

    def units(self, kind: str, batch: int, count: int) -> Configuration:
        """`count` units on `kind` at `batch`: every stage `count` replicas."""
        return Configuration(
            {s.name: StageConfig(self.kind_of(s, kind), batch, count) for s in self.pipeline.stages}
        )

    def deployment(self, slo: float, rate: float, choose: str = "fastest") -> Configuration | None:
        """Units enough for `rate` on the kind `choose` says ("fastest": where a unit takes
        the most queries per second, ties to the cheaper; "cheapest": where the deployment
        costs least, ties to the faster), each kind at the largest batch whose unit latency
        meets `slo`; None when no kind's batch 1 does."""
        found: list[tuple[float, float, Configuration]] = []  # (queries/s, $/h, config)
        for kind in self.catalogue:
            if not any(kind in self.profiles.get(s.model, {}) for s in self.pipeline.stages):
                continue
            fitting = [b for b in self.sizes if self.latency(kind, b) <= slo]
            if not fitting:
                continue
            throughput = self.throughput(kind, fitting[-1])
            config = self.units(kind, fitting[-1], max(1, math.ceil(rate / throughput)))
            found.append((throughput, config.cost(self.catalogue), config))
        if not found:
            return None
        if choose == "fastest":
            return min(found, key=lambda f: (-f[0], f[1]))[2]
        if choose == "cheapest":
            return min(found, key=lambda f: (f[1], -f[0]))[2]
        raise ValueError(f"choose is 'fastest' or 'cheapest', not {choose!r}")
