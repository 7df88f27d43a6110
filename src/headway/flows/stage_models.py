"""The controller models that serve a flow app's action stages: registered with the app,
loaded and warmed before it is ready, unloaded with it.

A stage that is one model operator *is* that repository model; any other action stage (a fused
chain, with or without a model) is registered as a model of framework `flow` whose worker runs
the whole chain in one action (`headway.adapters.flow_adapter`). A competing stage is
`compete_replicas` such models (its copies, `...s<id>.c<i>`), batch size 1, kept on distinct
workers (`Controller.keep_apart`: the server starts the workers they need, or refuses the app).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Mapping
from dataclasses import asdict, replace
from typing import Any

from headway.apps.config import AppConfig, ModelRef
from headway.control.doors import Serving
from headway.control.models.states import READY
from headway.errors import HeadwayError
from headway.flows.flow import Flow
from headway.flows.plan import ACTION, FlowPlan, FlowStage, PlannedSize, stage_model
from headway.flows.source import split_spec
from headway.flows.warmup import stage_inputs
from headway.repository import ModelConfig, TensorSpec

log = logging.getLogger("headway.flows")
_generations = itertools.count(1)
#: Memory reserved for a stage model of functions only, before it is measured.
STAGE_MB = 16.0
#: How often starting checks whether the stage models' warm-up ended.
WARM_POLL_S = 0.02


def served_directly(stage: FlowStage) -> bool:
    """A stage that is one model operator is served as that repository model itself (its
    batching, replicas, cache), unless batching is off for the flow or the stage competes."""
    return stage.only_model and stage.batching and stage.replicas == 1


def model_signature(controller: Serving, key: str) -> tuple[TensorSpec, ...]:
    """The inputs a repository model (`name` or `name@version`) takes: as served (with what its
    adapter inferred), else as its model.yaml declares them; empty when not known."""
    ref = ModelRef.parse(key, f"model {key!r}")
    state = controller.served(ref.name, ref.version)
    if state is not None:
        return state.config.inputs
    found = controller.repository.models.get(ref.name)
    return () if found is None else found.inputs


class StageModels:
    """The models each action stage of one flow app calls, by stage id (`names`)."""

    def __init__(
        self,
        config: AppConfig,
        flow: Flow,
        plan: FlowPlan,
        controller: Serving,
        planned: Mapping[str, PlannedSize] | None = None,
    ) -> None:
        self.config = config
        self.flow = flow
        self.plan = plan
        self.controller = controller
        #: A plan's sizes, by the name a model-less stage is planned as (`flows.plan.stage_model`).
        self.planned = planned or {}
        #: The planned names of the stages sized by the plan.
        self.sized: set[str] = set()
        self.names: dict[int, list[str]] = {}
        self._loading: asyncio.Future[Any] | None = None
        self._register()

    @property
    def app(self) -> str:
        return self.config.name

    def _register(self) -> None:
        generation = next(_generations)
        for stage in self.plan.stages:
            if stage.kind != ACTION:
                continue
            if served_directly(stage):
                self.names[stage.id] = [stage.models[0]]
                continue
            name = f"flow.{self.app}.{generation}.s{stage.id}"
            config = self._stage_config(stage)
            names = (
                [name] if stage.replicas == 1 else [f"{name}.c{i}" for i in range(stage.replicas)]
            )
            for each in names:
                self.controller.register(replace(config, name=each))
            self.names[stage.id] = names
            if len(names) > 1:
                try:
                    self.controller.keep_apart(names, f"app {self.app!r}: stage {stage.name!r}")
                except HeadwayError:  # the app is refused: none of its stage models stays
                    for each in self._own_models():
                        self.controller.deregister(each)
                    raise

    def _stage_config(self, stage: FlowStage) -> ModelConfig:
        """A stage's model: its chain's models go with it; it takes their batching."""
        repository = self.controller.repository
        wires: dict[str, Any] = {}
        inherit: ModelConfig | None = None
        for key in stage.models:
            ref = ModelRef.parse(key, f"app {self.app!r}: flow model")
            found = repository.get(ref.name)
            if ref.version is not None:
                found = repository.version(ref.name, ref.version)
            wires[key] = found.to_wire()
            inherit = inherit or found
        assert self.config.flow is not None
        path, _ = split_spec(self.config.flow, f"app {self.app!r}")
        batch = (inherit.max_batch_size if inherit else 32) if stage.batching else 1
        replicas = inherit.replicas if inherit else 1
        threads = inherit.options.get("threads") if inherit else None  # its model's pools
        size = None if stage.models else self.planned.get(stage_model(self.plan, stage))
        if size is not None:  # a model-less worker stage, as planned
            self.sized.add(stage_model(self.plan, stage))
            replicas = size.replicas
            batch = size.max_batch_size if stage.batching else 1
            threads = size.threads if size.threads is not None else threads
        if stage.replicas > 1:  # each copy a model of its own, on a worker of its own
            batch, replicas = 1, 1
        return ModelConfig(
            name=f"flow.{self.app}",
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
                **({} if threads is None else {"threads": threads}),
            },
        )

    def _own_models(self) -> list[str]:
        return [
            n for s in self.plan.stages if not served_directly(s) for n in self.names.get(s.id, [])
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
            if served_directly(stage):
                ref = ModelRef.parse(stage.models[0], f"app {self.app!r}")
                if ref.version is not None:
                    loads.append(self.controller.load(ref.name, str(ref.version)))
        await asyncio.gather(*loads, return_exceptions=True)
        try:
            self._warm_up()
        except Exception:  # best effort: a stage that cannot be warmed serves cold
            log.exception("app %s: warming up its stages failed", self.app)
        while self._warming():
            await asyncio.sleep(WARM_POLL_S)

    def _warm_up(self) -> None:
        """Warm each fused stage's model with rows of zeros of its input columns (the
        controller warms repository models itself, but cannot make up a stage's inputs)."""
        for stage in self.plan.stages:
            if stage.kind != ACTION or served_directly(stage):
                continue
            for name in self.names[stage.id]:
                state = self.controller.served(name)
                if state is None or state.state != READY:
                    continue
                first = self.flow.nodes[stage.nodes[0]].inputs[0].shape
                mine = [op for op, _ in self.plan.ops(stage)]
                others = (n.op for n in self.flow.nodes if n.op is not None and n.op not in mine)
                specs = stage_inputs(first.schema, [*mine, *others], self.signature)
                if specs is not None:
                    self.controller.warm_up(name, specs)

    def signature(self, key: str) -> tuple[TensorSpec, ...]:
        return model_signature(self.controller, key)

    def _warming(self) -> list[str]:
        """The stage models (this app's and the repository models it calls) still warming."""
        warming = []
        for names in self.names.values():
            for name in names:
                ref = ModelRef.parse(name, "") if "@" in name else ModelRef(name)
                if self.controller.warming(ref.name, ref.version):
                    warming.append(name)
        return warming

    async def stop(self) -> None:
        """Unload the stage models (the app was deleted or replaced)."""
        for name in self._own_models():
            try:
                await self.controller.unload(name)
            except HeadwayError as exc:
                log.warning("app %s: unloading %s: %s", self.app, name, exc.message)
            self.controller.deregister(name)

    def ready(self) -> list[str]:
        """The stage models that serve now and are warm."""
        ready = []
        for names in self.names.values():
            for name in names:
                ref = ModelRef.parse(name, "") if "@" in name else ModelRef(name)
                state = self.controller.served(ref.name, ref.version)
                if (
                    state is not None
                    and state.state == READY
                    and not self.controller.warming(ref.name, ref.version)
                ):
                    ready.append(name)
        return ready
