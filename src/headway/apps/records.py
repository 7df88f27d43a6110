"""What an application remembers about its queries: the query log, latencies, model calls."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from headway.selection import Selection

QUERY_LOG_SIZE = 100_000
LATENCY_WINDOW = 1000


@dataclass
class QueryRecord:
    """What feedback on one query needs: who was asked, what they answered in time."""

    selection: Selection
    answers: dict[str, Any]
    output: Any
    user: str | None
    digest: bytes


class QueryLog:
    """A bounded map query id -> record (oldest evicted first), also findable by input + user."""

    def __init__(self, capacity: int = QUERY_LOG_SIZE) -> None:
        self.capacity = max(1, capacity)
        self._records: OrderedDict[str, QueryRecord] = OrderedDict()
        self._by_input: dict[tuple[bytes, str | None], str] = {}

    def __len__(self) -> int:
        return len(self._records)

    def add(self, query_id: str, record: QueryRecord) -> None:
        self._records[query_id] = record
        self._by_input[(record.digest, record.user)] = query_id
        while len(self._records) > self.capacity:
            old_id, old = self._records.popitem(last=False)
            if self._by_input.get((old.digest, old.user)) == old_id:
                del self._by_input[(old.digest, old.user)]

    def get(self, query_id: str) -> QueryRecord | None:
        return self._records.get(query_id)

    def find(self, digest: bytes, user: str | None) -> tuple[str, QueryRecord] | None:
        """The latest query with this input digest from this user."""
        query_id = self._by_input.get((digest, user))
        return None if query_id is None else (query_id, self._records[query_id])


class Latencies:
    """The last `size` durations (seconds), summarised in milliseconds for the dashboard."""

    def __init__(self, size: int = LATENCY_WINDOW) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.values.append(seconds)
        self.count += 1

    def summary(self) -> dict[str, float | int | None]:
        if not self.values:
            return {"count": self.count, "mean_ms": None, "p50_ms": None, "p99_ms": None}
        ms = np.asarray(self.values) * 1000.0
        p50, p99 = np.percentile(ms, [50, 99])
        return {"count": self.count, "mean_ms": float(ms.mean()), "p50_ms": float(p50),
                "p99_ms": float(p99)}  # fmt: skip


@dataclass
class ModelCalls:
    """How one model's calls from this application went."""

    in_time: int = 0
    late: int = 0
    failed: int = 0
    latency: Latencies = field(default_factory=Latencies)
