"""Admission at submit: refuse at once a request that cannot be served in time.

Rejecting at arrival answers the client while it can still go elsewhere, and keeps hopeless
work out of the queues (Clockwork's early rejection). A full queue is refused first
(`Overloaded`); then, with early rejection, the checks the predictions allow, cheapest first:
the request alone, then (for a model no worker holds) the load before it, then the wait for a
worker busy with another action, with the rows queued ahead of it (`Backlogged`, whose
refusal the frontend then applies to later requests unread: `backlog.Backlogs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from headway.control.actions import LOAD, Tally
from headway.control.admission.backlog import Backlogs
from headway.control.admission.reasons import REJECTED_AT_ADMISSION
from headway.control.estimates.durations import Durations
from headway.control.jobs import Job
from headway.control.placement.slots import ModelSlot, Placement, WorkerSlot
from headway.errors import Backlogged, ColdStartTooSlow, DeadlineUnmeetable, Overloaded


class Admission:
    """Decides whether a job joins its model's queue (see the module docstring): the queue's
    bound always, its deadline with `early_reject`. A model no worker holds, with
    `demand_loading`, is a cold start: counted, and its load weighed."""

    def __init__(
        self,
        durations: Durations,
        placement: Placement,
        backlogs: Backlogs,
        tally: Tally,
        *,
        early_reject: bool,
        demand_loading: bool,
    ) -> None:
        self.durations = durations
        self.placement = placement
        self.backlogs = backlogs
        self._count = tally.count
        self.early_reject = early_reject
        self.demand_loading = demand_loading

    def admit(self, model: ModelSlot, job: Job, now: float) -> float | None:
        """Admit `job` to `model`'s queue at `now`, or raise at once: Overloaded (queue full),
        DeadlineUnmeetable (counted, and a Backlogged one kept for later requests) or
        ColdStartTooSlow. Returns its predicted seconds alone (None: not asked, or no estimate
        yet), which its drop time in the queue counts from too (`DropTimes.pushed`)."""
        queue = model.queue
        if queue.full:
            raise Overloaded(
                f"model {job.model!r}: queue is full ({queue.capacity} requests); "
                "retry later or add replicas"
            )
        cold = self.demand_loading and not model.replicas
        if cold:
            self._count(job.model, "cold_starts")
        if not self.early_reject:
            return None
        placement, durations = self.placement, self.durations
        try:
            return admit(
                model,
                job,
                now=now,
                durations=durations,
                cold=cold,
                load_wait=lambda: load_wait(model, placement.workers, durations, now),
                busy_wait=placement.busy_wait,
            )
        except DeadlineUnmeetable as exc:
            self._count(job.model, REJECTED_AT_ADMISSION, exc.reason)
            if isinstance(exc, Backlogged):
                # behind only this model's work, the wait does not shrink as time passes;
                # inline, nothing ahead runs while the loop reads, so no wait does
                alone = placement.inline or placement.busy_wait(model, now, own=False) == 0.0
                self.backlogs.refused(model, job, now, alone=alone)
            raise


def admit(
    model: ModelSlot,
    request: Job,
    *,
    now: float,
    durations: Durations,
    cold: bool,
    load_wait: Callable[[], float],
    busy_wait: Callable[[ModelSlot, float], float] = lambda model, now: 0.0,
) -> float | None:
    """Raise DeadlineUnmeetable or ColdStartTooSlow if `request` cannot make its deadline
    (Backlogged, a DeadlineUnmeetable, when it could alone but not behind what is ahead).
    Returns the request's predicted seconds alone (None: no estimate yet), which its drop time
    in the queue counts from too (`DropTimes.pushed`).

    `cold`: the model must be loaded first; `load_wait()` is then the predicted wait for that.
    `busy_wait(model, now)`: the predicted seconds until a worker holding the model is free (a
    long action of another model on it is known at arrival: waiting for it to pass is pointless).
    """
    service = durations.service_time(request.model, request.rows)
    left = request.deadline - now
    if 0 < left < (service or 0.0) and durations.forget_stale_round_trips(now):
        service = durations.service_time(request.model, request.rows)  # without old ones
    if left <= 0 or (service is not None and service > left):
        need = f"needs ~{service * 1e3:.2f} ms" if service is not None else "is already late"
        raise DeadlineUnmeetable(
            f"model {request.model!r}: deadline cannot be met: the request {need}, "
            f"{max(left, 0) * 1e3:.2f} ms left; raise the timeout or slo_ms"
        )
    if cold:
        # Only now: a request that could not make it even were the model loaded is not a
        # cold start too slow, and must not be told so.
        load = load_wait()
        if load + (service or 0.0) > left:
            raise ColdStartTooSlow(
                f"model {request.model!r}: deadline cannot be met: the model is not loaded "
                f"and loading it takes ~{load * 1e3:.0f} ms; {max(left, 0) * 1e3:.1f} ms left"
            )
    if service is None or not model.replicas:
        return service
    why = behind(
        model,
        rows=request.rows,
        priority=request.priority,
        deadline=request.deadline,
        now=now,
        service=service,
        durations=durations,
        busy=busy_wait(model, now),
    )
    if why is not None:
        raise Backlogged(f"model {request.model!r}: deadline cannot be met: {why}")
    return service


def behind(
    model: ModelSlot,
    *,
    rows: int,
    priority: int,
    deadline: float,
    now: float,
    service: float,
    durations: Durations,
    busy: float,
) -> str | None:
    """Why a request of `rows` rows (`service`: their predicted seconds) cannot make
    `deadline` behind the work ahead of it on a loaded `model` (`busy`: the predicted wait for
    a worker holding it), or None if it can. Admission's check, and, for a request not yet
    decoded, the frontend's with one row, the least it can hold (`UnreadRefusals.behind`)."""
    left = deadline - now
    if busy + service > left:
        return (
            f"its worker is busy for ~{busy * 1e3:.1f} ms more, and the request needs "
            f"~{service * 1e3:.2f} ms; {left * 1e3:.1f} ms left"
        )
    if model.queue.rows:
        # Only the rows that run before this request delay it, and they run batched with
        # it. All queued rows bound them; count exactly only when that bound does not fit.
        finish = _finish_time(model, durations, model.queue.rows + rows)
        if finish is not None and busy + finish > left:
            ahead = model.queue.rows_ahead(priority, deadline)
            finish = _finish_time(model, durations, ahead + rows) if ahead else service
            if finish is not None and busy + finish > left:
                return (
                    f"{ahead} rows queued ahead; with them it needs "
                    f"~{(busy + finish) * 1e3:.1f} ms, {left * 1e3:.1f} ms left"
                )
    return None


def _finish_time(model: ModelSlot, durations: Durations, rows: int) -> float | None:
    return durations.finish_time(model.key, rows, model.max_batch, len(model.replicas))


def load_wait(
    model: ModelSlot, workers: Mapping[int, WorkerSlot], durations: Durations, now: float
) -> float:
    """Seconds until `model` could run somewhere: 0 if placed, else the rest of a load."""
    if model.replicas:
        return 0.0
    ends = [
        d.earliest + (d.expected or 0.0)
        for w in model.loading
        for d in workers[w].inflight
        if d.kind == LOAD and d.model == model.key
    ]
    if ends:
        return max(0.0, min(ends) - now)
    return durations.load_time(model.key) or 0.0
