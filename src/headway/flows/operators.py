"""Cloudflow's operators: each takes tables and gives one table.

An operator knows two things: the schema it makes from its inputs' (`check`, at build time,
raising `FlowError` naming the operator and the column) and how to compute its table (`run`).
Model calls and lookups go through `Services`, so the same code runs in-process (`local`), in a
worker's action (a fused stage) and in the server's frontend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from headway.errors import HeadwayError, InvalidInput, ModelError
from headway.flows.types import (
    NUMERIC,
    FlowError,
    Row,
    Schema,
    Table,
    column_type,
    returns_bool,
    type_name,
    types_of,
)

AGGREGATES = ("count", "sum", "min", "max", "average")
HOWS = ("inner", "left", "outer")


class Services(Protocol):
    """What operators need from where they run: model predictions and stored values."""

    def predict(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def lookup(self, key: str) -> Any: ...


@dataclass(frozen=True)
class Shape:
    """What an operator makes: its schema, and the column it is grouped by (if any)."""

    schema: Schema
    group: str | None = None


class Operator:
    """Base: `kind` names it in labels and errors; `rowwise` operators keep one row per row."""

    kind: ClassVar[str] = "operator"
    rowwise: ClassVar[bool] = False
    high_variance: bool = False
    batching: bool = False

    def check(self, inputs: list[Shape], where: str) -> Shape:
        raise NotImplementedError

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        raise NotImplementedError

    def describe(self) -> str:
        return self.kind


def _need_column(shape: Shape, column: str, where: str, role: str) -> type:
    if not shape.schema.has(column):
        raise FlowError(f"{where}: {role} {column!r} is not a column of {shape.schema.names}")
    return shape.schema.type_of(column)


def _ungrouped(shape: Shape, where: str) -> None:
    if shape.group is not None:
        raise FlowError(
            f"{where}: the table is grouped by {shape.group!r}; only map, filter and agg "
            "take a grouped table"
        )


def _call(fn: Callable[..., Any], where: str, *args: Any) -> Any:
    try:
        return fn(*args)
    except HeadwayError:
        raise
    except Exception as exc:
        raise ModelError(f"{where}: {type(exc).__name__}: {exc}") from exc


@dataclass
class Map(Operator):
    """A Python function per row (or per column value with `col`, or per table with
    `batching`); its return annotation types the columns `names`."""

    fn: Callable[..., Any]
    names: Sequence[str] = ()
    col: str | None = None
    high_variance: bool = False
    batching: bool = False
    init: Callable[[], Any] | None = None
    kind: ClassVar[str] = "map"
    rowwise: ClassVar[bool] = True
    _state: Any = field(default=None, init=False, repr=False)
    _ready: bool = field(default=False, init=False, repr=False)

    def describe(self) -> str:
        return f"map:{getattr(self.fn, '__name__', type(self.fn).__name__)}"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        (shape,) = inputs
        kinds = types_of(self.fn, where, batched=self.batching)
        if self.col is not None:
            _need_column(shape, self.col, where, "col")
            if len(kinds) != 1:
                raise FlowError(f"{where}: a map over col {self.col!r} must return one value")
            names = list(self.names) or [self.col]
            if len(names) != 1:
                raise FlowError(
                    f"{where}: with col={self.col!r}, names may rename that column only"
                )
            columns = [
                (names[0], kinds[0]) if c.name == self.col else (c.name, c.type)
                for c in shape.schema
            ]
            return Shape(_unique(columns, where), shape.group)
        names = list(self.names) or ([self.describe()[4:]] if len(kinds) == 1 else [])
        if len(names) != len(kinds):
            raise FlowError(
                f"{where}: names {names} has {len(names)} column(s) but the function's return "
                f"annotation declares {len(kinds)} ({', '.join(type_name(k) for k in kinds)})"
            )
        if shape.group is not None and shape.group not in names:
            raise FlowError(f"{where}: a map over a table grouped by {shape.group!r} must keep it")
        return Shape(_unique(list(zip(names, kinds, strict=True)), where), shape.group)

    def _args(self) -> tuple[Any, ...]:
        if self.init is None:
            return ()
        if not self._ready:
            self._state, self._ready = self.init(), True
        return (self._state,)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        (table,) = inputs
        shape = self.check([Shape(table.schema, table.group)], where)
        state = self._args()
        if self.col is not None:
            position = table.schema.index(self.col)
            rows = [
                (*v[:position], _call(self.fn, where, *state, v[position]), *v[position + 1 :])
                for v in table.rows
            ]
        else:
            if self.batching:
                values = list(_call(self.fn, where, *state, table))
                if len(values) != len(table):
                    raise ModelError(
                        f"{where}: a batching function returned {len(values)} rows for {len(table)}"
                    )
            else:
                values = [_call(self.fn, where, *state, row) for row in table]
            single = len(shape.schema) == 1
            rows = [(value,) if single else tuple(value) for value in values]
        return _made(shape, rows, table.qids, where)


@dataclass
class Model(Operator):
    """A model of the repository, called through the controller when deployed. Its input
    tensors come from columns (`inputs`: tensor -> column; default: the table's columns
    stacked side by side as `input-0`); its `outputs` (tensor -> type) become columns added
    to the row (renamed by `names`)."""

    model: str
    outputs: Mapping[str, type]
    inputs: Mapping[str, str] | None = None
    names: Sequence[str] = ()
    high_variance: bool = False
    batching: bool = True
    kind: ClassVar[str] = "model"
    rowwise: ClassVar[bool] = True

    def describe(self) -> str:
        return f"model:{self.model}"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        (shape,) = inputs
        if not self.outputs:
            raise FlowError(f"{where}: a model operator must declare its outputs (tensor: type)")
        for column in (self.inputs or {}).values():
            _need_column(shape, column, where, "input column")
        names = list(self.names) or list(self.outputs)
        if len(names) != len(self.outputs):
            raise FlowError(
                f"{where}: names {names} must name each of outputs {list(self.outputs)}"
            )
        added = list(zip(names, self.outputs.values(), strict=True))
        return Shape(
            _unique([*((c.name, c.type) for c in shape.schema), *added], where), shape.group
        )

    def encode(self, table: Table, where: str) -> dict[str, np.ndarray]:
        """The model's input tensors for the table's rows."""
        return encode_inputs(table, self.inputs, where)

    def decode(self, table: Table, outputs: Mapping[str, np.ndarray], where: str) -> Table:
        shape = self.check([Shape(table.schema, table.group)], where)
        columns = []
        for tensor, kind in self.outputs.items():
            if tensor not in outputs:
                raise ModelError(f"{where}: the model answered {sorted(outputs)}, not {tensor!r}")
            array = np.asarray(outputs[tensor])
            if kind is np.ndarray:
                columns.append(list(array))
            else:
                rows_of = array.reshape(len(table), -1) if len(table) else ()  # none: no reshape
                columns.append([row.reshape(-1)[0].item() for row in rows_of])
        rows = [
            (*values, *(column[i] for column in columns)) for i, values in enumerate(table.rows)
        ]
        return _made(shape, rows, table.qids, where)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        (table,) = inputs
        if not table.rows:
            return self.decode(table, {t: np.zeros((0,)) for t in self.outputs}, where)
        return self.decode(table, services.predict(self.model, self.encode(table, where)), where)


def encode_inputs(
    table: Table, inputs: Mapping[str, str] | None, where: str
) -> dict[str, np.ndarray]:
    """A model's input tensors from columns: `inputs` maps tensor -> column; by default the
    row's columns, flattened and side by side, are tensor `input-0`."""
    mapping = inputs or {"input-0": ""}
    tensors: dict[str, np.ndarray] = {}
    for tensor, column in mapping.items():
        try:
            if column:
                tensors[tensor] = np.stack([np.asarray(v) for v in table.column(column)])
            else:
                tensors[tensor] = np.stack(
                    [np.hstack([np.asarray(v).reshape(-1) for v in row]) for row in table.rows]
                )
        except ValueError as exc:
            raise InvalidInput(f"{where}: cannot stack the rows into {tensor!r}: {exc}") from None
    return tensors


