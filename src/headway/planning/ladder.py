"""InferLine's initialisation without one estimate per replica: replicas added at the
bottleneck, one at a time, as a ladder of configurations known by arithmetic, and its first
feasible rung found by doubling and bisection.

Which stage is the bottleneck depends on the profiles' throughputs alone, so every rung of
the ladder (start, start with a replica more at its bottleneck, and so on) is known before any
is estimated; more replicas never make a query later, so the rungs at and after the first
feasible one are all feasible. The first feasible rung is then found with about 2 log2(n)
estimates instead of n: the rung InferLine's one-at-a-time loop stops at, the same
configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headway.planning.pipeline import Configuration


@dataclass(frozen=True)
class Ladder:
    """Configurations from a start, each the one before with a replica more at `added[i - 1]`
    (its bottleneck); the last has its bottleneck, `stopped`, at the most replicas allowed."""

    rungs: list[Configuration]
    added: list[str]
    stopped: str

    def stages_added(self, upto: int) -> dict[str, int]:
        """Replicas added per stage to reach rung `upto`, in the order first added."""
        counts: dict[str, int] = {}
        for stage in self.added[:upto]:
            counts[stage] = counts.get(stage, 0) + 1
        return counts


def climb(
    start: Configuration,
    bottleneck: Callable[[Configuration], str],
    most: Callable[[Configuration, str], int],
) -> Ladder:
    """The ladder from `start`: add a replica at `bottleneck(rung)` until that stage has
    `most(rung, stage)` replicas or more."""
    rungs, added = [start], list[str]()
    while True:
        config = rungs[-1]
        stage = bottleneck(config)
        if config[stage].replicas >= most(config, stage):
            return Ladder(rungs, added, stage)
        rungs.append(config.with_stage(stage, replicas=config[stage].replicas + 1))
        added.append(stage)


def first_rung(
    count: int, holds: Callable[[int], bool], *, start: int = 0, last: int | None = None
) -> int | None:
    """The least i in [start, last] (last: count - 1) for which `holds(i)`, given that it
    holds for every index after one where it holds; None if it holds for none.

    Tried at start, start + 1, start + 3, start + 7, ... (each gap twice the last) until it
    holds, then bisected between the last miss and that: an answer near `start` -- the usual
    one -- costs about as many tries as a walk would, a far one about 2 log2 of the distance."""
    last = count - 1 if last is None else last
    if start > last:
        return None
    low, probe, step = start, start, 1  # every index below `low` misses
    while not holds(probe):
        if probe >= last:
            return None
        low = probe + 1
        probe, step = min(last, probe + step), step * 2
    high = probe
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle + 1
    return high
