"""A fused stage's filters ahead of its model run before dispatch, on an injected `ManualClock`.

A cascade: model `a` for every query, a filter on its answer, then model `b` (the filter is
fused into `b`'s stage, since the join reads `a`'s answer too). A query the filter drops is
not sent to `b`'s stage at all; the stub controller (`tests/flows/stub_controller.py`) records
every call, and would fail one to a stage it was not told of.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from tests.flows.stub_controller import SEEN, StubController, WorkerStub

from headway.apps.config import AppConfig
from headway.flows import Flow, LocalServices, Model, Row
from headway.flows.deadline import QueryDeadline
from headway.flows.local import filter_ahead
from headway.flows.lookups import Lookups
from headway.flows.operators import Filter, Map
from headway.flows.query_runner import QueryTrace
from headway.flows.serving import FlowApplication
from headway.flows.types import Schema, Table


def unsure(row: Row) -> bool:
    return row["ya"] < 1.5


def cascade() -> Flow:
    flow = Flow("cascade", {"x": float})
    first = flow.map(Model("a", {"y": float}, inputs={"input-0": "x"}, names=["ya"]))
    second = first.filter(unsure).map(Model("b", {"y": float}, inputs={"input-0": "x"},
                                            names=["yb"]))  # fmt: skip
    first.join(second, how="left")
    return flow


def small(row: Row) -> bool:
    SEEN["small"] += 1
    return row["x"] < 1.5


def double(row: Row) -> float:
    SEEN["double"] += 1
    return row["x"] * 2


def doubled() -> Flow:
    """One fused stage with no model and a filter at its head: filter:small+map:double."""
    flow = Flow("doubled", {"x": float})
    flow.filter(small).map(double, names=["y"])
    return flow


def test_the_compiler_fuses_the_filter_into_the_second_models_stage() -> None:
    names = [s.name for s in cascade().compile().stages]
    assert "filter:unsure+model:b" in names


def test_a_query_the_fused_filter_drops_makes_no_call_to_that_stage() -> None:
    controller = StubController({"a": 0.01})  # answers y = 2.0: sure, so unsure() drops it
    config = AppConfig("cascade", (), slo_ms=100.0, default_output=-1, flow=f"{__file__}:cascade")
    app = FlowApplication(config, controller, Lookups(), flow=cascade())

    async def run() -> dict[str, Any]:
        return await app.predict({"x": 1.0})

    answer = asyncio.run(run())
    assert [name for name, _, _ in controller.calls] == ["a"]  # before: a and the fused stage
    local = LocalServices(models={"a": lambda t: {"y": np.full((len(t["input-0"]), 1), 2.0)}})
    assert answer["output"] == cascade().local([1.0], local).records()
    assert answer["models"] == ["a"] and answer["default"] is False
    operators = {o["operator"]: o for o in app.statistics()["operators"]}
    assert (operators["filter:unsure"]["rows_in"], operators["filter:unsure"]["rows_out"]) == (1, 0)
    assert operators["model:b"]["calls"] == 0
    assert controller.clock.now() == pytest.approx(0.01)  # only a's time passed


def test_with_fusion_off_a_filters_own_stage_runs_in_the_frontend() -> None:
    controller = StubController({"a": 0.01})  # y = 2.0: the filter drops the row
    config = AppConfig(
        "cascade", (), slo_ms=100.0, default_output=-1, flow=f"{__file__}:cascade", fusion=False
    )
    app = FlowApplication(config, controller, Lookups(), flow=cascade())
    assert "filter:unsure" in [s.name for s in app.plan.stages]  # a stage of its own
    kept = Table.build(app.flow.nodes[2].shape.schema, [(1.0, 1.0)], (0,))
    filter_stage = next(s for s in app.plan.stages if s.name == "filter:unsure")

    async def run() -> Table:
        deadline = QueryDeadline.starting(controller.clock, 0.0, 100.0)
        return await app.runner._action(filter_stage, kept, QueryTrace(), deadline)

    assert asyncio.run(run()) == kept  # kept (y < 1.5), and no call: the stub has no model
    assert controller.calls == []
    operators = {o["operator"]: o for o in app.statistics()["operators"]}
    assert (operators["filter:unsure"]["rows_in"], operators["filter:unsure"]["rows_out"]) == (1, 1)


def test_only_the_leading_filters_run_ahead_and_only_the_rows_they_keep_are_sent() -> None:
    table = Table.build(Schema([("v", float)]), [(0.5,), (2.0,), (1.0,)], (7, 8, 9))
    small = Filter(lambda row: row["v"] < 1.5)
    nonzero = Filter(lambda row: row["v"] > 0.75)
    double = Map(lambda row: row["v"] * 2, names=["v"])  # never run: filter_ahead stops here
    kept, seconds = filter_ahead([(small, "f1"), (nonzero, "f2"), (double, "m")], table)
    assert (kept.rows, kept.qids, len(seconds)) == (((1.0,),), (9,), 2)
    behind, none = filter_ahead([(double, "m"), (small, "f1")], table)
    assert (behind, none) == (table, [])  # a filter behind a map runs in the worker


def test_a_fused_stages_leading_filter_runs_once_per_row_the_rest_on_the_worker() -> None:
    controller = WorkerStub({})  # the stage runs in the worker's adapter (unmeasured: not here)
    config = AppConfig("doubled", (), slo_ms=100.0, default_output=-1, flow=f"{__file__}:doubled")
    app = FlowApplication(config, controller, Lookups(), flow=doubled())
    (stage,) = [s for s in app.plan.stages if s.kind == "action"]
    assert stage.name == "filter:small+map:double"
    SEEN.clear()

    async def run() -> list[dict[str, Any]]:
        return [await app.predict({"x": x}) for x in (1.0, 2.0)]

    answers = asyncio.run(run())
    assert [name for name, _, _ in controller.calls] == app.stage_models.names[stage.id]
    # 1.0 kept and sent, 2.0 dropped before dispatch: each row through the filter once (the
    # worker ran it again on the kept row before) and the map once, on the worker
    assert (SEEN["small"], SEEN["double"]) == (2, 1)
    assert [a["output"] for a in answers] == [doubled().local([x]).records() for x in (1.0, 2.0)]
    operators = {o["operator"]: o for o in app.statistics()["operators"]}
    counted = {label: (operators[label]["calls"], operators[label]["rows_in"],
                       operators[label]["rows_out"]) for label in stage.operators}  # fmt: skip
    assert counted == {"filter:small": (2, 2, 1), "map:double": (1, 1, 1)}
