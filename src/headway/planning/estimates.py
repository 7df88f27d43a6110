"""The planner's estimates on one trace, found again for a configuration that replays the same.

A stage's max batch size changes a replay only once the stage's queue holds that many
requests: below it, every batch takes the whole queue whatever the limit, and no queue is a
full batch to send ahead (`headway.control.scheduling.choices`). So a configuration that differs
from one already replayed only in max batch sizes, each (where it differs) above the most
requests that stage's queue held in that replay (`Estimate.queued`), replays the same events at
the same clock times (`simulate` starts every trace at the same time, whatever the warm-up
took, and durations drawn at random are drawn afresh from the seed when it starts): its
estimate is that replay's, to the bit. A replay that stopped early counts as well: the other
stops at the same event.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from headway.planning.pipeline import Configuration
from headway.planning.simulator import Estimate

#: per stage (pipeline order): hardware kind, max batch size, replicas
Key = tuple[tuple[str, int, int], ...]


class EstimateCache:
    """The estimates of configurations of the stages `names`, each replayed once on one trace."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        #: the configurations replayed, by key
        self._replayed: dict[Key, Estimate] = {}
        #: configurations found to replay as one replayed: key -> its estimate
        self._same: dict[Key, Estimate] = {}
        #: (kind, replicas) per stage -> (max batch sizes, estimate) of each replayed
        self._by_shape: dict[tuple[tuple[str, int], ...], list[tuple[tuple[int, ...], Estimate]]]
        self._by_shape = {}

    def key(self, config: Configuration) -> Key:
        return tuple(
            (config[n].hardware, config[n].max_batch, config[n].replicas) for n in self.names
        )

    def __len__(self) -> int:
        """How many configurations were replayed."""
        return len(self._replayed)

    def __iter__(self) -> Iterator[Key]:
        """The keys of the configurations replayed."""
        return iter(self._replayed)

    def get(self, config: Configuration) -> Estimate | None:
        """`config`'s estimate: its own replay's or that of a configuration it replays the
        same as (see the module docstring); None if neither was made."""
        key = self.key(config)
        found = self._replayed.get(key) or self._same.get(key)
        if found is not None:
            return found
        batches = tuple(b for _, b, _ in key)
        for replayed, estimate in self._by_shape.get(self._shape(key), ()):
            if all(
                mine == theirs or estimate.queued.get(name, mine) < min(mine, theirs)
                for name, mine, theirs in zip(self.names, batches, replayed, strict=True)
            ):
                self._same[key] = estimate
                return estimate
        return None

    def add(self, config: Configuration, estimate: Estimate) -> Estimate:
        """Keep `estimate`, the replay of `config`; returns it."""
        key = self.key(config)
        self._replayed[key] = estimate
        batches = tuple(b for _, b, _ in key)
        self._by_shape.setdefault(self._shape(key), []).append((batches, estimate))
        return estimate

    @staticmethod
    def _shape(key: Key) -> tuple[tuple[str, int], ...]:
        return tuple((kind, replicas) for kind, _, replicas in key)
