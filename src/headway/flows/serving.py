"""A deployed flow: an application whose queries run the flow's compiled stages.

Each action stage is served by the controller as a model (deadlines, batching across queries,
replicas, the queue; `headway.flows.stage_models`); frontend stages run here, beside the lookups
(`headway.flows.query_runner`). docs/flows.md describes the behaviour.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from functools import partial
from typing import Any

from headway.apps.application import FeedbackResult
from headway.apps.config import AppConfig
from headway.control.doors import Serving
from headway.errors import DeadlineUnmeetable
from headway.flows.deadline import QueryDeadline, explanation
from headway.flows.flow import Flow
from headway.flows.lookups import Lookups
from headway.flows.model_inputs import check_types
from headway.flows.plan import FlowPlan, PlannedSize
from headway.flows.query_runner import QueryRunner, QueryTrace
from headway.flows.select_state import SelectState
from headway.flows.source import load_flow
from headway.flows.stage_models import StageModels, model_signature
from headway.flows.stats import FlowStats
from headway.flows.types import Table


class FlowApplication:
    """An application that answers with a flow.

    Its action stages are served as models (`StageModels`): a competing stage's model has
    `compete_replicas` replicas; each query sends it that many copies, and the first answer wins.
    Frontend stages (union, anyof, join, lookup, groupby, agg) run in this process.

    A query is one input row: `{"input": row}` answers `{"query_id", "output": [sink rows],
    "default": false, "models": [models called]}`, the shape of a selection app's answer. The app's
    `slo_ms` is the whole query's deadline (`headway.flows.deadline`): each call gets the time left,
    and a query that cannot make it is answered with the app's `default_output`, flagged `default`.
    Before the app is ready its stage models are warm (`headway.flows.warmup`), as single models
    are before the server is ready."""

    def __init__(
        self,
        config: AppConfig,
        controller: Serving,
        lookups: Lookups,
        flow: Flow | None = None,
        planned: Mapping[str, PlannedSize] | None = None,
    ) -> None:
        assert config.flow is not None
        self.config = config
        self.controller = controller
        self.flow = flow or load_flow(config.flow, f"app {config.name!r}")
        self.plan: FlowPlan = self.flow.compile(config.flow_options(self.flow.options))
        # a column no model could take fails here, at deploy, not at each query
        check_types(self.flow, partial(model_signature, controller), f"app {config.name!r}")
        self.stats = FlowStats(self.plan)
        self.selects = SelectState(config.name, self.plan)
        self.stage_models = StageModels(config, self.flow, self.plan, controller, planned)
        self.runner = QueryRunner(
            config.name, self.flow, self.plan, controller, lookups, self.stage_models,
            self.selects, self.stats,
        )  # fmt: skip

    @property
    def name(self) -> str:
        return self.config.name

    # -- serving the stages ------------------------------------------------------------------
    def start(self) -> asyncio.Future[Any]:
        """Load the stage models (and pinned model versions) and warm them up; done when all
        loads answered and every stage model's warm-up and sweep of batch sizes ended."""
        return self.stage_models.start()

    async def stop(self) -> None:
        """Unload the stage models (the app was deleted or replaced)."""
        await self.stage_models.stop()

    def ready_models(self) -> list[str]:
        """The stage models that serve now and are warm."""
        return self.stage_models.ready()

    # -- queries -----------------------------------------------------------------------------
    async def predict(
        self, value: Any, user: str | None = None, spans: Any = None
    ) -> dict[str, Any]:
        """One query's answer; `spans`: see `QueryTrace`."""
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
        trace = QueryTrace(spans=spans)
        deadline = QueryDeadline.starting(clock, started, self.config.slo_ms)
        running = asyncio.ensure_future(self.runner.run(table, trace, deadline))
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
            self.selects.remember(query_id, trace.selections)
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

    # -- feedback and learned state (the registry's interface) -------------------------------
    async def feedback(
        self, label: Any, *, query_id: str | None = None, value: Any = None, user: str | None = None
    ) -> FeedbackResult:
        """Teach each selection the query made (found by its query id) its true label."""
        return self.selects.feedback(label, query_id, user)

    def take_dirty(self) -> dict[str, dict[str, Any]]:
        """The learned state of each select operator changed since the last call, as store
        rows keyed `select:<operator>`."""
        return self.selects.take_dirty()

    def mark_all_dirty(self) -> None:
        self.selects.mark_all_dirty()

    def restore(self, rows: dict[str, dict[str, Any]]) -> None:
        """Carry over the select operators' stored state (when their policy is the same)."""
        self.selects.restore(rows)

    def statistics(self) -> dict[str, Any]:
        return self.stats.to_dict()

    def describe(self) -> dict[str, Any]:
        plan = self.plan.describe()
        for stage in plan["stages"]:
            stage["served_as"] = self.stage_models.names.get(stage["id"], [])
        return {
            "name": self.name,
            "config": self.config.to_dict(),
            "flow": plan,
            "ready": self.ready_models(),
            "statistics": {**self.statistics(), "selection": self.selects.statistics()},
        }
