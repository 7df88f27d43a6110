"""Every reason a request is refused before it runs, named once.

A refusal is counted where it is made, in the scheduler's tally (`actions.Counters`) and in
`/metrics` (`headway_<stage>_total{model, reason}`), and the client is told why:

- before its tensors are decoded (`REFUSED_UNREAD`, `unread.UnreadRefusals`): a `Refusal`,
  `LATE`, `BACKLOG` or `SHED` (`overload` says when);
- when it is submitted (`REJECTED_AT_ADMISSION`, `admit.Admission`): its queue is full
  (`Overloaded`), its deadline cannot be met alone or behind the work ahead
  (`DeadlineUnmeetable`, `Backlogged`), or its model must load first and loading takes too
  long (`ColdStartTooSlow`);
- while it is queued (`DROPPED`, `drops`): its deadline can no longer be met (the same two
  errors).

The error's `reason` (`headway.errors`) is what a model's statistics count it under. After
these, one guard remains outside admission: a worker refuses an INFER that reaches it after its
latest start (`REFUSED_BY_WORKER`, `runtime.worker`), and its requests go back to the queue,
where the next poll drops those that can no longer make it.
"""

from __future__ import annotations

from typing import Final, final

from headway.errors import DeadlineUnmeetable, HeadwayError, Shed

#: Where a request is refused: each a counter of the scheduler's tally and a /metrics family.
REFUSED_UNREAD = "refused_unread"
REJECTED_AT_ADMISSION = "rejected_at_admission"
DROPPED = "dropped"
#: A worker's refusal of an INFER that reached it too late to start (its requests requeued).
REFUSED_BY_WORKER = "refusals"


@final
class Refusal:
    """One reason a request is refused before it is decoded: its name (the `reason` label of
    `/metrics`' `headway_refused_unread` and of REST's answer), the error a caller raises for
    it, and what the client is told."""

    __slots__ = ("error", "reason", "why")

    def __init__(self, reason: str, error: type[HeadwayError], why: str) -> None:
        self.reason: Final = reason
        self.error: Final = error
        #: The message after the model's name; `{waited}` is how long the request waited.
        self.why: Final = why

    def message(self, model: str, waited: float | None = None) -> str:
        """What a client refused for this reason is told (REST's `error`, gRPC's message);
        `waited`: how long the request waited to be read, when the answer may say it."""
        wait = "too long" if waited is None else f"{waited * 1e3:.1f} ms"
        return f"model {model!r}: " + self.why.replace("{waited}", wait)

    def refuse(self, model: str, waited: float | None = None) -> HeadwayError:
        """The error that says so (`DeadlineUnmeetable`, or `Shed`)."""
        return self.error(self.message(model, waited))

    def __repr__(self) -> str:
        return f"Refusal({self.reason!r})"


#: It waited so long to be read that even one row cannot run before its deadline.
LATE = Refusal(
    "late",
    DeadlineUnmeetable,
    "deadline cannot be met: the request waited {waited} to be read (the server is "
    "overloaded); retry with backoff, or raise the timeout or slo_ms",
)
#: The work queued ahead of it refused a request due no earlier, since it last shrank.
BACKLOG = Refusal(
    "backlog",
    DeadlineUnmeetable,
    "deadline cannot be met: the work queued ahead of it would make it late (the model is "
    "overloaded); retry with backoff, or raise the timeout or slo_ms",
)
#: The frontend is behind reading, and this request waited longest.
SHED = Refusal(
    "shed",
    Shed,
    "refused at once: the server is behind reading requests (overloaded) and refuses those "
    "that waited longest; retry with backoff",
)
REFUSALS = (LATE, BACKLOG, SHED)
