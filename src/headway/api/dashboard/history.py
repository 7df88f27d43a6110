"""A bounded ring of per-second figures: what the dashboard's charts draw.

One slot per sample (a second apart), `capacity` slots; each series (a model's p99, a worker's
CPU, ...) is one float32 array of `capacity` values, NaN where it had no figure. A sample
overwrites the oldest slot, so memory is fixed by `capacity` and the number of series, which
`max_series` bounds: at most `capacity * (8 + 4 * max_series)` bytes of figures. A series
that is not in a sample gets NaN there, and one left with NaN in every slot is forgotten at
the end of a lap.
Sample numbers (`seq`) count from 1 and never repeat, so a page asks only for the samples
after the last it has (`since`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: Samples kept: 15 minutes at one a second (Grafana's default range, "last 15 minutes").
HISTORY_SECONDS = 900
#: Series kept at most (each `capacity` float32 values): 7 models with 12 figures each, a
#: dozen workers and apps with a few each, take under 200. Beyond it new series are dropped
#: (counted in `Ring.dropped`) until old ones are forgotten.
MAX_SERIES = 2048

#: A series' name: (group, entity, figure), e.g. ("model", "iris-forest", "p99_ms").
Key = tuple[str, str, str]


class Ring:
    """The last `capacity` samples of at most `max_series` series."""

    def __init__(self, capacity: int = HISTORY_SECONDS, max_series: int = MAX_SERIES) -> None:
        if capacity < 1 or max_series < 1:
            raise ValueError("a history keeps at least one sample of one series")
        self.capacity = capacity
        self.max_series = max_series
        self.times = np.full(capacity, np.nan)
        self.series: dict[Key, np.ndarray] = {}
        #: Samples taken so far: the last one's number.
        self.seq = 0
        #: Series not kept for want of room (`max_series`), counted once per sample.
        self.dropped = 0

    @property
    def nbytes(self) -> int:
        """Bytes the figures take now (the arrays, not the dictionary around them)."""
        return int(self.times.nbytes + sum(a.nbytes for a in self.series.values()))

    @property
    def most_bytes(self) -> int:
        """The most bytes the figures can take: `capacity * (8 + 4 * max_series)`."""
        return self.capacity * (8 + 4 * self.max_series)

    def add(self, at: float, figures: Mapping[Key, float | None]) -> None:
        """Record one sample taken at `at` (seconds since the epoch)."""
        slot = self.seq % self.capacity
        self.seq += 1
        self.times[slot] = at
        for key, values in self.series.items():
            figure = figures.get(key)
            values[slot] = np.nan if figure is None else figure
        for key, figure in figures.items():
            if key in self.series or figure is None:
                continue
            if len(self.series) >= self.max_series:
                self.dropped += 1
                continue
            values = np.full(self.capacity, np.nan, dtype=np.float32)
            values[slot] = figure
            self.series[key] = values
        if slot == self.capacity - 1:  # once a lap: forget series that have nothing left
            for key in [k for k, v in self.series.items() if np.isnan(v).all()]:
                del self.series[key]

    def since(self, seq: int = 0) -> dict[str, Any]:
        """The samples after number `seq` (all that are kept, when older): `first` and `last`
        sample numbers, their times `t`, and each series' values over them (NaN: no figure),
        as `[group, name, figure, values]`; numpy arrays, for orjson's OPT_SERIALIZE_NUMPY
        (float32 in its shortest form, NaN as null)."""
        last = self.seq
        first = max(seq + 1, last - self.capacity + 1, 1)
        if first > last:
            return {"first": last + 1, "last": last, "t": [], "series": []}
        slots = np.arange(first - 1, last) % self.capacity
        series = []
        for (group, name, figure), values in self.series.items():
            picked = values[slots]
            if np.isnan(picked).all():
                continue
            series.append([group, name, figure, picked])
        return {"first": first, "last": last, "t": np.round(self.times[slots], 3), "series": series}
