"""Running a compiled flow in this process: `Flow.local`, and the stage code workers share.

`run_chain` runs an action stage's operators over a table; a filter gives a keep mask rather
than fewer rows (an action answers one row per row it got), and `run_action` applies it. A
fused stage's leading filters run in the frontend, before dispatch (`filter_ahead`), and its
worker runs the rest. The deployed flow runs the very same functions, in a worker's action
or in the frontend, so the two answer alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from headway.errors import ModelNotFound
from headway.flows.operators import Filter, Model, Operator, Services, select_rows
from headway.flows.plan import SOURCE, FlowPlan, FlowStage
from headway.flows.types import Table

Predictor = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class LocalServices:
    """Models as in-process callables (or loaded from a repository folder with the same
    adapters as the workers) and lookups from a dict. A key never put reads as NULL."""

    def __init__(
        self,
        models: Mapping[str, Predictor] | None = None,
        lookups: Mapping[str, Any] | None = None,
        repository: Path | str | None = None,
    ) -> None:
        self.models: dict[str, Predictor] = dict(models or {})
        self.lookups = dict(lookups or {})
        self.repository = None if repository is None else Path(repository)

    def predict(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if model not in self.models:
            self.models[model] = self._load(model)
        return self.models[model](inputs)

    def lookup(self, key: str) -> Any:
        return self.lookups.get(key)

    def _load(self, model: str) -> Predictor:
        if self.repository is None:
            raise ModelNotFound(
                f"model {model!r}: give LocalServices(models={{...}}) or repository=... to "
                "run a flow's model operators in-process"
            )
        from headway.adapters import adapter_class
        from headway.repository import Repository

        repository = Repository.scan(self.repository)
        name, _, version = model.partition("@")
        config = repository.version(name, int(version)) if version else repository.get(name)
        adapter = adapter_class(config.framework)(config.to_wire())
        adapter.load()
        return lambda inputs: adapter.predict(inputs)


def run_chain(
    ops: list[tuple[Operator, str]], table: Table, services: Services
) -> tuple[Table, list[bool] | None, list[float]]:
    """An action stage's operators over `table`: (the rows that passed every filter, after the
    chain; which input rows they are, None when no filter ran; each operator's seconds).
    Operators after a filter run on the rows it kept only."""
    seconds = []
    rows = len(table)
    positions = list(range(rows))
    filtered = False
    for op, label in ops:
        started = time.perf_counter()
        if isinstance(op, Filter):
            keep = op.keep(table, label)
            table = select_rows(table, keep)
            positions = [p for p, k in zip(positions, keep, strict=True) if k]
            filtered = True
        else:
            table = op.run([table], services, label)
        seconds.append(time.perf_counter() - started)
    if not filtered:
        return table, None, seconds
    kept = set(positions)
    return table, [i in kept for i in range(rows)], seconds


def leading_filters(ops: list[tuple[Operator, str]]) -> int:
    """How many of an action stage's operators are filters ahead of its first map or model:
    the frontend runs those before dispatch (`filter_ahead`), a worker the rest
    (`FlowStageAdapter`), so each runs once per row."""
    return next((i for i, (op, _) in enumerate(ops) if not isinstance(op, Filter)), len(ops))


def filter_ahead(ops: list[tuple[Operator, str]], table: Table) -> tuple[Table, list[float]]:
    """The rows of `table` that the stage's leading filters keep, and each filter's seconds.

    A fused stage's filters ahead of its model run in the frontend, before dispatch: a query
    whose rows they all drop is not sent to the stage's worker at all (a cascade's confident
    queries make no second round trip, nor wait in the slow model's queue), and a query's
    dropped rows do not cross the process boundary; a stage of filters alone (fusion off) runs
    there whole. The worker runs the rest of the chain (`leading_filters`): each filter runs
    once per row."""
    seconds: list[float] = []
    for op, label in ops[: leading_filters(ops)]:
        assert isinstance(op, Filter)
        started = time.perf_counter()
        table = select_rows(table, op.keep(table, label))
        seconds.append(time.perf_counter() - started)
    return table, seconds


def run_action(ops: list[tuple[Operator, str]], table: Table, services: Services) -> Table:
    return run_chain(ops, table, services)[0]


def run_stage(plan: FlowPlan, stage: FlowStage, inputs: list[Table], services: Services) -> Table:
    """One stage in-process: an action's chain, or a frontend operator."""
    ops = plan.ops(stage)
    if stage.kind == "action":
        (table,) = inputs
        return run_action(ops, table, services)
    ((op, label),) = ops
    return op.run(inputs, services, label)


def run_plan(plan: FlowPlan, table: Table, services: Services) -> Table:
    """Every stage in order (stages are numbered so that inputs come first)."""
    tables: dict[int, Table] = {}
    for stage in plan.stages:
        if stage.kind == SOURCE:
            tables[stage.id] = table
        else:
            tables[stage.id] = run_stage(plan, stage, [tables[i] for i in stage.inputs], services)
    return tables[plan.sink]


def models_of(plan: FlowPlan) -> list[Model]:
    return [op for stage in plan.stages for op, _ in plan.ops(stage) if isinstance(op, Model)]
