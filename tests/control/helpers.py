"""What the scheduler's hand-worked tests share: times in milliseconds, seeded estimates and
requests tagged so a dispatch shows which ones it carries."""

from __future__ import annotations

import numpy as np

from headway.clock import ManualClock
from headway.control.actions import Dispatch
from headway.control.request import DEFAULT_PRIORITY, Request
from headway.control.scheduler import Scheduler


def ms(value: float) -> float:
    return value / 1000.0


def seed(s: Scheduler, model: str, table: dict[int, float]) -> None:
    """Three measurements of each batch size: enough for the model to count as profiled."""
    for size, seconds in table.items():
        for _ in range(3):
            s.estimator.observe(model, size, seconds)


def request(
    clock: ManualClock,
    tag: str,
    deadline_in: float,
    model: str = "m",
    *,
    rows: int = 1,
    priority: int = DEFAULT_PRIORITY,
) -> Request:
    """A request arriving now, due `deadline_in` seconds from now, whose token is `tag`."""
    now = clock.now()
    inputs = {"x": np.zeros((rows, 1), np.float32)}
    return Request(model, inputs, rows, now, now + deadline_in, priority, token=tag)


def tags(dispatch: Dispatch) -> list[str]:
    return [r.token for r in dispatch.requests]
