"""A compiled flow as the planner's pipeline, scale factors measured on sample queries."""

from __future__ import annotations

import numpy as np
import pytest

from headway.flows import Flow, LocalServices, Model, Row, Table
from headway.planning.from_flow import measure_scales, pipeline_from_flow
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
