"""The message that tells a worker to run an action: a JSON-able header and its tensors.

A batch of several requests travels as one tensor per input (their rows concatenated) and asks
for the union of the outputs its requests want; the controller slices the answer back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from headway.control.actions import INFER, LOAD, STEP, Dispatch, StepPlan
from headway.control.engine import Action, Message, Tensors
from headway.control.jobs import Job, Sequence


def message(dispatch: Dispatch, config: dict[str, Any] | None = None) -> Message:
    """The header and tensors of `dispatch`; `config` is the model's wire config (LOAD)."""
    header: Action = {"op": dispatch.kind, "id": dispatch.id, "model": dispatch.model}
    tensors: Tensors = {}
    if dispatch.kind == INFER:
        header["rows"] = dispatch.rows
        requests = dispatch.requests
        header["outputs"] = union_outputs(requests)
        if len(requests) == 1:
            tensors = requests[0].inputs
        else:
            tensors = {
                name: np.concatenate([r.inputs[name] for r in requests])
                for name in requests[0].inputs
            }
        if dispatch.latest is not None:
            header["latest"] = dispatch.latest
    elif dispatch.kind == STEP:
        plan = dispatch.payload
        assert isinstance(plan, StepPlan)
        starting = dispatch.requests
        header["start"] = [_start(s) for s in starting]
        header["stop"] = plan.stops
        header["run"] = [s.number for s in plan.run]
        header["rows"] = len(starting)
        if len(starting) == 1:
            tensors = starting[0].inputs
        elif starting:
            tensors = {
                name: np.concatenate([r.inputs[name] for r in starting])
                for name in starting[0].inputs
            }
    elif dispatch.kind == LOAD:
        header["config"] = config
        header["evict"] = dispatch.evict
    return header, tensors


def _start(job: Job) -> list[Any]:
    """How a STEP names a sequence it starts: [number, parameters, cap]."""
    assert isinstance(job, Sequence)
    return [job.number, job.parameters, job.cap]


def union_outputs(requests: list[Job]) -> list[str] | None:
    """The outputs a batch must compute: every one asked for (None: one request wants all)."""
    wanted: set[str] = set()
    for request in requests:
        if request.outputs is None:
            return None
        wanted.update(request.outputs)
    return sorted(wanted)
