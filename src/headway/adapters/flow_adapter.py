"""A flow's action stage as a worker's model: its fused chain runs inside one action, so the
rows cross the process boundary once, however many operators the chain has.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from headway.adapters import adapter_class
from headway.adapters.base import Adapter
from headway.errors import ConfigError


class FlowStageAdapter(Adapter):
    """One action stage of a deployed flow.

    The frontend registers each action stage as a model of framework `flow`
    (`headway.flows.serving`); its options name the flow file, the stage, the compiler options
    and the wire configs of the repository models the chain calls. The worker imports the flow,
    compiles it the same way, loads those models with their own adapters, and then runs the chain
    over each batch, less its leading filters: the frontend ran those before dispatch and sends
    only the rows they kept (`local.filter_ahead`). Outputs are the chain's columns (NULL
    in the rows a filter dropped), the keep mask of its filters, and the seconds of each
    operator it ran, spread over the batch's rows (`headway.flows.tensors`)."""

    def load(self) -> None:
        from headway.flows.graph import Options
        from headway.flows.local import leading_filters
        from headway.flows.source import load_flow

        spec = str(self.options.get("flow"))
        where = f"model {self.config['name']!r}: flow {spec!r}"
        flow = load_flow(spec, where)
        plan = flow.compile(Options(**self.options.get("compiler", {})))
        number = int(self.options.get("stage", -1))
        if not 0 <= number < len(plan.stages) or plan.stages[number].kind != "action":
            raise ConfigError(f"{where}: stage {number} is not an action stage of the flow")
        self.stage = plan.stages[number]
        expected = self.options.get("operators")
        if expected is not None and list(self.stage.operators) != list(expected):
            raise ConfigError(
                f"{where}: stage {number} is now {list(self.stage.operators)}, not {expected}: "
                "the flow file changed since the app was deployed; deploy it again (PUT /apps)"
            )
        ops = plan.ops(self.stage)
        self.ops = ops[leading_filters(ops) :]
        first = flow.nodes[self.stage.nodes[0]]
        self.schema = first.inputs[0].shape.schema
        self.group = first.inputs[0].shape.group
        self.services = _Models(self.stage.name)
        for key, wire in (self.options.get("models") or {}).items():
            adapter = adapter_class(wire["framework"])(wire)
            adapter.load()
            self.services.models[key] = adapter

    def predict(
        self, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        from headway.flows.local import run_chain
        from headway.flows.tensors import CPU, KEEP, TIMES, from_tensors, to_tensors
        from headway.flows.types import Table

        cpu = time.process_time()
        rows = len(next(iter(inputs.values())))
        table = from_tensors(self.schema, inputs, tuple(range(rows)))
        table = Table(table.schema, table.rows, table.qids, self.group)
        table, keep, seconds = run_chain(self.ops, table, self.services)
        if keep is not None:  # one row per row: NULL rows where a filter dropped one
            kept = iter(table.rows)
            empty = (None,) * len(table.schema)
            full = tuple(next(kept) if k else empty for k in keep)
            table = Table(table.schema, full, tuple(range(rows)), table.group)
        out = to_tensors(table, self.stage.name)
        if keep is not None:
            out[KEEP] = np.asarray(keep, dtype=np.bool_)
        out[TIMES] = np.tile(np.asarray(seconds) / max(rows, 1), (rows, 1))
        out[CPU] = np.full(rows, (time.process_time() - cpu) / max(rows, 1))
        return out


class _Models:
    """The operators' services inside a worker: the chain's models, loaded beside it."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.models: dict[str, Adapter] = {}

    def predict(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.models[model].predict(inputs)

    def lookup(self, key: str) -> Any:
        raise ConfigError(f"{self.stage}: lookups run in the frontend, not in an action")


ADAPTER = FlowStageAdapter
