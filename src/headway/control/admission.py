"""Admission: reject at once a request that the predictions say cannot meet its deadline.

Rejecting at arrival answers the client while it can still go elsewhere, and keeps hopeless
work out of the queues (Clockwork's early rejection). Checks, cheapest first: the request alone,
then (for a model no worker holds) the load before it, then the wait for a worker busy with
another action, with the rows queued ahead of it.
"""

from __future__ import annotations

from collections.abc import Callable

from headway.control.jobs import Job
from headway.control.predictions import Predictions
from headway.control.slots import ModelSlot
from headway.errors import Backlogged, ColdStartTooSlow, DeadlineUnmeetable


def admit(
    model: ModelSlot,
    request: Job,
    *,
    now: float,
    predictions: Predictions,
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
    service = predictions.service_time(request.model, request.rows)
    left = request.deadline - now
    if 0 < left < (service or 0.0) and predictions.forget_stale_round_trips(now):
        service = predictions.service_time(request.model, request.rows)  # without old ones
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
        predictions=predictions,
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
    predictions: Predictions,
    busy: float,
) -> str | None:
    """Why a request of `rows` rows (`service`: their predicted seconds) cannot make
    `deadline` behind the work ahead of it on a loaded `model` (`busy`: the predicted wait for
    a worker holding it), or None if it can. Admission's check, and, for a request not yet
    decoded, the frontend's with one row, the least it can hold (`Scheduler.refuses_unread`)."""
    left = deadline - now
    if busy + service > left:
        return (
            f"its worker is busy for ~{busy * 1e3:.1f} ms more, and the request needs "
            f"~{service * 1e3:.2f} ms; {left * 1e3:.1f} ms left"
        )
    if model.queue.rows:
        # Only the rows that run before this request delay it, and they run batched with
        # it. All queued rows bound them; count exactly only when that bound does not fit.
        finish = _finish_time(model, predictions, model.queue.rows + rows)
        if finish is not None and busy + finish > left:
            ahead = model.queue.rows_ahead(priority, deadline)
            finish = _finish_time(model, predictions, ahead + rows) if ahead else service
            if finish is not None and busy + finish > left:
                return (
                    f"{ahead} rows queued ahead; with them it needs "
                    f"~{(busy + finish) * 1e3:.1f} ms, {left * 1e3:.1f} ms left"
                )
    return None


def _finish_time(model: ModelSlot, predictions: Predictions, rows: int) -> float | None:
    return predictions.finish_time(model.key, rows, model.max_batch, len(model.replicas))
