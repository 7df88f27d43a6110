"""The search has a time budget: once spent, the plan is the cheapest found so far."""

from __future__ import annotations

from headway.planning.planner import BUDGET_S, Planner
from headway.planning.workloads import ArrivalSpec, arrival_times
from tests.planning.helpers import CATALOGUE, MS, PROFILES, chain

TRACE = arrival_times(ArrivalSpec(130, 10, cv=1.0, seed=2))
ARGS = (chain(1.0, 0.5), PROFILES, CATALOGUE, TRACE, 60 * MS)


class Ticking:
    """A clock that reads `step` seconds later each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.reads = 0.0, step, 0

    def __call__(self) -> float:
        self.now += self.step
        self.reads += 1
        return self.now


def test_no_restart_begins_once_the_budget_is_spent() -> None:
    unbounded = Planner(*ARGS).plan()  # no budget unless given
    # every read of the clock a second later: the budget is spent within InferLine's descent
    bounded = Planner(*ARGS, budget=3.0, clock=Ticking(1.0)).plan()
    assert BUDGET_S > 0  # `headway plan`'s
    assert unbounded.feasible and bounded.feasible
    assert not any("time budget" in step for step in unbounded.steps)
    assert any("not restarted from" in step for step in bounded.steps)
    assert not any(step.startswith("restart from") for step in bounded.steps)
    assert bounded.estimates < unbounded.estimates
    assert bounded.cost_per_hour >= unbounded.cost_per_hour
    assert bounded.p99 <= 0.8 * 60 * MS  # still confirmed to meet the goal


def test_the_descent_under_way_stops_where_it_is() -> None:
    # spent at once: InferLine's start made feasible, and not one step of descent after it
    plan = Planner(*ARGS, budget=0.5, clock=Ticking(1.0)).plan()
    assert plan.feasible
    assert any(step.startswith("the time budget of 0.5 s spent: stopped at") for step in plan.steps)
    assert not any(" on s" in step and ": $" in step for step in plan.steps)  # no action taken


def test_a_budget_not_reached_changes_nothing() -> None:
    slow = Ticking(1e-6)
    assert Planner(*ARGS, budget=3600.0, clock=slow).plan() == Planner(*ARGS).plan()
    assert slow.reads > 0
