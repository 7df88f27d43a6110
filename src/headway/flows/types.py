"""Tables of typed rows: what every flow operator takes and gives.

A `Table` has a `Schema` (named, typed columns) and rows; each row carries a hidden, immutable
query id (`qid`) that joins match on. Column types are Python types: `int`, `float`, `bool`,
`str`, `bytes`, `numpy.ndarray`, or `object` (any value, e.g. a looked-up record). Every value
is checked when a row is made; `None` is NULL in any column (an outer join's missing side).
Function annotations give operators their output types (`types_of`).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from headway.errors import ConfigError

COLUMN_TYPES: tuple[type, ...] = (int, float, bool, str, bytes, np.ndarray, object)
NUMERIC: tuple[type, ...] = (int, float, bool)


class FlowError(ConfigError):
    """A flow cannot be built as written; the message names the operator and the column."""


class Column(NamedTuple):
    name: str
    type: type


class Schema(tuple[Column, ...]):
    """An ordered tuple of columns with unique names."""

    def __new__(cls, columns: Sequence[tuple[str, type]] = ()) -> Schema:
        return super().__new__(cls, (Column(name, kind) for name, kind in columns))

    @property
    def names(self) -> list[str]:
        return [column.name for column in self]

    def index(self, name: str) -> int:  # type: ignore[override]
        for position, column in enumerate(self):
            if column.name == name:
                return position
        raise KeyError(name)

    def type_of(self, name: str) -> type:
        return self[self.index(name)].type

    def has(self, name: str) -> bool:
        return any(column.name == name for column in self)

    def describe(self) -> list[list[str]]:
        return [[column.name, type_name(column.type)] for column in self]


def type_name(kind: type) -> str:
    return "ndarray" if kind is np.ndarray else kind.__name__


def check_value(kind: type, value: Any) -> Any:
    """`value` as a `kind` column holds it (numpy scalars become Python ones); TypeError if it
    is not one."""
    if value is None or kind is object:
        return value
    if kind is np.ndarray:
        if isinstance(value, np.ndarray):
            return value
        if isinstance(value, list | tuple):
            try:
                return np.asarray(value)
            except ValueError:  # nested lists of different lengths
                raise TypeError(f"expected ndarray, got a ragged list {value!r:.60}") from None
    elif kind is bool:
        if isinstance(value, bool | np.bool_):
            return bool(value)
    elif kind is int:
        if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
            return int(value)
    elif kind is float:
        if isinstance(value, int | float | np.integer | np.floating) and not isinstance(
            value, bool | np.bool_
        ):
            return float(value)
    elif isinstance(value, kind):
        return value
    raise TypeError(f"expected {type_name(kind)}, got {type(value).__name__} {value!r:.60}")


class Row(Mapping[str, Any]):
    """One row as a function sees it: `row["x"]` or `row.x`, and its `qid`."""

    __slots__ = ("_schema", "_values", "qid")

    def __init__(self, schema: Schema, values: tuple[Any, ...], qid: int) -> None:
        self._schema = schema
        self._values = values
        self.qid = qid

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[self._schema.index(name)]
        except KeyError:
            raise KeyError(f"no column {name!r}; the row has {self._schema.names}") from None

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(str(exc)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._schema.names)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Row(qid={self.qid}, {dict(self)!r})"


@dataclass(frozen=True)
class Table:
    """Rows of one schema; `group` names the column a `groupby` grouped them by."""

    schema: Schema
    rows: tuple[tuple[Any, ...], ...] = ()
    qids: tuple[int, ...] = ()
    group: str | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Row]:
        for values, qid in zip(self.rows, self.qids, strict=True):
            yield Row(self.schema, values, qid)

    def column(self, name: str) -> list[Any]:
        position = self.schema.index(name)
        return [values[position] for values in self.rows]

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts (what an application answers)."""
        names = self.schema.names
        return [dict(zip(names, values, strict=True)) for values in self.rows]

    def by_query(self) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        for record, qid in zip(self.records(), self.qids, strict=True):
            out.setdefault(qid, []).append(record)
        return out

    @classmethod
    def build(
        cls,
        schema: Schema,
        rows: Sequence[Sequence[Any]],
        qids: Sequence[int] | None = None,
        *,
        group: str | None = None,
        where: str = "table",
    ) -> Table:
        """A table with every value checked against its column's type."""
        checked = []
        for values in rows:
            if len(values) != len(schema):
                raise TypeError(
                    f"{where}: a row has {len(values)} values for {len(schema)} columns "
                    f"{schema.names}"
                )
            try:
                checked.append(
                    tuple(check_value(c.type, v) for c, v in zip(schema, values, strict=True))
                )
            except TypeError as exc:
                column = next(
                    c.name for c, v in zip(schema, values, strict=True) if not _fits(c.type, v)
                )
                raise TypeError(f"{where}: column {column!r}: {exc}") from None
        ids = tuple(range(len(rows))) if qids is None else tuple(qids)
        return cls(schema, tuple(checked), ids, group)


def _fits(kind: type, value: Any) -> bool:
    try:
        check_value(kind, value)
    except TypeError:
        return False
    return True


def column_type(annotation: Any, where: str) -> type:
    """A column type from one annotation (`X | None` is `X`: any column may hold NULL)."""
    if annotation is Any:
        return object
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return column_type(rest[0], where)
    if origin is np.ndarray or annotation is np.ndarray:
        return np.ndarray
    if annotation in COLUMN_TYPES:
        return typing.cast(type, annotation)
    known = ", ".join(type_name(t) for t in COLUMN_TYPES)
    raise FlowError(f"{where}: return type {annotation!r} is not a column type ({known})")


def types_of(fn: Callable[..., Any], where: str, *, batched: bool = False) -> list[type]:
    """The output column types a function's return annotation declares: one type, or a
    `tuple[...]` of them; a batching function returns `list[...]` of those."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise FlowError(f"{where}: its annotations cannot be read: {exc}") from None
    if "return" not in hints:
        name = getattr(fn, "__name__", repr(fn))
        raise FlowError(
            f"{where}: function {name!r} has no return annotation; annotate it "
            "(e.g. '-> float' or '-> tuple[int, float]') so the flow knows its columns"
        )
    annotation = hints["return"]
    if batched:
        if typing.get_origin(annotation) is not list:
            raise FlowError(
                f"{where}: a batching function must return list[...], not {annotation!r}"
            )
        (annotation,) = typing.get_args(annotation) or (Any,)
    if typing.get_origin(annotation) is tuple:
        return [column_type(a, where) for a in typing.get_args(annotation)]
    return [column_type(annotation, where)]


def returns_bool(fn: Callable[..., Any], where: str) -> None:
    """A filter's function must be annotated `-> bool`."""
    if types_of(fn, where) != [bool]:
        raise FlowError(f"{where}: a filter function must be annotated '-> bool'")


def arity(fn: Callable[..., Any]) -> int:
    try:
        return len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return 1
