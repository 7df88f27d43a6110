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
    FlowError,
    Row,
    Schema,
    Table,
    returns_bool,
    type_name,
    types_of,
)


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


def need_column(shape: Shape, column: str, where: str, role: str) -> type:
    if not shape.schema.has(column):
        raise FlowError(f"{where}: {role} {column!r} is not a column of {shape.schema.names}")
    return shape.schema.type_of(column)


def check_ungrouped(shape: Shape, where: str) -> None:
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
            need_column(shape, self.col, where, "col")
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
            return Shape(unique_schema(columns, where), shape.group)
        names = list(self.names) or ([self.describe()[4:]] if len(kinds) == 1 else [])
        if len(names) != len(kinds):
            raise FlowError(
                f"{where}: names {names} has {len(names)} column(s) but the function's return "
                f"annotation declares {len(kinds)} ({', '.join(type_name(k) for k in kinds)})"
            )
        if shape.group is not None and shape.group not in names:
            raise FlowError(f"{where}: a map over a table grouped by {shape.group!r} must keep it")
        return Shape(unique_schema(list(zip(names, kinds, strict=True)), where), shape.group)

    def _args(self) -> tuple[Any, ...]:
        if self.init is None:
            return ()
        if not self._ready:
            self._state, self._ready = self.init(), True
        return (self._state,)

    def run(self, inputs: list[Table], services: Services, where: str) -> Table:
        (table,) = inputs
        shape = self.check([Shape(table.schema, table.group)], where)
        if not table.rows:  # a function is never called with no rows
            return made_table(shape, [], (), where)
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
        return made_table(shape, rows, table.qids, where)


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
            need_column(shape, column, where, "input column")
        names = list(self.names) or list(self.outputs)
        if len(names) != len(self.outputs):
            raise FlowError(
                f"{where}: names {names} must name each of outputs {list(self.outputs)}"
            )
        added = list(zip(names, self.outputs.values(), strict=True))
        return Shape(
            unique_schema([*((c.name, c.type) for c in shape.schema), *added], where), shape.group
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
        return made_table(shape, rows, table.qids, where)

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
    #: A filter is called row by row: it batches (the rows of many queries in one action).
    batching: bool = True
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


def unique_schema(columns: list[tuple[str, type]], where: str) -> Schema:
    seen: set[str] = set()
    for name, _ in columns:
        if name in seen:
            raise FlowError(f"{where}: column {name!r} would appear twice; rename it with names=")
        if name == "qid":
            raise FlowError(f"{where}: 'qid' is the hidden query id, not a column name")
        seen.add(name)
    return Schema(columns)


def made_table(
    shape: Shape, rows: Sequence[Sequence[Any]], qids: Sequence[int], where: str
) -> Table:
    """The operator's output, every value checked against the schema it declared."""
    try:
        return Table.build(shape.schema, rows, qids, group=shape.group, where=where)
    except TypeError as exc:
        raise ModelError(f"{exc} (the operator's output does not match its schema)") from None
