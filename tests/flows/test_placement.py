"""Where a model-less action stage runs (`headway.flows.placement`), on an injected `ManualClock`.

The cascade of `test_filter_ahead` with a map after its join: that map is a stage of its own
with no model. The stub controller answers model `a`; the map's stage model runs in the stub
with the worker's own adapter (`WorkerStub`), so a call to it is a worker round trip.
The flow's per-operator statistics are set as a worker's measurements would leave them, so the
rule's input is exact (no test here depends on how fast the machine is).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from tests.flows.stub_controller import WorkerStub

from headway.apps.config import AppConfig
from headway.flows import Flow, LocalServices, Model, Row, Table
from headway.flows.lookups import Lookups
from headway.flows.placement import (
    FRONTEND_ROW_S,
    MEASURED_ROWS,
    in_frontend,
    model_less,
    row_seconds,
    runs_in_frontend,
)
from headway.flows.plan import PlannedSize
from headway.flows.serving import FlowApplication


def unsure(row: Row) -> bool:
    return row["ya"] < 1.5


def pick(table: Table) -> list[float]:
    return [ya if yb is None else yb for ya, yb in zip(table.column("ya"), table.column("yb"),
                                                      strict=True)]  # fmt: skip


def cascade() -> Flow:
    flow = Flow("cascade", {"x": float})
    first = flow.map(Model("a", {"y": float}, inputs={"input-0": "x"}, names=["ya"]))
    second = first.filter(unsure).map(Model("b", {"y": float}, inputs={"input-0": "x"},
                                            names=["yb"]))  # fmt: skip
    first.join(second, how="left").map(pick, names=["answer"], batching=True)
    return flow


def deployed() -> tuple[FlowApplication, WorkerStub, str]:
    controller = WorkerStub({"a": 0.01})  # y = 2.0: sure, so b is not called
    config = AppConfig("cascade", (), slo_ms=100.0, default_output=-1, flow=f"{__file__}:cascade")
    app = FlowApplication(config, controller, Lookups(), flow=cascade())
    stage = next(s for s in app.plan.stages if s.name == "map:pick")
    (name,) = app.stage_models.names[stage.id]
    return app, controller, name


def measured(app: FlowApplication, rows: int, seconds_per_row: float) -> None:
    """The pick stage's statistics as `rows` rows on a worker would leave them."""
    app.stats.action(("map:pick",), rows, rows, [rows * seconds_per_row], rows * seconds_per_row)


def ask(app: FlowApplication) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        return await app.predict({"x": 1.0})

    return asyncio.run(run())


def local_answer() -> Any:
    local = LocalServices(models={"a": lambda t: {"y": np.full((len(t["input-0"]), 1), 2.0)}})
    return cascade().local([1.0], local).records()


def test_the_map_after_the_join_is_a_stage_with_no_model() -> None:
    stages = {s.name: s for s in cascade().compile().stages}
    assert model_less(stages["map:pick"])
    assert not model_less(stages["filter:unsure+model:b"])
    assert not model_less(stages["join"])  # a frontend stage, not an action


def test_an_unmeasured_model_less_stage_runs_on_a_worker() -> None:
    app, controller, name = deployed()
    answer = ask(app)
    assert [called for called, _, _ in controller.calls] == ["a", name]
    assert answer["output"] == local_answer()


def test_a_cheap_measured_model_less_stage_runs_in_the_frontend() -> None:
    app, controller, _ = deployed()
    measured(app, MEASURED_ROWS, FRONTEND_ROW_S / 10)
    answer = ask(app)
    assert [called for called, _, _ in controller.calls] == ["a"]  # before: a, then the stage
    assert answer["output"] == local_answer()
    pick_stats = {o["operator"]: o for o in app.statistics()["operators"]}["map:pick"]
    assert (pick_stats["calls"], pick_stats["rows_in"]) == (2, MEASURED_ROWS + 1)  # counted here
    assert controller.clock.now() == pytest.approx(0.01)  # only a's time passed


def test_a_slow_model_less_stage_stays_on_a_worker() -> None:
    app, controller, name = deployed()
    measured(app, MEASURED_ROWS, FRONTEND_ROW_S * 10)
    answer = ask(app)
    assert [called for called, _, _ in controller.calls] == ["a", name]
    assert answer["output"] == local_answer()


def test_the_rule_needs_enough_rows_and_a_small_time_per_row() -> None:
    app, _, _ = deployed()
    stage = next(s for s in app.plan.stages if s.name == "map:pick")
    operators = app.stats.operators
    measured(app, MEASURED_ROWS - 1, FRONTEND_ROW_S / 10)
    assert row_seconds(stage, operators) is None and not in_frontend(stage, operators)
    measured(app, 1, FRONTEND_ROW_S / 10)
    assert row_seconds(stage, operators) == pytest.approx(FRONTEND_ROW_S / 10)
    assert in_frontend(stage, operators)
    measured(app, MEASURED_ROWS, FRONTEND_ROW_S * 3)  # grown slow: mean 1.55x the threshold
    assert row_seconds(stage, operators) == pytest.approx(FRONTEND_ROW_S * 1.55)
    assert not in_frontend(stage, operators)
    assert runs_in_frontend(FRONTEND_ROW_S) and not runs_in_frontend(FRONTEND_ROW_S * 1.01)
    assert not runs_in_frontend(None)


def test_a_high_variance_model_less_stage_stays_on_its_workers() -> None:
    stage = next(s for s in cascade().compile().stages if s.name == "map:pick")
    varied = replace(stage, high_variance=True)
    app, _, _ = deployed()
    measured(app, MEASURED_ROWS, FRONTEND_ROW_S / 10)
    assert in_frontend(stage, app.stats.operators)
    assert not in_frontend(varied, app.stats.operators)  # its mean hides its slow calls


def test_a_plan_sizes_a_model_less_stage_s_own_model() -> None:
    controller = WorkerStub({"a": 0.01})
    config = AppConfig("cascade", (), slo_ms=100.0, default_output=-1, flow=f"{__file__}:cascade")
    planned = {"(flow cascade stage map:pick)": PlannedSize(3, 16, 2)}
    app = FlowApplication(config, controller, Lookups(), flow=cascade(), planned=planned)
    stage = next(s for s in app.plan.stages if s.name == "map:pick")
    (name,) = app.stage_models.names[stage.id]
    sized = controller.repository.models[name]
    assert (sized.replicas, sized.max_batch_size, sized.options["threads"]) == (3, 16, 2)
    assert app.stage_models.sized == {"(flow cascade stage map:pick)"}
    _, other, unplanned = deployed()
    assert "threads" not in other.repository.models[unplanned].options
