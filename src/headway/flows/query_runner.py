"""One query of a flow app through its compiled stages: the flow executor (`flows.executor`)
starts each stage once its inputs are done, and this runs it: action stages through the
controller (a stage's own model, a fused chain, or competing copies; a model-less stage
measured to be cheap runs here, `flows.placement`), select operators through their policy,
the other frontend stages (union, anyof, join, lookup, groupby, agg) in this process.
Each call gets the time left of the query's deadline (`flows.calls.call`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from headway.apps.config import ModelRef
from headway.control.doors import Serving
from headway.control.models.states import READY
from headway.control.request import Prediction
from headway.errors import HeadwayError, ModelError
from headway.flows.calls import Call, call, race, withdraw
from headway.flows.deadline import QueryDeadline
from headway.flows.executor import Executor, QueryRun, StageGraph
from headway.flows.flow import Flow
from headway.flows.local import filter_ahead, run_action, run_chain, run_stage
from headway.flows.lookups import Lookups
from headway.flows.model_inputs import check_rows, conform, frontend_calls, model_calls
from headway.flows.operators import Model, Shape, encode_inputs, select_rows
from headway.flows.placement import in_frontend
from headway.flows.plan import ACTION, SOURCE, FlowPlan, FlowStage
from headway.flows.relational import AnyOf
from headway.flows.select import Select
from headway.flows.select_state import Made, SelectState
from headway.flows.stage_models import StageModels, served_directly
from headway.flows.stats import FlowStats
from headway.flows.tensors import KEEP, TIMES, from_tensors, to_tensors
from headway.flows.types import Table
from headway.selection.losses import plain


class FrontendServices:
    """The services of frontend stages: lookups; models are never called here."""

    def __init__(self, lookups: Lookups) -> None:
        self.lookups = lookups

    def predict(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise ModelError(f"model {model!r} is called by an action, not in the frontend")

    def lookup(self, key: str) -> Any:
        return self.lookups.lookup(key)


@dataclass
class QueryTrace:
    """What one query did: the models it called, the selections it made (for feedback).

    `spans`, when the transport traces the query, takes a span per stage it ran:
    `spans.span(name, start, end, **attributes)`, times on the controller's clock."""

    called: list[str] = field(default_factory=list)
    selections: list[Made] = field(default_factory=list)
    spans: Any = None

    def stage(
        self, stage: FlowStage, start: float, end: float, rows_in: int, rows_out: int
    ) -> None:
        if self.spans is None:
            return
        name = (
            f"operator {stage.operators[0]}"
            if len(stage.operators) == 1
            else f"action {stage.name}"
        )
        self.spans.span(
            name, start, end, **{"flow.operators": list(stage.operators), "rows.in": rows_in,
                                 "rows.out": rows_out}
        )  # fmt: skip


