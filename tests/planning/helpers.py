"""Small pipelines and profiles whose simulated latencies can be computed by hand."""

from __future__ import annotations

from typing import Any

from headway.planning.pipeline import Catalogue, Hardware, LatencyProfile, Pipeline, Stage
from headway.planning.planner import Planner

MS = 1e-3


def flat(ms: float, sizes: tuple[int, ...] = (1,), per_row_ms: float = 0.0) -> LatencyProfile:
    """A profile taking `ms` plus `per_row_ms` for each row beyond the first."""
    return LatencyProfile({b: (ms + per_row_ms * (b - 1)) * MS for b in sizes})


def chain(*scales: float) -> Pipeline:
    """s0 -> s1 -> ... with the given shares; model of stage i is m{i}."""
    stages = [
        Stage(f"s{i}", f"m{i}", (f"s{i - 1}",) if i else (), scale)
        for i, scale in enumerate(scales)
    ]
    return Pipeline("chain", tuple(stages))


CATALOGUE = Catalogue(
    {
        "gpu": Hardware("gpu", 3.0, gpu="gpu-like"),
        "cpu4": Hardware("cpu4", 0.4, cpus=4, threads=4),
        "cpu1": Hardware("cpu1", 0.1),
    }
)


SIZES = (1, 2, 4, 8)
#: Two models' profiles: m0 10 ms alone, 2 ms more per extra row, on a CPU worker (cpu1), twice
#: as fast on cpu4 and four times on the GPU-like kind; m1 20 ms + 4 ms a row on cpu1, four
#: times faster on the GPU-like kind, none on cpu4.
PROFILES = {
    "m0": {
        "cpu1": flat(10, SIZES, per_row_ms=2),
        "cpu4": flat(5, SIZES, per_row_ms=1),
        "gpu": flat(2.5, SIZES, per_row_ms=0.5),
    },
    "m1": {"cpu1": flat(20, SIZES, per_row_ms=4), "gpu": flat(5, SIZES, per_row_ms=1)},
}


def at_slo(*args: Any, **options: Any) -> Planner:
    """A planner held to the SLO itself, with no headroom (InferLine's): the cases computed
    by hand are at it."""
    return Planner(*args, **{"headroom": 0.0, **options})
