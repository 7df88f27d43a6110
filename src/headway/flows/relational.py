"""The operators that combine and summarise tables: union, anyof, join, lookup, groupby, agg.

They move rows rather than compute on them, and run in the frontend when deployed (the lookups
live there). See `headway.flows.operators` for the base and the computing operators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from headway.flows.operators import (
    Operator,
    Services,
    Shape,
    check_ungrouped,
    made_table,
    need_column,
    unique_schema,
)
from headway.flows.types import NUMERIC, FlowError, Schema, Table, column_type, type_name

AGGREGATES = ("count", "sum", "min", "max", "average")
HOWS = ("inner", "left", "outer")


@dataclass
class Union(Operator):
    """Every input's rows, in input order; the schemas must be equal."""

    kind: ClassVar[str] = "union"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        return _same_schemas(inputs, where)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        rows = tuple(v for t in inputs for v in t.rows)
        return Table(inputs[0].schema, rows, tuple(q for t in inputs for q in t.qids))


@dataclass
class AnyOf(Operator):
    """Exactly one input, whichever arrives first (in-process: the first listed)."""

    kind: ClassVar[str] = "anyof"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        return _same_schemas(inputs, where)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        return inputs[0]


def _same_schemas(inputs: list[Shape], where: str) -> Shape:
    for shape in inputs:
        check_ungrouped(shape, where)
        if shape.schema != inputs[0].schema:
            raise FlowError(
                f"{where}: inputs differ in schema: {inputs[0].schema.describe()} vs "
                f"{shape.schema.describe()}"
            )
    return Shape(inputs[0].schema)


@dataclass
class Join(Operator):
    """A nested-loop equi-join on the query id (`on="qid"`) or a column; `how` is inner,
    left or outer (a missing side is NULL). The right side's clashing names get `rsuffix`."""

    on: str = "qid"
    how: str = "inner"
    rsuffix: str = "_right"
    kind: ClassVar[str] = "join"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        if self.how not in HOWS:
            hint = "; swap the two tables for a right join" if self.how == "right" else ""
            raise FlowError(f"{where}: how must be one of {list(HOWS)}, not {self.how!r}{hint}")
        left, right = inputs
        check_ungrouped(left, where)
        check_ungrouped(right, where)
        if self.on != "qid":
            kinds = {need_column(s, self.on, where, f"join key on {side}")
                     for s, side in ((left, "the left"), (right, "the right"))}  # fmt: skip
            if len(kinds) > 1:
                raise FlowError(f"{where}: join key {self.on!r} has different types on each side")
        columns = [(c.name, c.type) for c in left.schema]
        for c in right.schema:
            if c.name == self.on:
                continue
            name = c.name + self.rsuffix if left.schema.has(c.name) else c.name
            columns.append((name, c.type))
        return Shape(unique_schema(columns, where))

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        left, right = inputs
        shape = self.check([Shape(left.schema), Shape(right.schema)], where)
        keep = [i for i, c in enumerate(right.schema) if c.name != self.on]
        lkey = self._keys(left)
        rkey = self._keys(right)
        nulls_left = (None,) * len(left.schema)
        rows: list[tuple[Any, ...]] = []
        qids: list[int] = []
        matched: set[int] = set()
        for lv, lq, lk in zip(left.rows, left.qids, lkey, strict=True):
            found = False
            for j, (rv, rk) in enumerate(zip(right.rows, rkey, strict=True)):
                if lk == rk and lk is not None:
                    rows.append((*lv, *(rv[i] for i in keep)))
                    qids.append(lq)
                    matched.add(j)
                    found = True
            if not found and self.how in ("left", "outer"):
                rows.append((*lv, *(None for _ in keep)))
                qids.append(lq)
        if self.how == "outer":
            at = left.schema.index(self.on) if self.on != "qid" else None
            for j, (rv, rq) in enumerate(zip(right.rows, right.qids, strict=True)):
                if j not in matched:
                    missing: list[Any] = list(nulls_left)
                    if at is not None:
                        missing[at] = rv[right.schema.index(self.on)]
                    rows.append((*missing, *(rv[i] for i in keep)))
                    qids.append(rq)
        return made_table(shape, rows, qids, where)

    def _keys(self, table: Table) -> list[Any]:
        return list(table.qids) if self.on == "qid" else table.column(self.on)