class QueryAnswer(asyncio.Future[Table]):
    """One query's answer, set when the executor settles it; cancelling it (the query is cut
    off at its deadline) cancels the stages still running at once, as cancelling a task
    cancels what it awaits, so that their calls are withdrawn before they can answer."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        #: The query's stage tasks.
        self.running: list[asyncio.Future[Table]] = []

    def settle(self, run: QueryRun) -> None:
        if self.done():
            return
        if isinstance(run.error, asyncio.CancelledError):
            self.cancel()
        elif run.error is not None:
            self.set_exception(run.error)
        else:
            self.set_result(run.value)

    def cancel(self, msg: Any = None) -> bool:
        self.stop()
        return super().cancel(msg)

    def stop(self) -> None:
        """Cancel the stages still running."""
        for task in self.running:
            if not task.done():
                task.cancel()


class QueryRunner:
    """Runs queries of one flow app; counts what its operators and actions did in `stats`."""

    def __init__(
        self,
        app: str,
        flow: Flow,
        plan: FlowPlan,
        controller: Serving,
        lookups: Lookups,
        stage_models: StageModels,
        selects: SelectState,
        stats: FlowStats,
    ) -> None:
        self.app = app
        self.flow = flow
        self.plan = plan
        self.controller = controller
        self.services = FrontendServices(lookups)
        self.stage_models = stage_models
        self.selects = selects
        self.stats = stats
        #: Per action stage, the model calls each query's rows are checked against before it is
        #: sent (`flows.model_inputs`).
        self.checked = {
            stage.id: frontend_calls(plan.ops(stage))
            for stage in plan.stages
            if stage.kind == ACTION
        }
        self.sources = frozenset(s.id for s in plan.stages if s.kind == SOURCE)
        #: The stages as the executor walks them: an anyof takes its first input to answer.
        self.graph = StageGraph(
            [stage.inputs for stage in plan.stages],
            plan.sink,
            first=[
                s.id
                for s in plan.stages
                if s.kind != SOURCE and isinstance(plan.ops(s)[0][0], AnyOf)
            ],
        )

    async def run(self, table: Table, trace: QueryTrace, deadline: QueryDeadline) -> Table:
        """The flow over one query's table: each stage starts once its inputs are done
        (`flows.executor`), as a task of its own; each call it makes gets the time left until
        `deadline`. Cancelled (the query is cut off), its stages still running are too."""
        answer = QueryAnswer(loop=asyncio.get_running_loop())

        def step(run: QueryRun, stage: int, inputs: list[Table]) -> None:
            if stage in self.sources:  # the query's table
                executor.finish(run, stage, inputs[0])
                return
            work = self._stage(self.plan.stages[stage], inputs, trace, deadline)
            task = asyncio.ensure_future(work)
            answer.running.append(task)
            task.add_done_callback(partial(ended, run, stage))

        def ended(run: QueryRun, stage: int, task: asyncio.Future[Table]) -> None:
            if task.cancelled():
                executor.fail(run, stage, asyncio.CancelledError())
            elif (error := task.exception()) is not None:
                executor.fail(run, stage, error)
            else:
                executor.finish(run, stage, task.result())

        executor = Executor(self.graph, step, answer.settle)
        try:
            executor.start(None, deadline, table)
            return await answer
        finally:
            answer.stop()

    async def _stage(
        self, stage: FlowStage, tables: list[Table], trace: QueryTrace, deadline: QueryDeadline
    ) -> Table:
        if stage.kind == ACTION:
            return await self._action(stage, tables[0], trace, deadline)
        clock = self.controller.clock
        started = clock.now()
        op, label = self.plan.ops(stage)[0]
        if isinstance(op, Select):
            out = await self._select(op, label, tables[0], trace, deadline)
        else:
            out = run_stage(self.plan, stage, tables, self.services)
        rows_in = sum(len(t) for t in tables)
        ended = clock.now()
        self.stats.operators[stage.operators[0]].observe(rows_in, len(out), ended - started)
        trace.stage(stage, started, ended, rows_in, len(out))
        return out

    async def _action(
        self, stage: FlowStage, table: Table, trace: QueryTrace, deadline: QueryDeadline
    ) -> Table:
        ops = self.plan.ops(stage)
        clock = self.controller.clock
        started = clock.now()
        try:
            sent, ahead = filter_ahead(ops, table)
        except Exception:
            self.stats.failed_stage(stage.operators)
            raise
        if not sent.rows or len(ahead) == len(ops) or in_frontend(stage, self.stats.operators):
            try:  # nothing to send, nothing left to run, or a model-less stage cheap enough
                if sent.rows and len(ahead) < len(ops):
                    out, _, rest = run_chain(ops[len(ahead) :], sent, self.services)
                    ahead = [*ahead, *rest]
                else:
                    out = run_action(ops, sent, self.services) if not sent.rows else sent
            except Exception:
                self.stats.failed_stage(stage.operators)
                raise
            if ahead:  # the stage ran, here
                ended = clock.now()
                self.stats.action(stage.operators, len(table), len(out), ahead, ended - started)
                trace.stage(stage, started, ended, len(table), len(out))
            return out
        check_rows(self.checked[stage.id], sent, self.stage_models.signature, f"app {self.app!r}")
        try:
            if served_directly(stage):
                ((op, label),) = ops
                assert isinstance(op, Model)
                tensors = op.encode(sent, label)
                made = self._call(op.model, tensors, deadline, label)
                try:
                    prediction = await made[1]
                finally:
                    withdraw(self.controller, [made])  # cut off at the deadline: not run
                out = op.decode(sent, prediction.outputs, label)
                seconds = [clock.now() - started]
            else:
                tensors = to_tensors(sent, stage.name)
                outputs = (await self._compete(stage, tensors, deadline)).outputs
                last = self.flow.nodes[stage.nodes[-1]].shape
                out = from_tensors(last.schema, outputs, sent.qids)
                out = Table(out.schema, out.rows, out.qids, last.group)
                if KEEP in outputs:
                    out = select_rows(out, outputs[KEEP].tolist())
                # the leading filters ran here, the rest of the chain on the worker
                seconds = [*ahead, *outputs[TIMES].sum(axis=0).tolist()]
        except Exception:
            self.stats.failed_stage(stage.operators)
            raise
        trace.called.extend(stage.models)
        ended = clock.now()
        self.stats.action(stage.operators, len(table), len(out), seconds, ended - started)
        trace.stage(stage, started, ended, len(table), len(out))
        return out

    async def _select(
        self, op: Select, label: str, table: Table, trace: QueryTrace, deadline: QueryDeadline
    ) -> Table:
        """Each row: the policy's models through the controller, their answers combined."""
        shape = op.check([Shape(table.schema, table.group)], label)
        check_rows(model_calls(op, label), table, self.stage_models.signature, f"app {self.app!r}")
        ready = [m for m in op.models if self._ready(m)]

        async def one(values: tuple[Any, ...], qid: int) -> tuple[Any, ...]:
            tensors = encode_inputs(Table(table.schema, (values,), (qid,)), op.inputs, label)
            selection = op.choose(ready)
            calls = {m: self._call(m, tensors, deadline, label) for m in selection.models}
            answers: dict[str, Any] = {}
            try:
                for model, (_, future) in calls.items():
                    try:
                        answers[model] = op.answer((await future).outputs)
                    except HeadwayError:
                        continue
            finally:
                withdraw(self.controller, list(calls.values()))  # cut off: the rest not run
            trace.called.extend(answers)
            trace.selections.append((label, selection, answers))
            decision = op.decide(answers, selection)
            return (*values, plain(decision.output), float(decision.confidence))

        rows = await asyncio.gather(
            *(one(v, q) for v, q in zip(table.rows, table.qids, strict=True))
        )
        self.selects.changed(label)
        return Table.build(shape.schema, rows, table.qids, group=shape.group, where=label)

    def _ready(self, key: str) -> bool:
        ref = ModelRef.parse(key, f"app {self.app!r}")
        state = self.controller.served(ref.name, ref.version)
        return state is not None and state.state == READY

    def _call(
        self, key: str, tensors: dict[str, np.ndarray], deadline: QueryDeadline, where: str
    ) -> Call:
        """Call a repository model with what is left of the query's `deadline`; its numbers
        in the model's datatypes where they hold them exactly (`conform`)."""
        ref = ModelRef.parse(key, f"app {self.app!r}")
        version = None if ref.version is None else str(ref.version)
        tensors = conform(self.stage_models.signature(key), dict(tensors))
        return call(self.controller, ref.name, version, tensors, deadline, where)

    async def _compete(
        self, stage: FlowStage, tensors: dict[str, np.ndarray], deadline: QueryDeadline
    ) -> Prediction:
        """The rows go to each of the stage's models: one, or a competing stage's copies (each
        a model of its own, on a worker of its own, batching nothing); the first good answer
        wins and the copies still queued are withdrawn (`calls.race`)."""
        names = self.stage_models.names[stage.id]
        return await race(self.controller, names, tensors, deadline, stage.name, self.stats.races)
