"""Where an action stage with no model runs: in the frontend, or on a worker.

Such a stage (a map after a join, say) is only user code. On a worker it costs every query a
round trip and a place in the stage model's queue; in the frontend it costs nothing but its
own time, which the event loop spends while every other request waits. So it runs in the
frontend while its operators are measured to be cheap, and on a worker otherwise: a stage
starts on a worker (its code's time is unknown, and a slow function must not stall the loop
even once), and once its operators have seen `MEASURED_ROWS` rows (the flow's per-operator
statistics: timed on the worker, then in the frontend), it runs in the frontend while their
mean time per row, summed over the stage's operators, is at most `FRONTEND_ROW_S`; a stage
whose time grows past that goes back to a worker. A high-variance stage stays on its workers.
A stage of filters alone always runs in the frontend (`local.filter_ahead`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from headway.flows.plan import ACTION, FlowStage

#: A query's own time in the frontend is about a millisecond; a stage that adds at most a
#: tenth of that per row costs less there than a worker round trip and its queue.
FRONTEND_ROW_S = 100e-6
#: Rows a stage's operators must have seen before their time per row decides.
MEASURED_ROWS = 16


class Timed(Protocol):
    """What the rule reads of an operator's statistics (`flows.stats.OperatorStats`)."""

    rows_in: int
    running_s: float


def model_less(stage: FlowStage) -> bool:
    """An action stage that calls no model and is not filters alone (which always run in the
    frontend): user code that could run on a worker."""
    return (
        stage.kind == ACTION
        and not stage.models
        and not all(label.startswith("filter:") for label in stage.operators)
    )


def row_seconds(stage: FlowStage, operators: Mapping[str, Timed]) -> float | None:
    """The stage's measured seconds per row (each operator's mean per row it saw, summed), or
    None until its first operator has seen `MEASURED_ROWS` rows."""
    timed = [operators[label] for label in stage.operators]
    if timed[0].rows_in < MEASURED_ROWS:
        return None
    return sum(op.running_s / op.rows_in for op in timed if op.rows_in)


def runs_in_frontend(seconds_per_row: float | None) -> bool:
    """The rule: measured, and at most `FRONTEND_ROW_S` a row."""
    return seconds_per_row is not None and seconds_per_row <= FRONTEND_ROW_S


def in_frontend(stage: FlowStage, operators: Mapping[str, Timed]) -> bool:
    """Whether `stage` is model-less and runs in the frontend for the next query, given its
    operators' statistics by label (`FlowStats.operators`). A high-variance stage stays on its
    workers: its user said its time varies (its mean hides the slow calls that would stall
    the loop), and its copies compete there."""
    return (
        model_less(stage)
        and not stage.high_variance
        and runs_in_frontend(row_seconds(stage, operators))
    )
