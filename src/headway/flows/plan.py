"""The compiler: a flow's operators grouped into stages, each run as one step.

Cloudflow's optimisations: operator fusion (a chain's data crosses the process boundary
once) and competitive execution (a high-variance stage runs on clones; the first answer
wins). The `FlowPlan` is the typed DAG a planner reads: stages, edges, and which stages call
which models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from headway.flows.graph import FlowGraph, Node, Options
from headway.flows.operators import Filter, Model, Operator

ACTION, FRONTEND, SOURCE = "action", "frontend", "source"


@dataclass(frozen=True)
class FlowStage:
    """Operators that run as one step. `replicas` > 1: competing clones."""

    id: int
    name: str
    kind: str
    nodes: tuple[int, ...]
    operators: tuple[str, ...]
    inputs: tuple[int, ...]
    models: tuple[str, ...] = ()
    high_variance: bool = False
    batching: bool = False
    replicas: int = 1
    why: str = ""

    @property
    def only_model(self) -> bool:
        """One model operator and nothing else: served as that repository model itself."""
        return self.kind == ACTION and len(self.nodes) == 1 and len(self.models) == 1


@dataclass(frozen=True)
class FlowPlan:
    """A compiled flow: its stages in order, their edges, and the models they call.

    A stage is either an *action* (map, model and filter operators: run as one worker action when
    deployed) or a *frontend* step (source, union, anyof, join, lookup, groupby, agg: data
    movement that runs beside the store). Fusion: a chain is a maximal run of action operators
    where each reads only the previous one and the previous one feeds only it; a chain also ends
    before a second model (each model keeps its own replicas and batch sizes). A filter inside a
    chain drops rows for the operators after it; the action answers the dropped rows as NULL with
    a keep mask, and the frontend removes them. A fused stage is high-variance if any member is,
    and batches only if every member batches; a stage that reads a left or outer join whose NULL
    side has an array column does not batch (a NULL array has no shape to batch with). Without
    fusion every operator is its own stage."""

    flow: FlowGraph
    options: Options
    stages: tuple[FlowStage, ...]
    sink: int
    node_stage: dict[int, int] = field(default_factory=dict)

    @property
    def edges(self) -> list[tuple[int, int]]:
        return [(src, stage.id) for stage in self.stages for src in stage.inputs]

    def ops(self, stage: FlowStage) -> list[tuple[Operator, str]]:
        """The stage's operators with their labels, in the order they run."""
        out = []
        for node_id in stage.nodes:
            node = self.flow.nodes[node_id]
            assert node.op is not None
            out.append((node.op, node.label))
        return out

    def describe(self) -> dict[str, Any]:
        """The DAG as JSON: what the app description shows and a planner reads."""
        return {
            "options": {
                "fusion": self.options.fusion,
                "compete": self.options.compete,
                "compete_replicas": self.options.compete_replicas,
                "batching": self.options.batching,
            },
            "stages": [
                {
                    "id": s.id, "name": s.name, "kind": s.kind, "operators": list(s.operators),
                    "inputs": list(s.inputs), "models": list(s.models), "replicas": s.replicas,
                    "batching": s.batching, "high_variance": s.high_variance, "why": s.why,
                }
                for s in self.stages
            ],
            "edges": self.edges,
            "sink": self.sink,
        }  # fmt: skip


#: The model a model-less worker stage is planned as (`planning.from_flow`; no repository
#: model is named so), which `headway serve --plan` sizes the stage by.
STAGE_MODEL = "(flow {flow} stage {stage})"


def stage_model(plan: FlowPlan, stage: FlowStage) -> str:
    """The model a model-less worker stage is planned as."""
    return STAGE_MODEL.format(flow=plan.flow.name, stage=stage.name)


class PlannedSize(NamedTuple):
    """What a plan (`headway serve --plan`) gives a model-less worker stage's model: its
    replicas, max batch size and threads (None: as it is)."""

    replicas: int
    max_batch_size: int
    threads: int | None


def is_action(op: Operator | None) -> bool:
    return (
        op is not None
        and op.rowwise
        and op.kind in ("map", "model", "filter")
        and not (isinstance(op, Filter) and op.group)
    )


def compile_flow(flow: FlowGraph, options: Options) -> FlowPlan:
    """Group the flow's nodes into stages (see the module docstring)."""
    sink = flow.sink
    readers = flow.consumers()
    chains: list[tuple[list[Node], str]] = []
    placed: set[int] = set()
    for node in flow.nodes:
        if node.id in placed:
            continue
        chain = [node]
        placed.add(node.id)
        why = ""
        if is_action(node.op):
            while True:
                why = _chain_end(chain[-1], readers, options)
                if why:
                    break
                (nxt,) = readers[chain[-1].id]
                if any(isinstance(n.op, Model) for n in chain) and isinstance(nxt.op, Model):
                    why = f"{nxt.label} is a second model: each model keeps its own batching"
                    break
                chain.append(nxt)
                placed.add(nxt.id)
        else:
            why = "runs in the frontend" if node.op is not None else "the flow's input"
        chains.append((chain, why))
    node_stage = {n.id: i for i, (chain, _) in enumerate(chains) for n in chain}
    stages = []
    for i, (chain, why) in enumerate(chains):
        first = chain[0]
        ops = [n.op for n in chain if n.op is not None]
        kind = SOURCE if first.op is None else ACTION if is_action(first.op) else FRONTEND
        variance = any(op.high_variance for op in ops)
        stages.append(
            FlowStage(
                id=i,
                name="+".join(n.label for n in chain),
                kind=kind,
                nodes=tuple(n.id for n in chain),
                operators=tuple(n.label for n in chain),
                inputs=tuple(node_stage[p.id] for p in first.inputs),
                models=tuple(_models(ops)),
                high_variance=variance,
                batching=kind == ACTION
                and options.batching
                and all(op.batching for op in ops)
                and not _null_arrays(first),
                replicas=options.compete_replicas if variance and options.compete else 1,
                why=why,
            )
        )
    return FlowPlan(flow, options, tuple(stages), node_stage[sink.id], node_stage)


def _null_arrays(node: Node) -> bool:
    """Whether the node reads a left or outer join whose NULL side has an array column: a row
    of NULLs has no shape, so its action cannot share a batch with rows that have one."""
    from headway.flows.relational import Join

    for parent in node.inputs:
        if isinstance(parent.op, Join) and parent.op.how != "inner":
            sides = parent.inputs[1:] if parent.op.how == "left" else parent.inputs
            if any(c.type is np.ndarray for side in sides for c in side.schema):
                return True
    return False


def _models(ops: list[Operator]) -> list[str]:
    """The repository models the operators call (a model operator's, a selection's)."""
    from headway.flows.select import Select

    out: list[str] = []
    for op in ops:
        if isinstance(op, Model):
            out.append(op.model)
        elif isinstance(op, Select):
            out.extend(op.models)
    return out


def _chain_end(node: Node, readers: dict[int, list[Node]], options: Options) -> str:
    """Why the chain cannot continue after `node` ('' when it can)."""
    if not options.fusion:
        return "fusion is off"
    after = readers[node.id]
    if len(after) != 1:
        return "nothing reads it" if not after else f"{len(after)} operators read it"
    nxt = after[0]
    if len(nxt.inputs) != 1:
        return f"{nxt.label} reads several tables"
    if not is_action(nxt.op):
        return f"{nxt.label} runs in the frontend"
    return ""
