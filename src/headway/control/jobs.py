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
        "made",
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
        #: The parts its receiver took so far (a stream; a sequence counts every part): once
        #: it has one, a worker's death fails it rather than run it again (they would repeat).
        self.made = 0

    def __repr__(self) -> str:
        return (
            f"Job(model={self.model!r}, rows={self.rows}, arrival={self.arrival}, "
            f"deadline={self.deadline}, priority={self.priority}, seq={self.seq})"
        )


def input_units(inputs: dict[str, np.ndarray]) -> int:
    """The size of a sequence's inputs, as a step's prefill reads them: a text's bytes (or
    characters), a number tensor's elements."""
    units = 0
    for array in inputs.values():
        if array.dtype.kind in "OSU":
            units += sum(len(value) for value in array.flat)
        else:
            units += int(array.size)
    return units


class Sequence(Job):
    """One sequence of a generative model (docs/streams.md): a client's request of one row
    whose answer a worker makes one part per step, keeping its state between steps.

    Its `deadline` bounds its first part; `tpot` (seconds; None: no target) each part after
    it: part k (from 0) is due `k * tpot` after the first, so a stream ahead of its schedule
    has slack for a slower step. `cap` is the most parts it makes, `units` the size of its
    inputs (what its first step, the prefill, reads). Until a step starts it (`worker`, -1
    before) it waits in its model's queue."""

    __slots__ = (
        "cap",
        "first_at",
        "gathered",
        "last_at",
        "number",
        "parameters",
        "promised",
        "stopping",
        "tpot",
        "units",
        "worker",
    )

    def __init__(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        arrival: float,
        deadline: float,
        *,
        number: int,
        cap: int,
        units: int,
        tpot: float | None = None,
        parameters: dict[str, Any] | None = None,
        priority: int = DEFAULT_PRIORITY,
        outputs: tuple[str, ...] | None = None,
        receiver: Receiver | None = None,
        stream: bool = False,
        measured: bool = True,
        counted: bool = False,
        measuring: bool = False,
    ) -> None:
        super().__init__(
            model,
            inputs,
            1,
            arrival,
            deadline,
            priority,
            outputs,
            receiver,
            measured=measured,
            counted=counted,
            measuring=measuring,
            stream=stream,
        )
        self.number = number
        self.cap = cap
        self.units = units
        self.tpot = tpot
        self.parameters = parameters
        #: The worker holding its state (-1: waiting to start), the parts it made, when its
        #: first and latest came, and whether it is to be stopped at the next step (withdrawn).
        self.worker = -1
        self.first_at: float | None = None
        self.last_at = 0.0
        self.stopping = False
        #: When admission predicted its first part, when it had to wait for a slot (None:
        #: one was free): what it took instead teaches admission its margin.
        self.promised: float | None = None
        #: Its parts so far, for a request that takes its answer whole (`Job.stream` False).
        self.gathered: list[dict[str, np.ndarray]] | None = None

    @property
    def context(self) -> int:
        """Its length now: its inputs' units and the parts made after them."""
        return self.units + self.made

    def due(self) -> float:
        """When its next part is due: its first by its deadline, each later one `tpot` after
        the schedule's previous (infinity without a per-part target)."""
        if self.first_at is None:
            return self.deadline
        if self.tpot is None:
            return float("inf")
        return self.first_at + self.made * self.tpot

    def __repr__(self) -> str:
        return (
            f"Sequence(model={self.model!r}, number={self.number}, made={self.made}, "
            f"worker={self.worker}, deadline={self.deadline}, priority={self.priority})"
        )
