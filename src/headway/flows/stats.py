"""What each operator of a deployed flow did: calls, rows in and out, time running and queued.

An operator's running time is measured where it runs (a worker's action reports each fused
member's share of the batch; the frontend times its own operators). A stage's queued time is
the rest of its wall time (waiting in the model's queue, travelling to the worker and back),
counted on the stage's first operator. `branch` probabilities (rows out of an operator over
rows in) are what a planner needs of filters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headway.apps.records import Latencies
from headway.control.model_stats import LATENCY_BUCKETS, Histogram
from headway.flows.calls import RaceStats
from headway.flows.plan import FlowPlan


@dataclass
class OperatorStats:
    operator: str
    stage: str
    calls: int = 0
    rows_in: int = 0
    rows_out: int = 0
    errors: int = 0
    queued_s: float = 0.0
    running_s: float = 0.0
    latency: Latencies = field(default_factory=Latencies)
    histogram: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))

    def observe(self, rows_in: int, rows_out: int, running: float) -> None:
        self.calls += 1
        self.rows_in += rows_in
        self.rows_out += rows_out
        self.running_s += running
        self.latency.observe(running)
        self.histogram.observe(running)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operator": self.operator,
            "stage": self.stage,
            "calls": self.calls,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "errors": self.errors,
            "selectivity": self.rows_out / self.rows_in if self.rows_in else None,
            "running_s": self.running_s,
            "queued_s": self.queued_s,
            "latency": self.latency.summary(),
        }


class FlowStats:
    """One `OperatorStats` per operator of a plan, by label."""

    def __init__(self, plan: FlowPlan) -> None:
        self.operators = {
            label: OperatorStats(label, stage.name)
            for stage in plan.stages
            for label in stage.operators
            if stage.kind != "source"
        }
        self.latency = Latencies()
        self.queries = 0
        self.failed = 0
        #: Queries answered with the default output (their deadline could not be made).
        self.defaults = 0
        self.races = RaceStats()

    def action(
        self,
        labels: tuple[str, ...],
        rows_in: int,
        rows_out: int,
        seconds: list[float],
        wall: float,
    ) -> None:
        """One action stage ran. Members up to its first filter saw every row; that filter
        gave `rows_out`, which the members after it saw (exact with one filter per stage)."""
        first = next((i for i, label in enumerate(labels) if label.startswith("filter:")), None)
        if first is None:
            first = len(labels) - 1  # no filter: every member gave what it got
        for i, (label, running) in enumerate(zip(labels, seconds, strict=False)):
            seen = rows_in if i <= first else rows_out
            gave = rows_in if i < first else rows_out
            self.operators[label].observe(seen, gave, running)
        self.operators[labels[0]].queued_s += max(0.0, wall - sum(seconds))

    def failed_stage(self, labels: tuple[str, ...]) -> None:
        self.operators[labels[0]].errors += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "failed": self.failed,
            "defaults": self.defaults,
            "latency": self.latency.summary(),
            "operators": [op.to_dict() for op in self.operators.values()],
            "races": self.races.to_dict(),
        }
