"""A model's queue: requests ordered by priority level, then deadline (earliest first)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from headway.control.request import Request


class DeadlineQueue:
    """A bounded min-heap of requests; replicas of a model share one."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._heap: list[tuple[int, float, int, Request]] = []
        self._seq = itertools.count()
        self.rows = 0

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry[3] for entry in self._heap)

    @property
    def full(self) -> bool:
        return len(self._heap) >= self.capacity

    def push(self, request: Request) -> None:
        request.seq = next(self._seq)
        heapq.heappush(self._heap, (request.priority, request.deadline, request.seq, request))
        self.rows += request.rows

    def peek(self) -> Request | None:
        return self._heap[0][3] if self._heap else None

    def pop(self) -> Request:
        request = heapq.heappop(self._heap)[3]
        self.rows -= request.rows
        return request

    def remove_if(self, doomed: set[int]) -> list[Request]:
        """Remove the requests whose id() is in `doomed`; returns them."""
        kept, removed = [], []
        for entry in self._heap:
            (removed if id(entry[3]) in doomed else kept).append(entry)
        if removed:
            heapq.heapify(kept)
            self._heap = kept
            self.rows -= sum(entry[3].rows for entry in removed)
        return [entry[3] for entry in removed]

    def min_deadline(self) -> float:
        return min(entry[1] for entry in self._heap) if self._heap else float("inf")
