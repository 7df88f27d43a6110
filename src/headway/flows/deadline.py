"""A query's deadline across its whole flow.

A flow application's `slo_ms` bounds the whole query, not each model call: every call a stage
makes is given the time left until the query's deadline (so a two-stage cascade with a 100 ms
SLO cannot take 200 ms), and a call that has no time left is not made. A query that cannot
make its deadline is answered with the application's default output, flagged `default`, at the
deadline at the latest (`FlowApplication` cuts the run off on the controller's clock).
"""

from __future__ import annotations

from dataclasses import dataclass

from headway.clock import Clock
from headway.errors import DeadlineUnmeetable


class FlowDeadlinePassed(DeadlineUnmeetable):
    """The query's deadline passed before one of its stages could be asked."""


@dataclass(slots=True)
class QueryDeadline:
    """When one query must be answered (`at`, on `clock`), from its arrival and the app's SLO."""

    clock: Clock
    at: float
    slo_ms: float

    @classmethod
    def starting(cls, clock: Clock, started: float, slo_ms: float) -> QueryDeadline:
        return cls(clock, started + slo_ms / 1000.0, slo_ms)

    def remaining(self, where: str) -> float:
        """Seconds left for a call made now by `where`; FlowDeadlinePassed when none are."""
        left = self.at - self.clock.now()
        if left <= 0.0:
            raise FlowDeadlinePassed(
                f"the flow's deadline ({self.slo_ms:g} ms) passed before {where} could run"
            )
        return left


def explanation(error: DeadlineUnmeetable | None, slo_ms: float) -> str:
    """Why a query got the default output (the answer's `default_explanation`)."""
    if error is None:
        return f"the flow did not finish within its deadline ({slo_ms:g} ms)"
    return f"the flow cannot finish within its deadline ({slo_ms:g} ms): {error.message}"
