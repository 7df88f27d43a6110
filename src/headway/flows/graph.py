"""A flow's graph: operators chained in dot notation, type-checked as they are added.

Every operator is checked against what its inputs make when it is added, so a wrong column or
an unannotated function fails here, naming the operator and the column (docs/flows.md). The
compiler (`flows.plan`) reads this graph; `flows.flow.Flow` adds compiling and running to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from headway.errors import InvalidInput
from headway.flows.operators import Filter, Map, Model, Operator, Shape
from headway.flows.relational import Agg, AnyOf, GroupBy, Join, Lookup, Union
from headway.flows.types import FlowError, Row, Schema, Table, column_type


@dataclass(frozen=True)
class Options:
    """The compiler's switches, each on by default (Cloudflow's `optimize` flags)."""

    fusion: bool = True
    compete: bool = True
    compete_replicas: int = 2
    batching: bool = True

    def __post_init__(self) -> None:
        if self.compete_replicas < 1:
            raise FlowError(f"compete_replicas must be at least 1, not {self.compete_replicas}")


class Node:
    """One operator in a flow, with the nodes it reads; its methods add the next operator."""

    def __init__(
        self,
        flow: FlowGraph,
        op: Operator | None,
        inputs: tuple[Node, ...],
        shape: Shape,
        label: str,
    ) -> None:
        self.flow = flow
        self.op = op
        self.inputs = inputs
        self.shape = shape
        self.label = label
        self.id = len(flow.nodes)

    @property
    def schema(self) -> Schema:
        return self.shape.schema

    def __repr__(self) -> str:
        return f"Node({self.label!r}, {self.schema.describe()})"

    def _add(self, op: Operator, *others: Node) -> Node:
        return self.flow._attach(op, (self, *others))

    def map(
        self,
        fn: Callable[..., Any] | Model,
        names: Sequence[str] = (),
        col: str | None = None,
        high_variance: bool = False,
        batching: bool = False,
        init: Callable[[], Any] | None = None,
    ) -> Node:
        """A function of each row (`col`: of one column's value; `batching`: of the whole
        table), or a `Model` of the repository."""
        if isinstance(fn, Model):
            if col is not None or init is not None:
                raise FlowError("a model operator takes neither col nor init")
            op: Operator = Model(
                fn.model, fn.outputs, fn.inputs, tuple(names) or fn.names,
                high_variance or fn.high_variance, fn.batching,
            )  # fmt: skip
        else:
            op = Map(fn, tuple(names), col, high_variance, batching, init)
        return self._add(op)

    def filter(self, fn: Callable[[Row], bool], group: bool = False) -> Node:
        return self._add(Filter(fn, group))

    def union(self, *others: Node) -> Node:
        return self._add(Union(), *others)

    def anyof(self, *others: Node) -> Node:
        return self._add(AnyOf(), *others)

    def join(
        self, other: Node, on: str = "qid", how: str = "inner", rsuffix: str = "_right"
    ) -> Node:
        return self._add(Join(on, how, rsuffix), other)

    def lookup(
        self, key: str, dynamic: bool = False, name: str | None = None, type: type = object
    ) -> Node:
        return self._add(Lookup(key, dynamic, name, type))

    def select(
        self,
        models: Sequence[str],
        policy: str = "exp4",
        inputs: Mapping[str, str] | None = None,
        task: str = "classification",
        names: Sequence[str] = ("output", "confidence"),
        **options: Any,
    ) -> Node:
        """Model selection (`headway.flows.select`): adds `output` and `confidence`."""
        from headway.flows.select import Select

        return self._add(Select(models, policy, inputs, task, tuple(names), options))

    def groupby(self, col: str) -> Node:
        return self._add(GroupBy(col))

    def agg(self, fn: str, col: str) -> Node:
        return self._add(Agg(fn, col))


class FlowGraph(Node):
    """A flow's nodes over tables of `inputs` (column -> type); the graph itself is its source.

    A flow must end in exactly one sink (a node nothing reads)."""

    def __init__(
        self,
        name: str,
        inputs: Mapping[str, Any] | Sequence[tuple[str, Any]],
        options: Options | None = None,
    ) -> None:
        self.name = name
        self.options = options or Options()
        self.nodes: list[Node] = []
        pairs = list(inputs.items()) if isinstance(inputs, Mapping) else list(inputs)
        if not pairs:
            raise FlowError(f"flow {name!r}: its input needs at least one column")
        schema = Schema([(n, column_type(t, f"flow {name!r}: input {n!r}")) for n, t in pairs])
        super().__init__(self, None, (), Shape(schema), "source")
        self.nodes.append(self)

    def _attach(self, op: Operator, inputs: tuple[Node, ...]) -> Node:
        where = f"flow {self.name!r}: operator {self._label(op)!r}"
        for node in inputs:
            if node.flow is not self:
                raise FlowError(
                    f"{where}: its inputs must come from this flow, not {node.flow.name!r}"
                )
        shape = op.check([node.shape for node in inputs], where)
        node = Node(self, op, inputs, shape, self._label(op))
        self.nodes.append(node)
        return node

    def _label(self, op: Operator) -> str:
        base = op.describe()
        taken = {node.label for node in self.nodes}
        if base not in taken:
            return base
        count = 2
        while f"{base}#{count}" in taken:
            count += 1
        return f"{base}#{count}"

    # -- structure ---------------------------------------------------------------------------
    def consumers(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {node.id: [] for node in self.nodes}
        for node in self.nodes:
            for parent in node.inputs:
                out[parent.id].append(node)
        return out

    @property
    def sink(self) -> Node:
        """The one node nothing reads; FlowError when there are several (or none)."""
        ends = [n for n, readers in self.consumers().items() if not readers]
        if len(ends) != 1:
            labels = [self.nodes[i].label for i in ends]
            raise FlowError(f"flow {self.name!r} must have exactly one sink; it has {labels}")
        return self.nodes[ends[0]]

    # -- input -------------------------------------------------------------------------------
    def table(self, rows: Iterable[Any]) -> Table:
        """The input table from rows: dicts of column -> value (or bare values when the flow
        takes one column); InvalidInput naming the row and column when one does not fit."""
        names = self.schema.names
        values = []
        for number, row in enumerate(rows):
            if isinstance(row, Mapping):
                missing = [n for n in names if n not in row]
                unknown = sorted(str(k) for k in row if k not in names)
                if missing or unknown:
                    raise InvalidInput(
                        f"flow {self.name!r}: row {number} must have columns {names}"
                        + (f"; missing {missing}" if missing else "")
                        + (f"; unknown {unknown}" if unknown else "")
                    )
                values.append([row[n] for n in names])
            elif len(names) == 1:
                values.append([row])
            else:
                raise InvalidInput(
                    f"flow {self.name!r}: row {number} must be an object with columns {names}"
                )
        try:
            return Table.build(self.schema, values, where=f"flow {self.name!r}: input")
        except TypeError as exc:
            raise InvalidInput(str(exc)) from None
