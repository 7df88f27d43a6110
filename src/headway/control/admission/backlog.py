"""What admission's refusals for the work queued ahead of a model say of the requests after them.

When admission refuses a request for the rows queued ahead of it (`Backlogged`), every later
request of one row and the default priority, due no earlier than all that work and with no
more time, would be refused the same way while that work only grows. The frontend refuses
those before decoding them (`overload.BACKLOG`), and the summary is dropped the moment the
work ahead may have shrunk: an action sent or ended, a request withdrawn or dropped, a
placement changed (each moves the `epoch` on).
"""

from __future__ import annotations

from typing import NamedTuple

from headway.control.jobs import Job
from headway.control.placement.slots import ModelSlot
from headway.control.request import DEFAULT_PRIORITY


class Backlog(NamedTuple):
    """What admission's refusals for the work queued ahead of a model say of a new one-row
    request of the default priority (`Backlogs.of`): it cannot make its deadline if it is due
    no earlier than `floor` (all that work is ahead of it) and either due no later than
    `until`, or, with no other model's action ahead, left no more time than `left`."""

    floor: float
    until: float
    left: float


NO_BACKLOG = Backlog(float("inf"), float("-inf"), float("-inf"))


class Backlogs:
    """Each model's `Backlog`, kept within the epoch it was found in (see the module
    docstring)."""

    __slots__ = ("_kept", "epoch", "refused_in")

    def __init__(self) -> None:
        #: Moves on whenever work ahead of a new request may have shrunk (`shrank`).
        self.epoch = 0
        #: The epoch in which admission last refused a request for the work ahead of it (any
        #: model's): while it is not `epoch`, every model's backlog is NO_BACKLOG.
        self.refused_in = -1
        self._kept: dict[str, tuple[int, Backlog]] = {}

    def shrank(self) -> None:
        """The work ahead of a new request may have shrunk: what was refused says nothing now."""
        self.epoch += 1

    @property
    def current(self) -> bool:
        """Whether some model's queued work refused a request since it last shrank (the
        frontend must then screen what it reads)."""
        return self.refused_in == self.epoch

    def of(self, key: str) -> Backlog:
        """What the work queued for `key` now cannot meet, as admission found (`Backlogged`)
        since that work last shrank: a one-row request of the default priority due no earlier
        than everything then queued (`floor`), and due no later than a refused one (`until`)
        or, behind only this model's work, with no more time left than a refused one had
        (`left`). Within an epoch the work ahead only grows, and a worker's wait on another
        model only shrinks as fast as the time left, so such a request is refused the same
        way; the frontend asks before decoding it (`overload.quick_refusal`)."""
        kept = self._kept.get(key)
        if kept is None or kept[0] != self.epoch:
            return NO_BACKLOG
        return kept[1]

    def refused(self, model: ModelSlot, job: Job, now: float, *, alone: bool) -> None:
        """Admission refused `job` for the work ahead of it on `model`: keep what the same work
        refuses, when every queued row was ahead of it (`floor`). `alone`: behind only this
        model's work, whose wait does not shrink as time passes (then `left` counts too)."""
        floor = _floor(model, job)
        if floor is None:
            return
        deadline, left = job.deadline, job.deadline - now if alone else float("-inf")
        kept = self._kept.get(model.key)
        if kept is not None and kept[0] == self.epoch:
            known = kept[1]
            floor = max(floor, known.floor)
            deadline, left = max(known.until, deadline), max(known.left, left)
        self._kept[model.key] = self.epoch, Backlog(floor, deadline, left)
        self.refused_in = self.epoch

    def forget(self, key: str) -> None:
        self._kept.pop(key, None)


def _floor(model: ModelSlot, job: Job) -> float | None:
    """For a job admission refused for the work ahead of it: the deadline of the last queued
    job (-inf: none queued), when that job is one row of the default priority due no earlier
    than anything queued (so every queued row was ahead of it); else None: what it was
    refused for says nothing of others."""
    if job.priority != DEFAULT_PRIORITY or job.rows != 1:
        return None
    last = model.queue.last
    if last is None:
        return float("-inf")
    if last[0] > DEFAULT_PRIORITY or (last[0] == DEFAULT_PRIORITY and last[1] > job.deadline):
        return None  # queued work after it: it did not wait behind all of it
    return last[1] if last[0] == DEFAULT_PRIORITY else float("-inf")
