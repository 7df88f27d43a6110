"""Measured profiles in the store: each model's latency per (hardware kind, batch size).

`headway profile` measures them on this machine; profiles of hardware that is not here (a GPU)
are imported from a file. They share the `profiles` table (schema in `store/db.py`) with the
scheduler's rolling estimates, which are keyed by `name@version` and leave the distribution
columns empty; rows here are keyed by model name and carry `mean`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from headway.store.db import Store


@dataclass(frozen=True)
class MeasuredProfile:
    """One model at one batch size on one hardware kind (seconds; throughput in rows/s of one
    replica running such batches back to back)."""

    model: str
    hardware: str
    batch_size: int
    mean: float
    p50: float | None = None
    p99: float | None = None
    throughput: float | None = None
    samples: int = 0
    source: str = "measured"  # or "imported"
    #: how far apart the profiler's rounds' means were, over the mean (None: not measured
    #: in rounds); `p99_spread` the same of their p99s (`headway.planning.profiler`)
    spread: float | None = None
    p99_spread: float | None = None


def save_measured(store: Store, rows: Sequence[MeasuredProfile]) -> None:
    """Keep `rows`, replacing earlier ones of the same (model, hardware, batch size)."""
    now = time.time()
    store.execute(
        "INSERT OR REPLACE INTO profiles(model, batch_size, seconds, hardware, updated, mean, "
        "p50, p99, throughput, samples, source, spread, p99_spread) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            (
                r.model,
                r.batch_size,
                r.p99 if r.p99 is not None else r.mean,
                r.hardware,
                now,
                r.mean,
                r.p50,
                r.p99,
                r.throughput if r.throughput is not None else r.batch_size / r.mean,
                r.samples,
                r.source,
                r.spread,
                r.p99_spread,
            )
            for r in rows
        ],
    )


def measured(store: Store, models: Iterable[str] | None = None) -> list[MeasuredProfile]:
    """Every measured or imported profile row (of `models` only, when given)."""
    rows = store.query(
        "SELECT model, hardware, batch_size, mean, p50, p99, throughput, samples, source, "
        "spread, p99_spread FROM profiles WHERE mean IS NOT NULL "
        "ORDER BY model, hardware, batch_size"
    )
    wanted = None if models is None else set(models)
    return [
        MeasuredProfile(
            m, h, int(b), float(mean), p50, p99, tp, int(n or 0), str(src or ""), sp, p99_sp
        )
        for m, h, b, mean, p50, p99, tp, n, src, sp, p99_sp in rows
        if wanted is None or m in wanted
    ]
