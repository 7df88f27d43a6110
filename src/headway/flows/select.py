"""Model selection as one operator of a flow (Clipper's select, combine, observe)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from headway.flows.operators import (
    Operator,
    Services,
    Shape,
    encode_inputs,
    made_table,
    need_column,
)
from headway.flows.types import FlowError, Schema, Table
from headway.selection import Decision, Selection, StateRegistry, make_policy


@dataclass
class Select(Operator):
    """`select(models, policy="exp4")`: per row, the models a selection policy chooses.

    The policy (`fixed`, `exp3` or `exp4`, with the options of `docs/selection.md`) chooses which
    models to ask; their answers are combined into `output` and `confidence` columns added to the
    row, and feedback on the query (`POST /apps/{app}/feedback` with the query id) teaches it. Its
    learned state is kept in the store with the application's. In-process (`flow.local`) it draws
    from a generator seeded with `seed`; deployed, exp3's draws follow the same probabilities but
    not the same sequence (queries interleave), while exp4 and a fixed policy answer alike."""

    models: Sequence[str]
    policy: str = "exp4"
    inputs: Mapping[str, str] | None = None
    task: str = "classification"
    names: Sequence[str] = ("output", "confidence")
    options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    kind: ClassVar[str] = "select"
    rowwise: ClassVar[bool] = True
    registry: StateRegistry = field(init=False, repr=False)
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            policy = make_policy(self.policy, list(self.models), task=self.task, **self.options)
        except (ValueError, TypeError) as exc:
            raise FlowError(f"select: {exc}") from None
        self.registry = StateRegistry(policy)
        self.rng = random.Random(self.seed)

    def describe(self) -> str:
        return f"select:{self.policy}"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        (shape,) = inputs
        if len(self.names) != 2:
            raise FlowError(f"{where}: names must name the output and confidence columns")
        for column in (self.inputs or {}).values():
            need_column(shape, column, where, "input column")
        columns = [*((c.name, c.type) for c in shape.schema)]
        columns += [(self.names[0], object), (self.names[1], float)]
        return Shape(Schema(columns), shape.group)

    def choose(self, ready: Sequence[str] | None = None) -> Selection:
        return self.registry.select(self.rng, ready=list(self.models) if ready is None else ready)

    def decide(self, answers: Mapping[str, Any], selection: Selection) -> Decision:
        return self.registry.combine(answers, selection)

    def answer(self, outputs: Mapping[str, Any]) -> Any:
        from headway.apps.tensors import selection_output

        return selection_output(outputs, self.task)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        from headway.selection.losses import plain

        (table,) = inputs
        shape = self.check([Shape(table.schema, table.group)], where)
        rows = []
        for values, qid in zip(table.rows, table.qids, strict=True):
            one = Table(table.schema, (values,), (qid,))
            tensors = encode_inputs(one, self.inputs, where)
            selection = self.choose()
            answers = {m: self.answer(services.predict(m, tensors)) for m in selection.models}
            decision = self.decide(answers, selection)
            rows.append((*values, plain(decision.output), float(decision.confidence)))
        return made_table(shape, rows, table.qids, where)
