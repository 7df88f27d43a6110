"""What the control layer knows of one inference request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Triton's priority levels: 1 is the highest; 0 (unset) means the default level.
DEFAULT_PRIORITY = 10


@dataclass(eq=False, slots=True)
class Request:
    """One request for one model: its rows, its deadline and how to answer it.

    `token` belongs to whoever submitted the request (the async driver keeps a future there);
    the scheduler never looks inside it. `then`, if set, is called with the token the moment
    the driver settles it (see `Controller.submit`).
    """

    model: str
    inputs: dict[str, np.ndarray]
    rows: int
    arrival: float
    deadline: float
    priority: int = DEFAULT_PRIORITY
    outputs: tuple[str, ...] | None = None
    token: Any = None
    then: Callable[[Any], None] | None = None
    attempts: int = 0
    seq: int = field(default=0)
    #: False for a cold run (the first after a load) whose duration must not shape estimates.
    measured: bool = True
    #: The transport's trace of this request (`api.tracing.Trace`), when tracing is on.
    trace: Any = None
    #: Count its outcome in its model's statistics when it is settled (a client's request,
    #: not a probe's; `Dispatcher` counts it, with no callback per request).
    counted: bool = False

    def sort_key(self) -> tuple[int, float, int]:
        return (self.priority, self.deadline, self.seq)


def priority_level(priority: int | None) -> int:
    """Triton's `priority` parameter as a sort level (lower runs first)."""
    return DEFAULT_PRIORITY if not priority or priority < 0 else int(priority)
