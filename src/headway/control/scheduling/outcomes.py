"""What an ended action teaches the scheduler.

Every action a worker runs comes back with the seconds it took, and each such measurement
keeps current what the next decisions rest on (Clockwork's durations, refined by the actions
themselves): a LOAD's duration the load estimates; an INFER's the model's service-time
estimates (when every request in it was measured), the RPC overhead (the round trip less the
worker's time; inline, the turn of reads between two runs instead), and the baseline's AIMD
batch size (a batch that met every deadline grows it, a late one shrinks it).
"""

from __future__ import annotations

from collections.abc import Mapping

from headway.control.actions import INFER, LOAD, Dispatch
from headway.control.estimates.durations import Durations
from headway.control.placement.slots import ModelSlot


def learn(
    dispatch: Dispatch,
    duration: float,
    now: float,
    *,
    durations: Durations,
    models: Mapping[str, ModelSlot],
    inline_waiting: bool | None = None,
    first: float | None = None,
) -> bool:
    """Fold the measured `duration` (s) of `dispatch`, ended at `now`, into the estimates and
    its model's batch counts. True when a LOAD changed the estimate for never-loaded models
    (the cold starts waiting on it must be weighed again). `inline_waiting`: the INFER ran on
    the event loop (inline), and work waited when it ended (`Durations.observe_inline_run`);
    None: it ran on a worker process. `first`: a streamed INFER's seconds to its first part,
    what its deadlines bound and so what its estimates predict (its whole run is `duration`)."""
    if dispatch.kind == LOAD:
        return durations.observe_load(dispatch.model, duration)
    if dispatch.kind == INFER:
        if all(r.measured for r in dispatch.requests):
            durations.estimator.observe(
                dispatch.model, dispatch.rows, duration if first is None else first
            )
        if inline_waiting is not None:
            durations.observe_inline_run(
                dispatch.worker, dispatch.sent_at, now - duration, now, waiting=inline_waiting
            )
        else:
            # from when it could start: one sent ahead waited for the batch before it, which
            # is that batch's run, not the round trip every prediction adds
            durations.observe_round_trip(now - dispatch.startable_at - duration, now)
        model = models.get(dispatch.model)
        if model is not None:
            model.finished_at = now
            answered = now if dispatch.first_part_at is None else dispatch.first_part_at
            met = all(answered <= r.deadline for r in dispatch.requests)
            model.aimd.on_batch(met_deadlines=met)
            model.batches += 1
            model.late_batches += not met
    return False
