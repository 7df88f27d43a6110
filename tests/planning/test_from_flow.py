"""A compiled flow as the planner's pipeline, scale factors measured on sample queries."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from headway.flows import Flow, LocalServices, Model, Row, Table
from headway.flows.placement import FRONTEND_ROW_S
from headway.flows.plan import FlowPlan
from headway.planning.from_flow import (
    is_stage_model,
    measure,
    measure_scales,
    pipeline_from_flow,
    stage_model,
    stage_profiles,
)
from headway.planning.pipeline import Stage


def unsure(row: Row) -> bool:
    return bool(row["p"] < 0.3)


def cascade() -> Flow:
    """A fast model for every query; a slow one for the rows it is unsure of."""
    flow = Flow("cascade", {"x": float})
    scored = flow.map(Model("fast", {"p": float}))
    scored.filter(unsure).map(Model("slow", {"q": float}, inputs={"input-0": "x"}))
    return flow


def services() -> LocalServices:
    def fast(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"p": inputs["input-0"][:, 0]}

    def slow(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"q": inputs["input-0"] * 2}

    return LocalServices(models={"fast": fast, "slow": slow})


def test_a_cascade_becomes_two_stages_with_the_measured_share() -> None:
    flow = cascade()
    scales = measure_scales(flow.compile(), [i / 10 for i in range(10)], services())
    pipeline = pipeline_from_flow(flow.compile(), scales)
    assert pipeline.stages == (
        Stage("fast", "fast", (), 1.0),
        Stage("slow", "slow", ("fast",), pytest.approx(0.3)),  # x = 0.0, 0.1, 0.2
    )


def both(table: Table) -> list[tuple[float, float]]:
    return list(zip(table.column("x"), table.column("p"), strict=True))


def twice(table: Table) -> list[float]:
    return [2 * q for q in table.column("q")]


def test_a_filter_fused_into_the_model_stage_counts_the_rows_it_lets_through() -> None:
    # as examples/flows/cascade.py: the fast answers are read twice (the filter and the join),
    # so the filter is compiled into the slow model's stage, whose input has every query's row
    flow = Flow("cascade", {"x": float})
    scored = flow.map(Model("fast", {"p": float})).map(both, names=["x", "p"], batching=True)
    slow = scored.filter(unsure).map(Model("slow", {"q": float}, inputs={"input-0": "x"}))
    scored.join(slow.map(twice, names=["r"], batching=True), how="left")
    compiled = flow.compile()
    (slow,) = [s for s in compiled.stages if s.models == ("slow",)]
    assert len(compiled.ops(slow)) > 1  # the filter runs in the model's stage
    scales = measure_scales(compiled, [i / 10 for i in range(10)], services())
    assert pipeline_from_flow(compiled, scales)["slow"].scale == pytest.approx(0.3)


def test_without_measured_scales_every_stage_sees_every_query() -> None:
    pipeline = pipeline_from_flow(cascade().compile())
    assert [(s.name, s.parents, s.scale) for s in pipeline.stages] == [
        ("fast", (), 1.0),
        ("slow", ("fast",), 1.0),
    ]


def test_a_stage_no_sample_reached_keeps_a_small_share() -> None:
    flow = cascade()
    scales = measure_scales(flow.compile(), [0.5, 0.9], services())
    assert pipeline_from_flow(flow.compile(), scales)["slow"].scale == pytest.approx(1e-3)


def test_a_query_none_of_whose_rows_reach_a_model_runs() -> None:
    # the model operator meets an empty table: answered with no rows, not a reshape error
    assert len(cascade().local([0.9], services())) == 0


def pick(table: Table) -> list[float]:
    return [p if r is None else r for p, r in zip(table.column("p"), table.column("r"),
                                                  strict=True)]  # fmt: skip


def picked() -> FlowPlan:
    """examples/flows/cascade.py's shape: after the join of the two answers, a model-less map
    (`map:pick`), a stage of its own."""
    flow = Flow("cascade", {"x": float})
    scored = flow.map(Model("fast", {"p": float})).map(both, names=["x", "p"], batching=True)
    slow = scored.filter(unsure).map(Model("slow", {"q": float}, inputs={"input-0": "x"}))
    joined = scored.join(slow.map(twice, names=["r"], batching=True), how="left")
    joined.map(pick, names=["answer"], batching=True)
    return flow.compile()


def test_a_model_less_stage_kept_on_a_worker_is_planned_behind_both_branches() -> None:
    compiled = picked()
    (stage,) = [s for s in compiled.stages if s.name == "map:pick"]
    slow_time = {stage.id: FRONTEND_ROW_S * 5}  # over the threshold: the server keeps it there
    pipeline = pipeline_from_flow(compiled, None, slow_time)
    assert [(s.name, s.model, s.parents) for s in pipeline.stages] == [
        ("fast", "fast", ()),
        ("slow", "slow", ("fast",)),
        ("map:pick", "(flow cascade stage map:pick)", ("fast", "slow")),
    ]  # before: fast and slow only, the hop to pick's worker in no estimate
    assert is_stage_model(stage_model(compiled, stage)) and not is_stage_model("fast")
    profiles = stage_profiles(compiled, slow_time, ["cpu1", "cpu2"])
    assert set(profiles) == {"(flow cascade stage map:pick)"}
    assert profiles["(flow cascade stage map:pick)"]["cpu2"].latency(4) == pytest.approx(
        FRONTEND_ROW_S * 5 * 4
    )  # its rows' time: a batch of 4 rows takes four rows' time


def test_a_cheap_or_unmeasured_model_less_stage_is_not_planned() -> None:
    compiled = picked()
    (stage,) = [s for s in compiled.stages if s.name == "map:pick"]
    for timed in (None, {}, {stage.id: FRONTEND_ROW_S}):  # the frontend runs a cheap one
        assert pipeline_from_flow(compiled, None, timed).names == ["fast", "slow"]
        assert stage_profiles(compiled, timed or {}, ["cpu1"]) == {}


def test_a_high_variance_model_less_stage_is_planned_however_cheap() -> None:
    compiled = picked()
    (stage,) = [s for s in compiled.stages if s.name == "map:pick"]
    varied = replace(compiled, stages=tuple(
        replace(s, high_variance=True) if s is stage else s for s in compiled.stages
    ))  # fmt: skip
    cheap = {stage.id: FRONTEND_ROW_S / 10}
    assert pipeline_from_flow(varied, None, cheap).names == ["fast", "slow", "map:pick"]
    assert pipeline_from_flow(compiled, None, cheap).names == ["fast", "slow"]


def test_samples_measure_a_model_less_stages_share_and_time_per_row() -> None:
    compiled = picked()
    (stage,) = [s for s in compiled.stages if s.name == "map:pick"]
    found = measure(compiled, [i / 10 for i in range(10)], services())
    assert found.scales[stage.id] == 1.0  # every query's row reaches the join and pick
    assert set(found.row_seconds) == {stage.id} and found.row_seconds[stage.id] > 0
    assert measure_scales(compiled, [i / 10 for i in range(10)], services()) == {
        k: v for k, v in found.scales.items() if k != stage.id
    }
