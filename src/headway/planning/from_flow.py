"""A compiled flow as the planner's pipeline, with scale factors measured on sample queries.

The stages that run on a worker are planned: each stage that calls a model, and each stage with
no model that the server keeps on a worker (`headway.flows.placement`: its time per row over
the threshold) -- its hop and queue are a stage of the pipeline like a model's. A stage's
scale factor is the share of sample queries whose rows reach it, and a model-less stage's time
per row is timed, both by running each sample through the flow in this process (`measure`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from headway.errors import ConfigError
from headway.flows.local import leading_filters, run_action, run_stage
from headway.flows.operators import Model, Services
from headway.flows.placement import model_less, runs_in_frontend
from headway.flows.plan import ACTION, SOURCE, STAGE_MODEL, FlowPlan, FlowStage, stage_model
from headway.flows.types import Table
from headway.planning.pipeline import LatencyProfile, Pipeline, Profiles, Stage

MIN_SCALE = 1e-3


def model_stages(plan: FlowPlan) -> list[FlowStage]:
    """The compiled flow's stages that call a model, in order."""
    return [s for s in plan.stages if s.kind == ACTION and s.models]


@dataclass
class Measured:
    """What sample queries showed: per stage id, the share of them that reached it (model
    stages and model-less actions), and a model-less action's seconds per row."""

    scales: dict[int, float] = field(default_factory=dict)
    row_seconds: dict[int, float] = field(default_factory=dict)


def measure_scales(plan: FlowPlan, samples: Sequence[Any], services: Services) -> dict[int, float]:
    """Per model stage id of the compiled flow `plan`: the share of `samples` (each one
    query's row) whose rows reach it (`measure`)."""
    wanted = {s.id for s in model_stages(plan)}
    return {k: v for k, v in measure(plan, samples, services).scales.items() if k in wanted}


def measure(plan: FlowPlan, samples: Sequence[Any], services: Services) -> Measured:
    """Run each sample (one query's row) alone through the flow in this process
    (`headway.flows.local.run_stage`, the code the served flow runs too).

    A stage counts the query when its input table has a row where its model runs: a
    cascade's second model, behind a filter on confidence, sees the uncertain share (the
    compiler may fuse that filter into the model's own stage, so the operators ahead of the
    model in its stage run first); a model-less action counts it when its leading filters
    (run before dispatch) leave a row, and its operators' seconds over the rows they got give
    its time per row. Shares are kept nested by `pipeline_from_flow`."""
    flow = plan.flow
    if not samples:
        raise ConfigError(f"flow {flow.name!r}: scale factors need at least one sample query")
    wanted = {s.id for s in model_stages(plan)} | {s.id for s in plan.stages if model_less(s)}
    reached = dict.fromkeys(wanted, 0)
    spent = dict.fromkeys(wanted, 0.0)
    rows = dict.fromkeys(wanted, 0)
    for sample in samples:
        tables: dict[int, Table] = {}
        for stage in plan.stages:
            if stage.kind == SOURCE:
                tables[stage.id] = flow.table([sample])
                continue
            inputs = [tables[i] for i in stage.inputs]
            if stage.id in wanted and len(model_input(plan, stage, inputs[0], services)):
                reached[stage.id] += 1
            started = time.perf_counter()
            tables[stage.id] = run_stage(plan, stage, inputs, services)
            if stage.id in spent and not stage.models:
                spent[stage.id] += time.perf_counter() - started
                rows[stage.id] += len(inputs[0])
    return Measured(
        {stage: count / len(samples) for stage, count in reached.items()},
        {s.id: spent[s.id] / rows[s.id] for s in plan.stages if model_less(s) and rows[s.id]},
    )


def model_input(plan: FlowPlan, stage: FlowStage, table: Table, services: Services) -> Table:
    """The rows that reach the model operator of action `stage` given its input `table` (of a
    model-less stage: the rows its leading filters keep, which are sent)."""
    ops = plan.ops(stage)
    if stage.models:
        ahead = next(i for i, (op, _) in enumerate(ops) if isinstance(op, Model))
    else:  # the leading filters, which run before dispatch
        ahead = leading_filters(ops)
    return run_action(ops[:ahead], table, services) if ahead else table


def is_stage_model(model: str) -> bool:
    return model.startswith(STAGE_MODEL.partition("{")[0])


def worker_stages(
    plan: FlowPlan, row_seconds: Mapping[int, float] | None = None
) -> list[FlowStage]:
    """The compiled flow's stages that run on a worker, in order: those that call a model, and
    the model-less actions whose measured seconds per row (`row_seconds`, per stage id) keep
    them there, and the high-variance ones (`headway.flows.placement`). A model-less stage not
    measured is left out: the server moves a cheap one into the frontend after its first rows,
    and its time is unknown."""
    timed = row_seconds or {}
    return [
        s
        for s in plan.stages
        if (s.kind == ACTION and s.models)
        or (
            model_less(s)
            and s.id in timed
            and (s.high_variance or not runs_in_frontend(timed[s.id]))
        )
    ]


def stage_profiles(
    plan: FlowPlan, row_seconds: Mapping[int, float], kinds: Iterable[str]
) -> Profiles:
    """Profiles of the model-less worker stages (`worker_stages`) on every hardware kind: the
    seconds per row timed in-process, for a batch of any size (its rows' time)."""
    return {
        stage_model(plan, s): {kind: LatencyProfile({1: row_seconds[s.id]}) for kind in kinds}
        for s in worker_stages(plan, row_seconds)
        if not s.models
    }


def pipeline_from_flow(
    plan: FlowPlan,
    scales: Mapping[int, float] | None = None,
    row_seconds: Mapping[int, float] | None = None,
) -> Pipeline:
    """The planner's pipeline for a compiled flow (`scales`: per stage id; 1 without).

    Each stage that runs on a worker (`worker_stages`) becomes a pipeline stage: a model
    stage as its model (the compiler puts at most one model in a stage), a model-less stage
    that stays on a worker as `stage_model` (profiled by `stage_profiles`). Frontend stages
    are not planned, so a stage's parents are the nearest planned stages above it, through
    them; a join of two model branches becomes a stage with both as parents."""
    stages = worker_stages(plan, row_seconds)
    if not any(s.models for s in stages):
        raise ConfigError(f"flow {plan.flow.name!r} calls no model: nothing to plan")
    by_id = {s.id: s for s in plan.stages}
    calls = [s.models[0] for s in stages if s.models]

    def named(s: FlowStage) -> str:
        """A model stage by its model (and its id when the flow calls that model twice)."""
        if not s.models:
            return s.name
        return s.models[0] if calls.count(s.models[0]) == 1 else f"{s.models[0]}#{s.id}"

    names = {s.id: named(s) for s in stages}

    def planned_parents(stage_id: int) -> list[int]:
        found: list[int] = []
        for parent in by_id[stage_id].inputs:
            found += [parent] if parent in names else planned_parents(parent)
        return sorted(set(found))

    made: dict[int, Stage] = {}
    for stage in stages:
        parents = planned_parents(stage.id)
        share = 1.0 if scales is None else scales.get(stage.id, 1.0)
        share = min([max(share, MIN_SCALE), *(made[p].scale for p in parents)])
        model = stage.models[0] if stage.models else stage_model(plan, stage)
        made[stage.id] = Stage(names[stage.id], model, tuple(names[p] for p in parents), share)
    return Pipeline(plan.flow.name, tuple(made.values()))
