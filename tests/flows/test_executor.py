"""The flow executor alone (`headway.flows.executor`): which stage starts when, what a failure
reaches, and when a query is settled. Stages end by hand, in the order each test gives."""

from __future__ import annotations

from typing import Any

from headway.clock import ManualClock
from headway.errors import HeadwayError
from headway.flows.deadline import QueryDeadline
from headway.flows.executor import Executor, QueryRun, StageGraph


class Walk:
    """An executor over `graph` that records each stage it starts (with its inputs) and ends
    none but the source (stage 0, with the query's value) itself: the test ends them."""

    def __init__(self, graph: StageGraph) -> None:
        self.started: list[tuple[int, list[Any]]] = []
        self.settled: list[QueryRun] = []
        self.executor = Executor(graph, self.step, self.settled.append)
        deadline = QueryDeadline.starting(ManualClock(), 0.0, 1000.0)
        self.run = self.executor.start("q", deadline, "in")

    def step(self, run: QueryRun, stage: int, inputs: list[Any]) -> None:
        self.started.append((stage, inputs))
        if stage == 0:
            self.executor.finish(run, 0, inputs[0])

    def finish(self, stage: int, value: Any) -> None:
        self.executor.finish(self.run, stage, value)

    def fail(self, stage: int, error: BaseException) -> None:
        self.executor.fail(self.run, stage, error)


#: source 0 -> 1 and 2 -> 3 (a join of both) -> 4 (the sink)
DIAMOND = StageGraph([[], [0], [0], [1, 2], [3]], sink=4)
#: source 0 -> 1 and 2 -> 3 (an anyof: the first to answer) -> 4 (the sink)
RACE = StageGraph([[], [0], [0], [1, 2], [3]], sink=4, first=[3])


def test_a_stage_starts_once_every_input_answered_and_is_given_them_in_order() -> None:
    walk = Walk(DIAMOND)
    assert walk.started == [(0, ["in"]), (1, ["in"]), (2, ["in"])]
    walk.finish(2, "b")
    assert [stage for stage, _ in walk.started] == [0, 1, 2]  # the join waits for 1
    walk.finish(1, "a")
    assert walk.started[-1] == (3, ["a", "b"])
    walk.finish(3, "ab")
    walk.finish(4, "out")
    assert walk.settled == [walk.run]
    assert (walk.run.done, walk.run.value, walk.run.error) == (True, "out", None)


def test_an_anyof_starts_on_its_first_answer_and_a_late_one_is_ignored() -> None:
    walk = Walk(RACE)
    walk.fail(1, HeadwayError("one"))  # a failed input is no answer while another may come
    assert [stage for stage, _ in walk.started] == [0, 1, 2]
    walk.finish(2, "b")
    assert walk.started[-1] == (3, ["b"])
    walk.finish(1, "late")  # already ended: ignored
    assert [stage for stage, _ in walk.started] == [0, 1, 2, 3]


def test_an_anyof_fails_once_every_input_failed_with_the_first_error() -> None:
    walk = Walk(RACE)
    first, second = HeadwayError("first"), HeadwayError("second")
    walk.fail(2, first)
    assert walk.settled == []
    walk.fail(1, second)
    assert walk.run.error is first and walk.settled == [walk.run]
    assert [stage for stage, _ in walk.started] == [0, 1, 2]  # 3 and the sink never ran


def test_a_failure_fails_the_stages_that_read_it_and_the_query_at_once() -> None:
    walk = Walk(DIAMOND)
    error = HeadwayError("refused")
    walk.fail(1, error)  # 2 still runs, but the join cannot: the query has failed
    assert walk.run.error is error and walk.settled == [walk.run]
    walk.finish(2, "b")  # after the query settled: ignored
    assert [stage for stage, _ in walk.started] == [0, 1, 2]
    assert walk.settled == [walk.run]


def test_a_stage_may_end_inside_its_own_step() -> None:
    """The simulator ends a stage its query does not reach at once, inside `step`."""
    ended: list[Any] = []

    def step(run: QueryRun, stage: int, inputs: list[Any]) -> None:
        executor.finish(run, stage, f"{stage}({','.join(inputs)})")

    executor = Executor(DIAMOND, step, lambda run: ended.append(run.value))
    executor.start(0, QueryDeadline.starting(ManualClock(), 0.0, 1.0), "x")
    assert ended == ["4(3(1(0(x)),2(0(x))))"]


def test_without_a_sink_a_query_is_done_once_every_last_stage_is() -> None:
    """The simulator's pipelines: two inputs, a join of both, and a stage after the first
    alone; the query waits for the join and that stage, and answers None."""
    walk = Walk(StageGraph([[], [0], [0, 1], [0]]))  # 0 is the source of `Walk`
    assert [stage for stage, _ in walk.started] == [0, 1, 3]
    walk.finish(3, "d")
    walk.finish(1, "b")
    assert walk.started[-1] == (2, ["in", "b"]) and walk.settled == []
    walk.finish(2, "c")
    assert walk.settled == [walk.run] and walk.run.value is None
