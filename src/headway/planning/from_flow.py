"""A compiled flow as the planner's pipeline, with scale factors measured on sample queries.

Only stages that call a model are planned (the others have no profile); a stage's scale factor
is the share of sample queries whose rows reach it, measured by running each sample through
the flow in this process (`measure_scales`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from headway.errors import ConfigError
from headway.flows.local import run_action, run_stage
from headway.flows.operators import Model, Services
from headway.flows.plan import ACTION, SOURCE
from headway.flows.plan import Plan as FlowPlan
from headway.flows.plan import Stage as FlowStage
from headway.flows.types import Table
from headway.planning.pipeline import Pipeline, Stage

MIN_SCALE = 1e-3


def model_stages(plan: FlowPlan) -> list[FlowStage]:
    """The compiled flow's stages that call a model, in order."""
    return [s for s in plan.stages if s.kind == ACTION and s.models]


def measure_scales(plan: FlowPlan, samples: Sequence[Any], services: Services) -> dict[int, float]:
    """Per model stage id of the compiled flow `plan`: the share of `samples` (each one
    query's row) whose rows reach it.

    Each sample runs alone through the flow in this process (`headway.flows.local.run_stage`,
    the code the served flow runs too), and a stage counts the query when its input table has
    a row where its model runs: a cascade's second model, behind a filter on confidence, sees
    the uncertain share (the compiler may fuse that filter into the model's own stage, so the
    operators ahead of the model in its stage run first).
    Shares are kept nested (a stage's at most its parents') and at least `MIN_SCALE` (a stage
    no sample reached would otherwise be planned for no load at all)."""
    flow = plan.flow
    if not samples:
        raise ConfigError(f"flow {flow.name!r}: scale factors need at least one sample query")
    wanted = {s.id for s in model_stages(plan)}
    reached = dict.fromkeys(wanted, 0)
    for sample in samples:
        tables: dict[int, Table] = {}
        for stage in plan.stages:
            if stage.kind == SOURCE:
                tables[stage.id] = flow.table([sample])
                continue
            inputs = [tables[i] for i in stage.inputs]
            if stage.id in wanted and len(model_input(plan, stage, inputs[0], services)):
                reached[stage.id] += 1
            tables[stage.id] = run_stage(plan, stage, inputs, services)
    return {stage: count / len(samples) for stage, count in reached.items()}


def model_input(plan: FlowPlan, stage: FlowStage, table: Table, services: Services) -> Table:
    """The rows that reach the model operator of action `stage` given its input `table`."""
    ops = plan.ops(stage)
    ahead = next(i for i, (op, _) in enumerate(ops) if isinstance(op, Model))
    return run_action(ops[:ahead], table, services) if ahead else table


def pipeline_from_flow(plan: FlowPlan, scales: Mapping[int, float] | None = None) -> Pipeline:
    """The planner's pipeline for a compiled flow (`scales`: per model stage id; 1 without).

    Each stage that calls a model becomes a pipeline stage (the compiler puts at most one model
    in a stage). Frontend stages and model-free actions are not planned, so a model stage's
    parents are the nearest model stages above it, through them; a join of two model branches
    becomes a stage with both as parents."""
    stages = model_stages(plan)
    if not stages:
        raise ConfigError(f"flow {plan.flow.name!r} calls no model: nothing to plan")
    by_id = {s.id: s for s in plan.stages}
    calls = [s.models[0] for s in stages]
    # a stage is named by its model, and by its id too when the flow calls that model twice
    names = {
        s.id: s.models[0] if calls.count(s.models[0]) == 1 else f"{s.models[0]}#{s.id}"
        for s in stages
    }

    def model_parents(stage_id: int) -> list[int]:
        found: list[int] = []
        for parent in by_id[stage_id].inputs:
            found += [parent] if parent in names else model_parents(parent)
        return sorted(set(found))

    made: dict[int, Stage] = {}
    for stage in stages:
        parents = model_parents(stage.id)
        share = 1.0 if scales is None else scales.get(stage.id, 1.0)
        share = min([max(share, MIN_SCALE), *(made[p].scale for p in parents)])
        made[stage.id] = Stage(
            names[stage.id], stage.models[0], tuple(names[p] for p in parents), share
        )
    return Pipeline(plan.flow.name, tuple(made.values()))