@dataclass
class Filter(Operator):
    """Keep the rows for which `fn(row)` is true; with `group`, `fn` sees each group's first
    row and keeps or drops the whole group."""

    fn: Callable[[Row], bool]
    group: bool = False
    kind: ClassVar[str] = "filter"
    rowwise: ClassVar[bool] = True

    def describe(self) -> str:
        return f"filter:{getattr(self.fn, '__name__', 'fn')}"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        (shape,) = inputs
        returns_bool(self.fn, where)
        if self.group and shape.group is None:
            raise FlowError(f"{where}: filter(group=True) needs a table grouped by groupby(col)")
        return shape

    def keep(self, table: Table, where: str) -> list[bool]:
        """Which rows stay."""
        if not self.group:
            return [bool(_call(self.fn, where, row)) for row in table]
        assert table.group is not None
        position = table.schema.index(table.group)
        verdicts: dict[Any, bool] = {}
        for row, values in zip(table, table.rows, strict=True):
            key = values[position]
            if key not in verdicts:
                verdicts[key] = bool(_call(self.fn, where, row))
        return [verdicts[values[position]] for values in table.rows]

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        (table,) = inputs
        return select_rows(table, self.keep(table, where))


def select_rows(table: Table, keep: Sequence[bool]) -> Table:
    rows = tuple(v for v, k in zip(table.rows, keep, strict=True) if k)
    qids = tuple(q for q, k in zip(table.qids, keep, strict=True) if k)
    return Table(table.schema, rows, qids, table.group)


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
        _ungrouped(shape, where)
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
        _ungrouped(left, where)
        _ungrouped(right, where)
        if self.on != "qid":
            kinds = {_need_column(s, self.on, where, f"join key on {side}")
                     for s, side in ((left, "the left"), (right, "the right"))}  # fmt: skip
            if len(kinds) > 1:
                raise FlowError(f"{where}: join key {self.on!r} has different types on each side")
        columns = [(c.name, c.type) for c in left.schema]
        for c in right.schema:
            if c.name == self.on:
                continue
            name = c.name + self.rsuffix if left.schema.has(c.name) else c.name
            columns.append((name, c.type))
        return Shape(_unique(columns, where))

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
        return _made(shape, rows, qids, where)

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
            key = _need_column(shape, self.key, where, "dynamic lookup key column")
            if key not in (str, int):
                raise FlowError(f"{where}: lookup key column {self.key!r} must be str or int")
        columns = [*((c.name, c.type) for c in shape.schema), (self.column, kind)]
        return Shape(_unique(columns, where), shape.group)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        (table,) = inputs
        shape = self.check([Shape(table.schema, table.group)], where)
        keys = [str(k) for k in table.column(self.key)] if self.dynamic else [self.key] * len(table)
        rows = [
            (*values, services.lookup(key)) for values, key in zip(table.rows, keys, strict=True)
        ]
        return _made(shape, rows, table.qids, where)


