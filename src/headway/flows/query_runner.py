"""One query of a flow app through its compiled stages: action stages through the controller
(a stage's own model, a fused chain, or competing copies; a model-less stage measured to be
cheap runs here, `flows.placement`), select operators through their policy, the other
frontend stages (union, anyof, join, lookup, groupby, agg) in this process.
Each call gets the time left of the query's deadline."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from headway.apps.config import ModelRef
from headway.control.controller import Controller
from headway.control.models import READY, Prediction
from headway.errors import HeadwayError, ModelError
from headway.flows.deadline import QueryDeadline
from headway.flows.flow import Flow
from headway.flows.local import filter_ahead, run_action, run_chain, run_stage
from headway.flows.lookups import Lookups
from headway.flows.model_inputs import check_rows, conform, frontend_calls, model_calls
from headway.flows.operators import Model, Shape, encode_inputs, select_rows
from headway.flows.placement import in_frontend
from headway.flows.plan import ACTION, SOURCE, Plan, Stage
from headway.flows.racing import Call, first, race, retrieve, withdraw
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
class Trace:
    """What one query did: the models it called, the selections it made (for feedback).

    `spans`, when the transport traces the query, takes a span per stage it ran:
    `spans.span(name, start, end, **attributes)`, times on the controller's clock."""

    called: list[str] = field(default_factory=list)
    selections: list[Made] = field(default_factory=list)
    spans: Any = None

    def stage(self, stage: Stage, start: float, end: float, rows_in: int, rows_out: int) -> None:
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


class QueryRunner:
    """Runs queries of one flow app; counts what its operators and actions did in `stats`."""

    def __init__(
        self,
        app: str,
        flow: Flow,
        plan: Plan,
        controller: Controller,
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

    async def run(self, table: Table, trace: Trace, deadline: QueryDeadline) -> Table:
        """The flow over one query's table: each stage starts once its inputs are done; each
        call it makes gets the time left until `deadline`."""
        futures: dict[int, asyncio.Future[Table]] = {}
        loop = asyncio.get_running_loop()
        try:
            for stage in self.plan.stages:
                if stage.kind == SOURCE:
                    futures[stage.id] = loop.create_future()
                    futures[stage.id].set_result(table)
                else:
                    inputs = [futures[i] for i in stage.inputs]
                    task = asyncio.ensure_future(self._stage(stage, inputs, trace, deadline))
                    task.add_done_callback(retrieve)
                    futures[stage.id] = task
            return await futures[self.plan.sink]
        finally:
            for future in futures.values():
                if not future.done():
                    future.cancel()

    async def _stage(
        self,
        stage: Stage,
        inputs: list[asyncio.Future[Table]],
        trace: Trace,
        deadline: QueryDeadline,
    ) -> Table:
        ops = self.plan.ops(stage)
        if isinstance(ops[0][0], AnyOf):
            tables = [await first(inputs)]
        else:
            tables = [await future for future in inputs]
        if stage.kind == ACTION:
            return await self._action(stage, tables[0], trace, deadline)
        clock = self.controller.clock
        started = clock.now()
        op, label = ops[0]
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
        self, stage: Stage, table: Table, trace: Trace, deadline: QueryDeadline
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
                call = self._submit(op.model, tensors, deadline.remaining(label))
                try:
                    prediction = await call[2]
                finally:
                    withdraw(self.controller, [call])  # cut off at the deadline: not run
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
        self, op: Select, label: str, table: Table, trace: Trace, deadline: QueryDeadline
    ) -> Table:
        """Each row: the policy's models through the controller, their answers combined."""
        shape = op.check([Shape(table.schema, table.group)], label)
        check_rows(model_calls(op, label), table, self.stage_models.signature, f"app {self.app!r}")
        ready = [m for m in op.models if self._ready(m)]

        async def one(values: tuple[Any, ...], qid: int) -> tuple[Any, ...]:
            tensors = encode_inputs(Table(table.schema, (values,), (qid,)), op.inputs, label)
            selection = op.choose(ready)
            left = deadline.remaining(label)
            calls = {m: self._submit(m, tensors, left) for m in selection.models}
            answers: dict[str, Any] = {}
            try:
                for model, (_, _, future) in calls.items():
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

    def _submit(self, key: str, tensors: dict[str, np.ndarray], timeout: float) -> Call:
        """Call a repository model with `timeout` seconds (what is left of the query's); its
        numbers in the model's datatypes where they hold them exactly (`conform`)."""
        ref = ModelRef.parse(key, f"app {self.app!r}")
        version = None if ref.version is None else str(ref.version)
        tensors = conform(self.stage_models.signature(key), dict(tensors))
        future = self.controller.submit(ref.name, tensors, version=version, timeout=timeout)
        return ref.name, version, future

    async def _compete(
        self, stage: Stage, tensors: dict[str, np.ndarray], deadline: QueryDeadline
    ) -> Prediction:
        """The rows go to the stage `replicas` times (a competing stage's model has that many
        replicas and batches nothing, so the copies run on different workers); the first good
        answer wins and the copies still queued are withdrawn (`racing.race`)."""
        (name,) = self.stage_models.names[stage.id]
        return await race(
            self.controller, name, tensors, stage.replicas, lambda: deadline.remaining(stage.name)
        )
