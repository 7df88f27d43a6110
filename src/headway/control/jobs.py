"""A job: one unit of work the scheduler queues, batches and sends, until it is answered.

A client's admitted request becomes one job; so does each measuring run (warm-up runs,
probes), which no client asked for. Unlike the request it comes from (`request.py`, read-only,
the caller's), a job is the scheduler's and changes as it goes: its place in the queue, its
attempts after a worker died, and its receiver, taken when it is answered or withdrawn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from headway.control.request import DEFAULT_PRIORITY, Receiver


class Job:
    """One job for one model (its key, `name@version`): its rows, its deadline and where its
    answer goes (`receiver`; None once answered, failed or withdrawn: it is answered at most
    once).

    A plain class, not a dataclass: one is made per request, and a dataclass's generated
    `__init__` is interpreted even where this module is compiled (`headway.speedups`).
    """

    __slots__ = (
        "arrival",
        "attempts",
        "counted",
        "deadline",
        "inputs",
        "measured",
        "measuring",
        "model",
        "outputs",
        "priority",
        "receiver",
        "rows",
        "seq",
        "stream",
        "trace",
    )

    def __init__(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        rows: int,
        arrival: float,
        deadline: float,
        priority: int = DEFAULT_PRIORITY,
        outputs: tuple[str, ...] | None = None,
        receiver: Receiver | None = None,
        attempts: int = 0,
        seq: int = 0,
        measured: bool = True,
        trace: Any = None,
        counted: bool = False,
        measuring: bool = False,
        stream: bool = False,
    ) -> None:
        self.model = model
        self.inputs = inputs
        self.rows = rows
        self.arrival = arrival
        self.deadline = deadline
        self.priority = priority
        self.outputs = outputs
        self.receiver = receiver
        self.attempts = attempts
        self.seq = seq
        #: False for a cold run (the first after a load) whose duration must not shape
        #: estimates.
        self.measured = measured
        #: The transport's trace of this request (`api.tracing.Trace`), when tracing is on.
        self.trace = trace
        #: Count its outcome in its model's statistics when it is settled (a client's
        #: request, not a measuring run's; the relay counts it, with no callback per job).
        self.counted = counted
        #: A measuring run (warm-up, a sweep's batch, a probe): no client asked for it, so
        #: its model's statistics count it apart from the traffic.
        self.measuring = measuring
        #: Its receiver takes each part of a streamed answer as it comes (`Receiver.part`);
        #: False: a streaming model's parts are gathered into one answer.
        self.stream = stream

    def __repr__(self) -> str:
        return (
            f"Job(model={self.model!r}, rows={self.rows}, arrival={self.arrival}, "
            f"deadline={self.deadline}, priority={self.priority}, seq={self.seq})"
        )
