"""Refusing at once, before a request is decoded, what overload would make late.

Under open-loop overload the frontend (one thread) must read and answer every request: what
it serves and what it refuses. A refusal that costs nearly as much as a served request leaves
it no time to serve, its reads fall behind, and every request becomes stale (goodput
collapses). So the transport asks `quick_refusal` with what it knows before decoding a
request's tensors (its model, its deadline, how long it waited to be read), and answers a
refusal with a prepared 503. Three reasons, cheapest to tell first:

- `LATE`: it waited so long to be read that even one row cannot run before its deadline
  (one that could have, read at once);
- `BACKLOG`: since its model's queue last shrank, admission refused a request for the rows
  queued ahead, all of which are ahead of this one too, and this one has no more time
  (`backlog.Backlogs`);
- `SHED`: the frontend is behind (CoDel on its read wait, `FrontendLag`), and this request
  waited longer than the lag's share of its timeout, a share that shrinks the longer the
  frontend stays behind (CoDel's control law).

What is not refused here goes through admission as before; these are its shortcuts, not a
second policy, except `SHED`, which keeps the frontend's own queue short.
"""

from __future__ import annotations

from headway.control.admission.backlog import Backlog
from headway.control.admission.reasons import BACKLOG, LATE, SHED, Refusal

#: The frontend's read wait it tries to keep under (CoDel's target).
TARGET_S = 0.005
#: A request that waited less than this to be read is not looked at for `LATE` (unless the
#: frontend is shedding or its model is backlogged), so a frontend that keeps up does not read
#: every deadline twice: only a deadline shorter than one row's run plus this could be late,
#: and admission refuses those.
NOTICEABLE_WAIT_S = TARGET_S
#: How long the wait must stay above the target before shedding starts (CoDel's interval): a
#: busy neighbour that holds the frontend off its core for a moment is not overload.
INTERVAL_S = 0.05
#: Shedding that ended less than this long ago starts again as soon as the wait is above the
#: target (CoDel's memory of its last dropping state): overload comes back at once.
MEMORY_S = 1.0
#: When shedding starts, a request is refused if it waited more than this share of its own
#: timeout (and more than the target): a request with a generous deadline is not shed for a
#: short wait.
SHARE = 0.5
#: Each interval that shedding goes on halves the share, down to this one. A frontend behind
#: for longer than a stall must refuse more of what it reads, or its turns of reads stay as
#: long as the wait that sheds, and what it serves is late by the time it is answered.
MIN_SHARE = 0.125
#: With the inline engine a model's run holds the loop, and nothing is read while it runs.
#: A model whose full batch runs for more than this (half the target) makes waits of its
#: runs' length that no shedding shortens, so its requests are shed at SHARE however long
#: the frontend stays behind; a briefer model's turns of reads are what the waits are made
#: of, and harder shedding shortens them (bench/RESULTS.md, "The LR model inline, why its
#: frontend stays behind").
BRIEF_RUN_S = TARGET_S / 2


class FrontendLag:
    """CoDel on the frontend's read wait: whether it is shedding, from the waits it observes.

    Shedding starts once every request read for `interval` s waited longer than `target`
    (at once, if it last stopped within `memory` s), and stops at the first request read
    within the target. While it sheds, `share` (of a request's timeout, the wait above which
    it is shed) starts at SHARE and halves each `interval`, down to `min_share`: the longer the
    frontend stays behind, the harder it sheds (CoDel's control law); resumed within its
    memory, shedding goes on where it stopped, and the share keeps halving. Pure logic: `observe` is told the
    time. While `calm` (not shedding, no wait above the target since the last one within it),
    observing a wait within the target changes nothing, so the frontend need not ask."""

    __slots__ = (
        "_above_since",
        "_next_step",
        "_stopped_at",
        "calm",
        "interval",
        "memory",
        "min_share",
        "share",
        "shedding",
        "target",
    )

    def __init__(
        self,
        target: float = TARGET_S,
        interval: float = INTERVAL_S,
        memory: float = MEMORY_S,
        min_share: float = MIN_SHARE,
    ) -> None:
        self.target = target
        self.min_share = min_share
        self.interval = interval
        self.memory = memory
        self.shedding = False
        self.calm = True
        self._above_since: float | None = None  # when the wait last went above the target
        self._stopped_at = float("-inf")  # when shedding last stopped
        self._next_step = float("inf")  # when the share halves next, while shedding
        self.share = SHARE

    def observe(self, waited: float, now: float) -> bool:
        """A request read at `now` waited `waited` s: whether the frontend is shedding."""
        if waited <= self.target:
            if self.shedding:
                self.shedding = False
                self._stopped_at = now
            self._above_since = None
            self.calm = True
            return False
        self.calm = False
        if not self.shedding:
            if self._above_since is None:
                self._above_since = now
            if now - self._stopped_at >= self.memory:  # else overload is back: resume as it was
                if now - self._above_since < self.interval:
                    return False
                self.share = SHARE
                self._next_step = now + self.interval
            self.shedding = True
        if now >= self._next_step:
            self.share = max(self.min_share, self.share / 2)
            self._next_step = now + self.interval
        return True


def read_too_late(left: float, timeout: float, service: float | None) -> bool:
    """Whether a request with `left` s to its deadline once read, of `timeout` s from its
    arrival, cannot run even one row (`service`: its predicted seconds, None: not known yet).
    One whose deadline was too short even read at once is not: admission refuses it, and says
    so."""
    return left <= 0 or (service is not None and left < service <= timeout)


def quick_refusal(
    *,
    waited: float,
    timeout: float,
    service: float | None,
    deadline: float,
    backlog: Backlog,
    shedding: bool,
    share: float = SHARE,
    target: float = TARGET_S,
) -> Refusal | None:
    """Why a request read `waited` s after it arrived, with `timeout` s from arrival to its
    `deadline`, is refused before it is decoded (`LATE`, `BACKLOG`, `SHED`), or None.

    `service`: the predicted seconds to run one row of its model (None: not known yet);
    `backlog`: what its model's queued work cannot meet (`Backlogs.of`);
    `shedding`: the frontend is behind (`FrontendLag`), and sheds a request that waited more
    than `share` of its timeout."""
    left = timeout - waited
    if read_too_late(left, timeout, service):
        return LATE
    if deadline >= backlog.floor and (deadline <= backlog.until or left <= backlog.left):
        return BACKLOG
    if shedding and waited > target and waited > share * timeout:
        return SHED
    return None
