"""A model's queue: requests ordered by priority level, then deadline (or by arrival: FIFO)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from headway.control.jobs import Job


class DeadlineQueue:
    """A bounded min-heap of requests; replicas of a model share one."""

    def __init__(self, capacity: int, *, fifo: bool = False) -> None:
        self.capacity = capacity
        self.fifo = fifo
        self._heap: list[tuple[int, float, int, Job]] = []
        self._seq = itertools.count()
        self.rows = 0
        #: No queued request orders after this (priority, deadline): the largest pushed since
        #: the queue was last empty. Usually a new request's own deadline is the latest, and
        #: then every queued row is ahead of it without looking (`rows_ahead`).
        self._last: tuple[int, float] | None = None
        #: Queued requests of more than one row, and how many of each priority level: while
        #: every one is a single row of one level, deadline order is heap order (`uniform`).
        self._multi_row = 0
        self._levels: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Job]:
        return (entry[3] for entry in self._heap)

    @property
    def last(self) -> tuple[int, float] | None:
        """No queued request orders after this (priority, deadline); None: empty."""
        return self._last

    @property
    def full(self) -> bool:
        return len(self._heap) >= self.capacity

    def push(self, request: Job) -> None:
        request.seq = next(self._seq)
        if self.fifo:
            entry = (0, request.arrival, request.seq, request)
        else:
            entry = (request.priority, request.deadline, request.seq, request)
        heapq.heappush(self._heap, entry)
        self.rows += request.rows
        if request.rows != 1:
            self._multi_row += 1
        self._levels[request.priority] = self._levels.get(request.priority, 0) + 1
        key = (request.priority, request.deadline)
        if self._last is None or key > self._last:
            self._last = key

    def peek(self) -> Job | None:
        return self._heap[0][3] if self._heap else None

    def head_key(self) -> tuple[int, float, int] | None:
        """The order key of the first request (to compare heads across models)."""
        return self._heap[0][:3] if self._heap else None

    def pop(self) -> Job:
        request = heapq.heappop(self._heap)[3]
        self.rows -= request.rows
        self._left(request)
        if not self._heap:
            self._last = None
        return request

    def _left(self, request: Job) -> None:
        if request.rows != 1:
            self._multi_row -= 1
        count = self._levels[request.priority] - 1
        if count:
            self._levels[request.priority] = count
        else:
            del self._levels[request.priority]

    @property
    def uniform(self) -> bool:
        """Whether the queue is in deadline order and every request is one row: then a
        request's drop time orders as its deadline, and the head's is the earliest
        (`DropTimes`), without a pass over the queue."""
        return not self.fifo and self._multi_row == 0 and len(self._levels) <= 1

    def rows_ahead(self, priority: int, deadline: float) -> int:
        """Queued rows that order before or with (priority, deadline): they run first."""
        key = (priority, deadline)
        if self._last is None or key >= self._last:
            return self.rows  # O(1): the common case, a deadline later than everyone's
        return sum(
            entry[3].rows for entry in self._heap if (entry[3].priority, entry[3].deadline) <= key
        )

    def remove_if(self, doomed: set[int]) -> list[Job]:
        """Remove the requests whose id() is in `doomed`; returns them."""
        kept: list[tuple[int, float, int, Job]] = []
        removed: list[tuple[int, float, int, Job]] = []
        for entry in self._heap:
            (removed if id(entry[3]) in doomed else kept).append(entry)
        if removed:
            heapq.heapify(kept)
            self._heap = kept
            self.rows -= sum(entry[3].rows for entry in removed)
            for entry in removed:
                self._left(entry[3])
            if not kept:
                self._last = None
        return [entry[3] for entry in removed]

    def min_deadline(self) -> float:
        return min(entry[3].deadline for entry in self._heap) if self._heap else float("inf")