@dataclass
class Lookup(Operator):
    """Adds column `name` holding a value kept in the store: under the constant `key`, or
    (`dynamic`) under the key each row holds in column `key`."""

    key: str
    dynamic: bool = False
    name: str | None = None
    type: type = object
    kind: ClassVar[str] = "lookup"
    rowwise: ClassVar[bool] = True

    def describe(self) -> str:
        return f"lookup:{self.key}"

    @property
    def column(self) -> str:
        return self.name or ("value" if self.dynamic else self.key)

    def check(self, inputs: list[Shape], where: str) -> Shape:
        (shape,) = inputs
        kind = column_type(self.type, where)
        if self.dynamic:
            key = need_column(shape, self.key, where, "dynamic lookup key column")
            if key not in (str, int):
                raise FlowError(f"{where}: lookup key column {self.key!r} must be str or int")
        columns = [*((c.name, c.type) for c in shape.schema), (self.column, kind)]
        return Shape(unique_schema(columns, where), shape.group)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        (table,) = inputs
        shape = self.check([Shape(table.schema, table.group)], where)
        keys = [str(k) for k in table.column(self.key)] if self.dynamic else [self.key] * len(table)
        rows = [
            (*values, services.lookup(key)) for values, key in zip(table.rows, keys, strict=True)
        ]
        return made_table(shape, rows, table.qids, where)


@dataclass
class GroupBy(Operator):
    """Groups rows by a column's value, for `agg` and `filter(group=True)`."""

    col: str
    kind: ClassVar[str] = "groupby"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        (shape,) = inputs
        check_ungrouped(shape, where)
        need_column(shape, self.col, where, "groupby column")
        return Shape(shape.schema, self.col)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        (table,) = inputs
        return Table(table.schema, table.rows, table.qids, self.col)


@dataclass
class Agg(Operator):
    """count, sum, min, max or average of a numeric column (NULLs skipped): one row per group
    `(key, fn)`, or one row `(fn)` for an ungrouped table."""

    fn: str
    col: str
    kind: ClassVar[str] = "agg"

    def describe(self) -> str:
        return f"agg:{self.fn}({self.col})"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        (shape,) = inputs
        if self.fn not in AGGREGATES:
            raise FlowError(f"{where}: fn must be one of {list(AGGREGATES)}, not {self.fn!r}")
        kind = need_column(shape, self.col, where, "agg column")
        if self.fn != "count" and kind not in NUMERIC:
            raise FlowError(
                f"{where}: column {self.col!r} is {type_name(kind)}, not numeric: "
                f"{self.fn} needs int, float or bool"
            )
        result = int if self.fn == "count" else float
        if shape.group is None:
            return Shape(Schema([(self.fn, result)]))
        return Shape(Schema([(shape.group, shape.schema.type_of(shape.group)), (self.fn, result)]))

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        (table,) = inputs
        shape = self.check([Shape(table.schema, table.group)], where)
        values = table.column(self.col)
        if table.group is None:
            qid = min(table.qids, default=0)
            return made_table(shape, [(self._reduce(values),)], [qid], where)
        keys = table.column(table.group)
        groups: dict[Any, tuple[int, list[Any]]] = {}
        for key, value, qid in zip(keys, values, table.qids, strict=True):
            groups.setdefault(key, (qid, []))[1].append(value)
        rows = [(key, self._reduce(vals)) for key, (_, vals) in groups.items()]
        return made_table(shape, rows, [qid for qid, _ in groups.values()], where)

    def _reduce(self, values: list[Any]) -> Any:
        present = [v for v in values if v is not None]
        if self.fn == "count":
            return len(present)
        if not present:
            return None
        if self.fn == "sum":
            return float(sum(present))
        if self.fn == "min":
            return float(min(present))
        if self.fn == "max":
            return float(max(present))
        return float(sum(present)) / len(present)
