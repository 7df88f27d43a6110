"""Scheduling policies: Headway's (Clockwork's) and a baseline in Clipper's manner.

One scheduler implements both, so an experiment compares policies, not code bases.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulingPolicy:
    """The choices that distinguish one scheduling discipline from another.

    - `early_reject`: reject at admission what cannot meet its deadline and drop queued
      requests as soon as they cannot; without it every request runs, however late.
    - `deadline_order`: queues ordered by (priority, deadline); otherwise by arrival (FIFO).
    - `profile_batching`: batch sizes from measured profiles; otherwise AIMD alone.
    - `idle_first_eviction`: evict models with nothing queued before busy ones (each group
      least recently used first); otherwise plain LRU.
    - `feasible_loads_only`: load a model only when its most urgent request can still make its
      deadline after the load; otherwise load on any request.
    - `schedule_ahead`: seconds of predicted work a worker may have queued behind the action
      it is running (0: one action in flight per worker).
    - `full_batches_ahead`: a busy worker is sent its next batch before it is free when that
      batch is full (waiting would add nothing to it), so it never waits for the frontend to
      hear its answer and send the next one; off, a worker waits for that turn.
    """

    name: str = "headway"
    early_reject: bool = True
    deadline_order: bool = True
    profile_batching: bool = True
    idle_first_eviction: bool = True
    feasible_loads_only: bool = True
    schedule_ahead: float = 0.0
    full_batches_ahead: bool = True


HEADWAY = SchedulingPolicy()
CLIPPER = SchedulingPolicy(
    name="clipper",
    early_reject=False,
    deadline_order=False,
    profile_batching=False,
    idle_first_eviction=False,
    feasible_loads_only=False,
    full_batches_ahead=False,
)
POLICIES = {policy.name: policy for policy in (HEADWAY, CLIPPER)}
