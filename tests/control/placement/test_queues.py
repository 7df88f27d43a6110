"""A model's queue: priority level first, then earliest deadline, bounded."""

from __future__ import annotations

import numpy as np

from headway.control.jobs import Job
from headway.control.placement.queues import DeadlineQueue
from headway.control.request import DEFAULT_PRIORITY, priority_level
from tests.control.helpers import Tag


def req(tag: str, deadline: float, *, rows: int = 1, priority: int = DEFAULT_PRIORITY) -> Job:
    return Job("m", {"x": np.zeros((rows, 1))}, rows, 0.0, deadline, priority, receiver=Tag(tag))


def drain(queue: DeadlineQueue) -> list[str]:
    return [queue.pop().receiver for _ in range(len(queue))]


def test_earliest_deadline_first() -> None:
    queue = DeadlineQueue(10)
    for tag, deadline in [("c", 3.0), ("a", 1.0), ("d", 4.0), ("b", 2.0)]:
        queue.push(req(tag, deadline))
    assert queue.peek().receiver == "a"
    assert queue.min_deadline() == 1.0
    assert drain(queue) == ["a", "b", "c", "d"]


def test_equal_deadlines_keep_arrival_order() -> None:
    queue = DeadlineQueue(10)
    for tag in "xyz":
        queue.push(req(tag, 1.0))
    assert drain(queue) == ["x", "y", "z"]


def test_priority_level_comes_before_deadline() -> None:
    queue = DeadlineQueue(10)
    queue.push(req("default-early", 1.0))
    queue.push(req("p2", 9.0, priority=priority_level(2)))
    queue.push(req("p1-late", 10.0, priority=priority_level(1)))
    queue.push(req("p1-early", 5.0, priority=priority_level(1)))
    assert drain(queue) == ["p1-early", "p1-late", "p2", "default-early"]


def test_priority_level_follows_triton() -> None:
    assert priority_level(None) == DEFAULT_PRIORITY
    assert priority_level(0) == DEFAULT_PRIORITY  # 0: unset, the default level
    assert priority_level(-3) == DEFAULT_PRIORITY
    assert priority_level(1) == 1  # the highest
    assert priority_level(1) < priority_level(2) < DEFAULT_PRIORITY


def test_capacity_counts_requests() -> None:
    queue = DeadlineQueue(2)
    queue.push(req("a", 1.0, rows=5))
    assert not queue.full
    queue.push(req("b", 2.0))
    assert queue.full
    queue.pop()
    assert not queue.full


def test_rows_are_accounted_through_push_pop_and_remove() -> None:
    queue = DeadlineQueue(10)
    a, b, c = req("a", 1.0, rows=3), req("b", 2.0, rows=4), req("c", 3.0, rows=5)
    for r in (a, b, c):
        queue.push(r)
    assert queue.rows == 12
    assert queue.pop() is a
    assert queue.rows == 9
    removed = queue.remove_if({id(c)})
    assert removed == [c]
    assert queue.rows == 4
    assert len(queue) == 1
    assert queue.peek() is b
    assert queue.remove_if({id(c)}) == []  # already gone: nothing changes
    assert queue.rows == 4


def test_remove_keeps_heap_order() -> None:
    queue = DeadlineQueue(10)
    requests = [req(str(i), float(d)) for i, d in enumerate([5, 1, 4, 2, 3, 6])]
    for r in requests:
        queue.push(r)
    queue.remove_if({id(requests[1]), id(requests[4])})  # deadlines 1 and 3
    assert drain(queue) == ["3", "2", "0", "5"]  # deadlines 2, 4, 5, 6


def test_empty_queue() -> None:
    queue = DeadlineQueue(1)
    assert queue.peek() is None
    assert len(queue) == 0
    assert queue.min_deadline() == float("inf")
    assert list(queue) == []


def test_rows_ahead_counts_what_orders_before_a_priority_and_deadline() -> None:
    queue = DeadlineQueue(10)
    for deadline, rows in [(1.0, 2), (3.0, 4), (2.0, 1)]:
        queue.push(req("r", deadline, rows=rows))
    assert queue.rows_ahead(DEFAULT_PRIORITY, 5.0) == 7  # later than all: every row
    assert queue.rows_ahead(DEFAULT_PRIORITY, 2.0) == 3  # ties count as ahead
    assert queue.rows_ahead(DEFAULT_PRIORITY, 0.5) == 0
    urgent = priority_level(1)
    assert urgent < DEFAULT_PRIORITY and queue.rows_ahead(urgent, 9.0) == 0
    queue.push(req("hi", 9.0, rows=5, priority=urgent))
    assert queue.rows_ahead(DEFAULT_PRIORITY, 0.5) == 5  # a higher priority runs first
    for _ in range(len(queue)):
        queue.pop()
    assert queue.rows_ahead(DEFAULT_PRIORITY, 0.1) == 0
    queue.push(req("late", 1.0, rows=3))  # emptied, then a new one: no stale bound
    assert queue.rows_ahead(DEFAULT_PRIORITY, 0.5) == 0
    assert queue.rows_ahead(DEFAULT_PRIORITY, 1.0) == 3