@dataclass
class GroupBy(Operator):
    """Groups rows by a column's value, for `agg` and `filter(group=True)`."""

    col: str
    kind: ClassVar[str] = "groupby"

    def check(self, inputs: list[Shape], where: str) -> Shape:
        (shape,) = inputs
        _ungrouped(shape, where)
        _need_column(shape, self.col, where, "groupby column")
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
        kind = _need_column(shape, self.col, where, "agg column")
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
            return _made(shape, [(self._reduce(values),)], [qid], where)
        keys = table.column(table.group)
        groups: dict[Any, tuple[int, list[Any]]] = {}
        for key, value, qid in zip(keys, values, table.qids, strict=True):
            groups.setdefault(key, (qid, []))[1].append(value)
        rows = [(key, self._reduce(vals)) for key, (_, vals) in groups.items()]
        return _made(shape, rows, [qid for qid, _ in groups.values()], where)

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


def _unique(columns: list[tuple[str, type]], where: str) -> Schema:
    seen: set[str] = set()
    for name, _ in columns:
        if name in seen:
            raise FlowError(f"{where}: column {name!r} would appear twice; rename it with names=")
        if name == "qid":
            raise FlowError(f"{where}: 'qid' is the hidden query id, not a column name")
        seen.add(name)
    return Schema(columns)


def _made(shape: Shape, rows: Sequence[Sequence[Any]], qids: Sequence[int], where: str) -> Table:
    """The operator's output, every value checked against the schema it declared."""
    try:
        return Table.build(shape.schema, rows, qids, group=shape.group, where=where)
    except TypeError as exc:
        raise ModelError(f"{exc} (the operator's output does not match its schema)") from None
