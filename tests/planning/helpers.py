"""Small pipelines and profiles whose simulated latencies can be computed by hand."""

from __future__ import annotations

from headway.planning.pipeline import Catalogue, Hardware, LatencyProfile, Pipeline, Stage

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
