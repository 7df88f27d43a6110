"""The flow executor: one query through a DAG of stages, without I/O.

A stage starts once its inputs are done -- all of them, or, for a stage that takes the first
to answer (an anyof), the first that succeeds; a stage without inputs starts with the query.
The query is done when its sink is (or, in a graph without one, when every last stage is). A
stage that fails fails the stages that read it (an anyof only once every input failed), and
the query with its sink. How a stage runs is the caller's `step`: the served flow
(`flows.query_runner`) runs a compiled flow's operators and asks the controller for its model
calls; the simulator (`sim.pipeline`) asks the simulated controller for the planner's stages.
Both walk the stages with this code, and both make each call with what is left of the query's
deadline (`flows.calls.call`), so a plan's estimate and the served flow cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from headway.flows.deadline import QueryDeadline


class StageGraph:
    """The stages an executor walks, numbered 0..n-1 so that inputs come first: each stage's
    inputs, the stages that take the first input to answer (`first`) rather than wait for
    all, and the `sink` whose answer is the query's (None: the query is done once every stage
    that no other reads is, and answers None)."""

    __slots__ = ("children", "ends", "first", "gather", "inputs", "sink", "sources", "waits")

    def __init__(
        self, inputs: Sequence[Sequence[int]], sink: int | None = None, first: Iterable[int] = ()
    ) -> None:
        self.inputs = tuple(tuple(i) for i in inputs)
        self.sink = sink
        self.first = frozenset(first)
        children: list[list[int]] = [[] for _ in self.inputs]
        for stage, above in enumerate(self.inputs):
            for parent in above:
                children[parent].append(stage)
        self.children = tuple(tuple(c) for c in children)
        self.sources = tuple(s for s, above in enumerate(self.inputs) if not above)
        #: Whether the query waits for each stage: the sink, or every stage no other reads.
        self.ends = tuple(
            s == sink if sink is not None else not children[s] for s in range(len(children))
        )
        #: How many inputs must answer before each stage starts.
        self.waits = tuple(
            1 if s in self.first else len(above) for s, above in enumerate(self.inputs)
        )
        #: The inputs a stage is given, where not only the one that completed it.
        self.gather = tuple(
            None if s in self.first or len(above) == 1 else above
            for s, above in enumerate(self.inputs)
        )


#: `QueryRun.left` of a stage running, and of a stage done (answered or failed); a stage
#: waiting holds the number of inputs it still awaits.
RUNNING, DONE = 0, -1


class QueryRun:
    """One query's walk: each stage's inputs still awaited (`left`) and its answer.

    `key` is the caller's name for the query; `deadline` the query's, which every call its
    stages make is given what is left of. Once `done`, `error` is None and `value` the sink's
    answer, or `error` says why the query failed."""

    __slots__ = ("deadline", "done", "error", "failures", "key", "left", "open", "value", "values")

    def __init__(self, graph: StageGraph, key: Any, deadline: QueryDeadline) -> None:
        self.key = key
        self.deadline = deadline
        self.left = list(graph.waits)
        self.values: list[Any] = [None] * len(graph.waits)
        #: The stages the query still waits for (`StageGraph.ends`).
        self.open = sum(graph.ends)
        #: per stage that takes the first input: the first error of its inputs
        self.failures: dict[int, BaseException] | None = None
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None


#: How a stage runs: `step(run, stage, inputs)` with its inputs' answers (one, for a stage that
#: takes the first; the query's value, for a stage without inputs); it ends with
#: `Executor.finish` or `Executor.fail`, inside the call or later.
Step = Callable[[QueryRun, int, list[Any]], None]
#: What happens when a query is done (`QueryRun.done`): answered or failed.
OnSettled = Callable[[QueryRun], None]


class Executor:
    """Walks queries through `graph`: `start` a query, and tell it each stage's end (`finish`,
    `fail`); it starts each stage through `step` once its inputs are done, and calls
    `settled(run)` once the query is done or failed. A stage ended after its query was
    settled is ignored (its answer is no longer wanted)."""

    __slots__ = ("children", "ends", "gather", "graph", "settled", "step")

    def __init__(self, graph: StageGraph, step: Step, settled: OnSettled) -> None:
        self.graph = graph
        self.step = step
        self.settled = settled
        # the graph's parts read at every stage's end
        self.children, self.ends, self.gather = graph.children, graph.ends, graph.gather

    def start(self, key: Any, deadline: QueryDeadline, value: Any) -> QueryRun:
        """A query: its stages without inputs start, each given `value`."""
        run = QueryRun(self.graph, key, deadline)
        step = self.step
        for source in self.graph.sources:
            step(run, source, [value])
            if run.done:
                break
        return run

    def finish(self, run: QueryRun, stage: int, value: Any) -> None:
        """`stage` answered `value`: the stages it completes start."""
        left = run.left
        if run.done or left[stage] == DONE:
            return
        left[stage] = DONE
        values = run.values
        values[stage] = value
        if self.ends[stage]:
            run.open -= 1
            if not run.open:
                run.done, run.value = True, value if stage == self.graph.sink else None
                self.settled(run)
                return
        gather, step = self.gather, self.step
        for child in self.children[stage]:
            if left[child] <= RUNNING:
                continue
            left[child] -= 1
            if left[child] != RUNNING:
                continue
            inputs = gather[child]
            step(run, child, [value] if inputs is None else [values[i] for i in inputs])
            if run.done:
                return

    def fail(self, run: QueryRun, stage: int, error: BaseException) -> None:
        """`stage` failed with `error`: so do the stages that read it (a stage that takes the
        first input once all its inputs failed, with the first error), and the query with the
        first stage it waits for that fails."""
        left = run.left
        if run.done or left[stage] == DONE:
            return
        left[stage] = DONE
        if self.ends[stage]:
            run.done, run.error = True, error
            self.settled(run)
            return
        first, inputs = self.graph.first, self.graph.inputs
        for child in self.children[stage]:
            if left[child] <= RUNNING:
                continue
            reason = error
            if child in first:  # it fails once every input failed, with the first error
                failures = run.failures = run.failures or {}
                reason = failures.setdefault(child, error)
                if any(left[i] != DONE for i in inputs[child]):
                    continue
            left[child] = RUNNING
            self.fail(run, child, reason)
            if run.done:
                return
