"""A deployed flow: an application whose queries run the flow's compiled stages.

Each action stage is served by the controller as a model (deadlines, batching across queries,
replicas, the queue); frontend stages run here, beside the lookups. docs/flows.md describes
the behaviour.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from headway.apps.application import FeedbackResult, UnknownQuery
from headway.apps.config import AppConfig, ModelRef
from headway.control.controller import Controller
from headway.control.measuring import WARMUP_RUNS
from headway.control.models import READY, Prediction
from headway.errors import ConfigError, DeadlineUnmeetable, HeadwayError, InvalidInput, ModelError
from headway.flows.deadline import QueryDeadline, explanation
from headway.flows.flow import Flow, Options
from headway.flows.local import run_action, run_stage
from headway.flows.lookups import Lookups
from headway.flows.operators import Model, Shape, encode_inputs, select_rows
from headway.flows.plan import ACTION, SOURCE, Plan, Stage
from headway.flows.racing import Call, first, race, retrieve, withdraw
from headway.flows.relational import AnyOf
from headway.flows.select import Select
from headway.flows.source import load_flow, split_spec
from headway.flows.stats import FlowStats
from headway.flows.tensors import KEEP, TIMES, from_tensors, to_tensors
from headway.flows.types import Table
from headway.flows.warmup import stage_inputs
from headway.repository import ModelConfig
from headway.selection import Selection, StateRegistry
from headway.selection.losses import plain

log = logging.getLogger("headway.flows")
_generations = itertools.count(1)
#: Queries whose selections feedback can still reach, per flow application.
SELECTION_LOG = 10_000
#: Memory reserved for a stage model of functions only, before it is measured.
STAGE_MB = 16.0
#: How often starting checks whether the stage models' warm-up ended.
WARM_POLL_S = 0.02


class _Frontend:
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
    selections: list[tuple[str, Selection, dict[str, Any]]] = field(default_factory=list)
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


class FlowApplication:
    """An application that answers with a flow.

    A stage that is one model operator *is* that repository model; any other action stage (a
    fused chain, with or without a model) is registered as a model of framework `flow` whose
    worker runs the whole chain in one action (`headway.adapters.flow_adapter`). A competing
    stage's model has `compete_replicas` replicas (distinct workers) and batch size 1; each query
    sends it that many copies, and the first answer wins. Frontend stages (union, anyof, join,
    lookup, groupby, agg) run in this process.

    A query is one input row: `{"input": row}` answers `{"query_id", "output": [sink rows],
    "default": false, "models": [models called]}`, the shape of a selection app's answer. The app's
    `slo_ms` is the whole query's deadline (`headway.flows.deadline`): each call gets the time left,
    and a query that cannot make it is answered with the app's `default_output`, flagged `default`.
    Before the app is ready its stage models are warm (`headway.flows.warmup`), as single models
    are before the server is ready."""

    def __init__(
        self, config: AppConfig, controller: Controller, lookups: Lookups, flow: Flow | None = None
    ) -> None:
        assert config.flow is not None
        self.config = config
        self.controller = controller
        self.services = _Frontend(lookups)
        self.flow = flow or load_flow(config.flow, f"app {config.name!r}")
        self.plan: Plan = self.flow.compile(flow_options(config, self.flow.options))
        self.stats = FlowStats(self.plan)
        self.stage_models: dict[int, list[str]] = {}
        self._loading: asyncio.Future[Any] | None = None
        self.selects = {
            label: op for stage in self.plan.stages if stage.kind != SOURCE
            for op, label in self.plan.ops(stage) if isinstance(op, Select)
        }  # fmt: skip
        self.selections: OrderedDict[str, list[tuple[str, Selection, dict[str, Any]]]] = (
            OrderedDict()
        )
        self._dirty: set[str] = set()
        self._register()

    @property
    def name(self) -> str:
        return self.config.name

    # -- serving the stages ------------------------------------------------------------------
    def _register(self) -> None:
        generation = next(_generations)
        for stage in self.plan.stages:
            if stage.kind != ACTION:
                continue
            if _direct(stage):
                self.stage_models[stage.id] = [stage.models[0]]
                continue
            name = f"flow.{self.name}.{generation}.s{stage.id}"
            self.controller.repository.models[name] = replace(self._stage_config(stage), name=name)
            self.stage_models[stage.id] = [name]

    def _stage_config(self, stage: Stage) -> ModelConfig:
        """A stage's model: its chain's models go with it; it takes their batching."""
        repository = self.controller.repository
        wires: dict[str, Any] = {}
        inherit: ModelConfig | None = None
        for key in stage.models:
            ref = ModelRef.parse(key, f"app {self.name!r}: flow model")
            found = repository.get(ref.name)
            if ref.version is not None:
                found = repository.version(ref.name, ref.version)
            wires[key] = found.to_wire()
            inherit = inherit or found
        assert self.config.flow is not None
        path, _ = split_spec(self.config.flow, f"app {self.name!r}")
        batch = (inherit.max_batch_size if inherit else 32) if stage.batching else 1
        replicas = inherit.replicas if inherit else 1
        if stage.replicas > 1:  # competing copies of a query run apart, one per worker
            batch, replicas = 1, stage.replicas
        return ModelConfig(
            name=f"flow.{self.name}",
            version=1,
            framework="flow",
            path=path.parent,
            max_batch_size=batch,
            batch_delay_ms=inherit.batch_delay_ms if inherit else 0.0,
            slo_ms=max(inherit.slo_ms if inherit else 0.0, self.config.slo_ms),
            replicas=replicas,
            memory_mb=(inherit.memory_mb or STAGE_MB) if inherit else STAGE_MB,
            options={
                "flow": f"{path}:{self.config.flow.rpartition(':')[2]}",
                "stage": stage.id,
                "operators": list(stage.operators),
                "compiler": asdict(self.plan.options),
                "models": wires,
            },
        )

    def _own_models(self) -> list[str]:
        return [
            n for s in self.plan.stages if not _direct(s) for n in self.stage_models.get(s.id, [])
        ]

    def start(self) -> asyncio.Future[Any]:
        """Load the stage models (and pinned model versions) and warm them up; done when all
        loads answered and every stage model's warm-up and sweep of batch sizes ended."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._start())
        return self._loading

    async def _start(self) -> None:
        loads: list[Awaitable[Any]] = [self.controller.load(n) for n in self._own_models()]
        for stage in self.plan.stages:
            if _direct(stage):
                ref = ModelRef.parse(stage.models[0], f"app {self.name!r}")
                if ref.version is not None:
                    loads.append(self.controller.load(ref.name, str(ref.version)))
        await asyncio.gather(*loads, return_exceptions=True)
        try:
            self._warm_up()
        except Exception:  # best effort: a stage that cannot be warmed serves cold
            log.exception("app %s: warming up its stages failed", self.name)
        while self._warming():
            await asyncio.sleep(WARM_POLL_S)

    def _warm_up(self) -> None:
        """Warm each fused stage's model with rows of zeros of its input columns (the
        controller warms repository models itself, but cannot make up a stage's inputs)."""
        for stage in self.plan.stages:
            if stage.kind != ACTION or _direct(stage):
                continue
            state = self.controller.served(self.stage_models[stage.id][0])
            if state is None or state.state != READY:
                continue
            first = self.flow.nodes[stage.nodes[0]].inputs[0].shape
            mine = [op for op, _ in self.plan.ops(stage)]
            ops = [*mine, *(n.op for n in self.flow.nodes if n.op is not None and n.op not in mine)]
            specs = stage_inputs(first.schema, ops, self._signature)
            if specs is not None:
                self.controller.measuring.warm_up(replace(state.config, inputs=specs), WARMUP_RUNS)

    def _signature(self, key: str) -> tuple[Any, ...]:
        ref = ModelRef.parse(key, f"app {self.name!r}")
        state = self.controller.served(ref.name, ref.version)
        return () if state is None else state.config.inputs

    def _warming(self) -> list[str]:
        """The stage models (this app's and the repository models it calls) still warming."""
        warming = self.controller.measuring.warming
        return [name for name, key in self._stage_keys().items() if key in warming]

    def _stage_keys(self) -> dict[str, str]:
        keys = {}
        for names in self.stage_models.values():
            for name in names:
                ref = ModelRef.parse(name, "") if "@" in name else ModelRef(name)
                state = self.controller.served(ref.name, ref.version)
                if state is not None:
                    keys[name] = state.config.key
        return keys

    async def stop(self) -> None:
        """Unload the stage models (the app was deleted or replaced)."""
        for name in self._own_models():
            try:
                await self.controller.unload(name)
            except HeadwayError as exc:
                log.warning("app %s: unloading %s: %s", self.name, name, exc.message)
            self.controller.repository.models.pop(name, None)

    def ready_models(self) -> list[str]:
        """The stage models that serve now and are warm."""
        ready = []
        warming = self.controller.measuring.warming
        for names in self.stage_models.values():
            for name in names:
                ref = ModelRef.parse(name, "") if "@" in name else ModelRef(name)
                state = self.controller.served(ref.name, ref.version)
                if state is not None and state.state == READY and state.config.key not in warming:
                    ready.append(name)
        return ready

    # -- queries -----------------------------------------------------------------------------
    async def predict(
        self, value: Any, user: str | None = None, spans: Any = None
    ) -> dict[str, Any]:
        """One query's answer; `spans`: see `Trace`."""
        return await self._answer(self.flow.table([value]), spans)

    async def predict_many(
        self, values: list[Any], user: str | None = None, spans: Any = None
    ) -> list[dict[str, Any]]:
        tables = [self.flow.table([value]) for value in values]  # all checked before any runs
        return list(await asyncio.gather(*(self._answer(t, spans) for t in tables)))

    async def _answer(self, table: Table, spans: Any = None) -> dict[str, Any]:
        """One query, answered by its deadline: the sink's rows, or the default output when
        a stage cannot make the deadline or the flow has not finished by then."""
        clock = self.controller.clock
        started = clock.now()
        trace = Trace(spans=spans)
        deadline = QueryDeadline.starting(clock, started, self.config.slo_ms)
        running = asyncio.ensure_future(self.run(table, trace, deadline))
        cut: list[bool] = []

        def cut_off() -> None:
            if not running.done():
                cut.append(True)
                running.cancel()

        timer = clock.call_at(deadline.at, cut_off)
        output: Table | None = None
        missed: DeadlineUnmeetable | None = None
        try:
            output = await running
        except asyncio.CancelledError:
            if not cut:
                raise
        except DeadlineUnmeetable as exc:
            missed = exc
        except Exception:
            self.stats.failed += 1
            raise
        finally:
            timer.cancel()
        self.stats.queries += 1
        self.stats.latency.observe(clock.now() - started)
        query_id = uuid.uuid4().hex
        if trace.selections:
            self.selections[query_id] = trace.selections
            while len(self.selections) > SELECTION_LOG:
                self.selections.popitem(last=False)
        answer = {
            "query_id": query_id,
            "output": self.config.default_output if output is None else output.records(),
            "default": output is None,
            "models": list(dict.fromkeys(trace.called)),
        }
        if output is None:
            self.stats.defaults += 1
            answer["default_explanation"] = explanation(missed, self.config.slo_ms)
        return answer

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
        if not table.rows:  # nothing to send: the operators make their empty table here
            return run_action(ops, table, self.services)
        clock = self.controller.clock
        started = clock.now()
        try:
            if _direct(stage):
                ((op, label),) = ops
                assert isinstance(op, Model)
                tensors = op.encode(table, label)
                call = self._submit(op.model, tensors, deadline.remaining(label))
                try:
                    prediction = await call[2]
                finally:
                    withdraw(self.controller, [call])  # cut off at the deadline: not run
                out = op.decode(table, prediction.outputs, label)
                seconds = [clock.now() - started]
            else:
                tensors = to_tensors(table, stage.name)
                outputs = (await self._compete(stage, tensors, deadline)).outputs
                last = self.flow.nodes[stage.nodes[-1]].shape
                out = from_tensors(last.schema, outputs, table.qids)
                out = Table(out.schema, out.rows, out.qids, last.group)
                if KEEP in outputs:
                    out = select_rows(out, outputs[KEEP].tolist())
                seconds = outputs[TIMES].sum(axis=0).tolist()
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
        self._dirty.add(label)
        return Table.build(shape.schema, rows, table.qids, group=shape.group, where=label)

    def _ready(self, key: str) -> bool:
        ref = ModelRef.parse(key, f"app {self.name!r}")
        state = self.controller.served(ref.name, ref.version)
        return state is not None and state.state == READY

    def _submit(self, key: str, tensors: dict[str, np.ndarray], timeout: float) -> Call:
        """Call a repository model with `timeout` seconds (what is left of the query's)."""
        ref = ModelRef.parse(key, f"app {self.name!r}")
        version = None if ref.version is None else str(ref.version)
        future = self.controller.submit(ref.name, tensors, version=version, timeout=timeout)
        return ref.name, version, future

    async def _compete(
        self, stage: Stage, tensors: dict[str, np.ndarray], deadline: QueryDeadline
    ) -> Prediction:
        """The rows go to the stage `replicas` times (a competing stage's model has that many
        replicas and batches nothing, so the copies run on different workers); the first good
        answer wins and the copies still queued are withdrawn (`racing.race`)."""
        (name,) = self.stage_models[stage.id]
        return await race(
            self.controller, name, tensors, stage.replicas, lambda: deadline.remaining(stage.name)
        )

    # -- feedback and learned state (the registry's interface) -------------------------------
    async def feedback(
        self, label: Any, *, query_id: str | None = None, value: Any = None, user: str | None = None
    ) -> FeedbackResult:
        """Teach each selection the query made (found by its query id) its true label."""
        if not self.selects:
            raise InvalidInput(
                f"app {self.name!r} is a flow without a select operator: no feedback"
            )
        made = self.selections.get(query_id or "")
        if made is None:
            raise UnknownQuery(
                f"app {self.name!r}: unknown query id {query_id!r} (the last {SELECTION_LOG} "
                "queries that made a selection are kept)"
            )
        losses: dict[str, float] = {}
        for op_label, selection, answers in made:
            op = self.selects[op_label]
            try:
                judged = op.registry.observe(label, answers, selection)
            except (ValueError, TypeError) as exc:
                raise InvalidInput(f"app {self.name!r}: label {label!r:.80}: {exc}") from None
            losses.update({f"{op_label}/{m}": loss for m, loss in judged.items()})
            self._dirty.add(op_label)
        updates = sum(op.registry.app.updates for op in self.selects.values())
        return FeedbackResult(query_id, user, None, losses, updates)

    def take_dirty(self) -> dict[str, dict[str, Any]]:
        """The learned state of each select operator changed since the last call, as store
        rows keyed `select:<operator>`."""
        rows = {f"select:{label}": self.selects[label].registry.to_dict() for label in self._dirty}
        self._dirty = set()
        return rows

    def mark_all_dirty(self) -> None:
        self._dirty.update(self.selects)

    def restore(self, rows: dict[str, dict[str, Any]]) -> None:
        """Carry over the select operators' stored state (when their policy is the same)."""
        for label, op in self.selects.items():
            row = rows.get(f"select:{label}")
            if row is None or row.get("policy", {}).get("name") != op.policy:
                continue
            try:
                op.registry = StateRegistry.from_dict(row)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("app %s: %s: stored state unusable (%s)", self.name, label, exc)

    def statistics(self) -> dict[str, Any]:
        return self.stats.to_dict()

    def describe(self) -> dict[str, Any]:
        plan = self.plan.describe()
        for stage in plan["stages"]:
            stage["served_as"] = self.stage_models.get(stage["id"], [])
        selection = {
            label: [asdict(m) for m in op.registry.statistics().models]
            for label, op in self.selects.items()
        }
        return {
            "name": self.name,
            "config": self.config.to_dict(),
            "flow": plan,
            "ready": self.ready_models(),
            "statistics": {**self.statistics(), "selection": selection},
        }


def _direct(stage: Stage) -> bool:
    """A stage that is one model operator is served as that repository model itself (its
    batching, replicas, cache), unless batching is off for the flow."""
    return stage.only_model and stage.batching


def flow_options(config: AppConfig, defaults: Options) -> Options:
    """The flow's own options, overridden by the application's settings."""
    chosen = {
        key: getattr(config, key)
        for key in ("fusion", "compete", "compete_replicas", "batching")
        if getattr(config, key) is not None
    }
    return replace(defaults, **chosen)


def check_flow(config: AppConfig, repository: Any, base: Path | None = None) -> None:
    """At configuration time: the flow builds, and its models are in the repository."""
    assert config.flow is not None
    where = f"app {config.name!r}"
    flow = load_flow(config.flow, where, base)
    plan = flow.compile(flow_options(config, flow.options))
    for stage in plan.stages:
        for key in stage.models:
            ref = ModelRef.parse(key, f"{where}: flow model")
            if ref.name not in repository:
                raise ConfigError(
                    f"{where}: the flow calls model {key!r}, which is not in the repository"
                )
