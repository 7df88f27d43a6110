"""A flow app's `slo_ms` is the whole query's deadline, on an injected `ManualClock`.

The stub controller (`tests/flows/stub_controller.py`) stands for the scheduler.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.flows.stub_controller import StubController

from headway.apps.config import AppConfig
from headway.clock import ManualClock
from headway.flows import Flow, Model
from headway.flows.deadline import FlowDeadlinePassed, QueryDeadline
from headway.flows.lookups import Lookups
from headway.flows.serving import FlowApplication


def two_models() -> Flow:
    flow = Flow("two", {"x": float})
    first = flow.map(Model("a", {"y": float}, inputs={"input-0": "x"}, names=["ya"]))
    first.map(Model("b", {"y": float}, inputs={"input-0": "x"}, names=["yb"]))
    return flow


def ask(controller: StubController, slo_ms: float = 100.0) -> tuple[dict[str, Any], Any]:
    config = AppConfig("two", (), slo_ms=slo_ms, default_output=-1, flow="two.py:flow")
    app = FlowApplication(config, controller, Lookups(), flow=two_models())

    async def run() -> dict[str, Any]:
        return await app.predict({"x": 1.0})

    return asyncio.run(run()), app.statistics()


def test_each_call_gets_the_time_left_of_the_querys_deadline() -> None:
    controller = StubController({"a": 0.06, "b": 0.03})
    answer, stats = ask(controller)
    assert answer["default"] is False
    assert answer["output"] == [{"x": 1.0, "ya": 2.0, "yb": 2.0}]
    (a, at_a, given_a), (b, at_b, given_b) = controller.calls
    assert (a, at_a, b, at_b) == ("a", 0.0, "b", pytest.approx(0.06))
    assert given_a == pytest.approx(0.1) and given_b == pytest.approx(0.04)
    assert (stats["queries"], stats["defaults"]) == (1, 0)


def test_a_flow_still_running_at_its_deadline_answers_the_default_output() -> None:
    """Two 60 ms stages under a 100 ms SLO: cut off at 100 ms, not answered at 120 ms."""
    controller = StubController({"a": 0.06, "b": 0.06})
    answer, stats = ask(controller)
    assert (answer["output"], answer["default"]) == (-1, True)
    assert answer["default_explanation"] == "the flow did not finish within its deadline (100 ms)"
    assert answer["models"] == ["a"]  # b had not answered
    assert controller.withdrawn == ["b"]  # cut off: its call is withdrawn, a's is not
    assert [given for _, _, given in controller.calls] == [
        pytest.approx(0.1),
        pytest.approx(0.04),
    ]
    assert (stats["queries"], stats["defaults"], stats["failed"]) == (1, 1, 0)


def test_a_call_refused_for_lack_of_time_answers_the_default_at_once() -> None:
    controller = StubController({"a": 0.06, "b": 0.06}, refuses=frozenset({"b"}))
    answer, _ = ask(controller)
    assert (answer["output"], answer["default"]) == (-1, True)
    assert answer["default_explanation"] == (
        "the flow cannot finish within its deadline (100 ms): model 'b' takes 60 ms"
    )
    assert controller.clock.now() == pytest.approx(0.06)  # not held until the deadline


def test_no_call_is_made_once_the_deadline_has_passed() -> None:
    clock = ManualClock()
    deadline = QueryDeadline.starting(clock, clock.now(), 100.0)
    clock.advance(0.03)
    assert deadline.remaining("model:a") == pytest.approx(0.07)
    clock.advance(0.07)
    with pytest.raises(FlowDeadlinePassed, match=r"deadline \(100 ms\) passed before model:b"):
        deadline.remaining("model:b")
