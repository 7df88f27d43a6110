"""What the control layer knows of one inference request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: Triton's priority levels: 1 is the highest; 0 (unset) means the default level.
DEFAULT_PRIORITY = 10


class Request:
    """One request for one model: its rows, its deadline and how to answer it.

    `token` belongs to whoever submitted the request (the async driver keeps a future there);
    the scheduler never looks inside it. `then`, if set, is called with the token the moment
    the driver settles it (see `Controller.submit`).

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
        "model",
        "outputs",
        "priority",
        "rows",
        "seq",
        "then",
        "token",
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
        token: Any = None,
        then: Callable[[Any], None] | None = None,
        attempts: int = 0,
        seq: int = 0,
        measured: bool = True,
        trace: Any = None,
        counted: bool = False,
    ) -> None:
        self.model = model
        self.inputs = inputs
        self.rows = rows
        self.arrival = arrival
        self.deadline = deadline
        self.priority = priority
        self.outputs = outputs
        self.token = token
        self.then = then
        self.attempts = attempts
        self.seq = seq
        #: False for a cold run (the first after a load) whose duration must not shape
        #: estimates.
        self.measured = measured
        #: The transport's trace of this request (`api.tracing.Trace`), when tracing is on.
        self.trace = trace
        #: Count its outcome in its model's statistics when it is settled (a client's
        #: request, not a probe's; `Dispatcher` counts it, with no callback per request).
        self.counted = counted

    def __repr__(self) -> str:
        return (
            f"Request(model={self.model!r}, rows={self.rows}, arrival={self.arrival}, "
            f"deadline={self.deadline}, priority={self.priority}, seq={self.seq})"
        )

    def sort_key(self) -> tuple[int, float, int]:
        return (self.priority, self.deadline, self.seq)


def priority_level(priority: int | None) -> int:
    """Triton's `priority` parameter as a sort level (lower runs first)."""
    return DEFAULT_PRIORITY if not priority or priority < 0 else int(priority)
