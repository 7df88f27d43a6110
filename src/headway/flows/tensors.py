"""A table's columns as tensors (one array per column, a row per row), and back.

This is how an action stage's rows travel to a worker and back: numbers and arrays as their
bytes, strings and bytes as BYTES tensors, other values (`object` columns) as JSON. Each column
travels with its NULL mask `\\0null:<column>`. Query ids stay in the frontend: an action
answers one row per row, in order. Metadata tensors start with `\\0`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from headway.errors import InvalidInput
from headway.flows.types import Schema, Table

NULL = "\0null:"
KEEP = "\0keep"
TIMES = "\0seconds"
#: The CPU seconds a worker's action took, shared out over its rows (a race counts its losers').
CPU = "\0cpu"
_JSON = orjson.OPT_SERIALIZE_NUMPY


def to_tensors(table: Table, where: str) -> dict[str, np.ndarray]:
    tensors: dict[str, np.ndarray] = {}
    for position, column in enumerate(table.schema):
        values = [row[position] for row in table.rows]
        # every column's mask, NULLs or not: the requests the controller batches into one
        # action must carry the same tensors
        tensors[NULL + column.name] = np.asarray([v is None for v in values], dtype=np.bool_)
        tensors[column.name] = _encode(column.type, values, where, column.name)
    return tensors


def _encode(kind: type, values: list[Any], where: str, name: str) -> np.ndarray:
    present = [v for v in values if v is not None]
    if kind is np.ndarray:
        fill = np.zeros_like(present[0]) if present else np.zeros(())
        try:
            return np.stack([fill if v is None else v for v in values])
        except ValueError as exc:
            raise InvalidInput(
                f"{where}: column {name!r} holds arrays of different shapes ({exc}); an action "
                "takes equal shapes"
            ) from None
    if kind in (int, float, bool):
        dtype = {int: np.int64, float: np.float64, bool: np.bool_}[kind]
        return np.asarray([kind() if v is None else v for v in values], dtype=dtype)
    if kind is str:
        return np.asarray([(v or "").encode() for v in values], dtype=object)
    if kind is bytes:
        return np.asarray([v or b"" for v in values], dtype=object)
    return np.asarray([orjson.dumps(v, option=_JSON) for v in values], dtype=object)


def from_tensors(schema: Schema, tensors: Mapping[str, np.ndarray], qids: tuple[int, ...]) -> Table:
    columns = []
    for column in schema:
        array = tensors[column.name]
        values = _decode(column.type, array)
        mask = tensors.get(NULL + column.name)
        if mask is not None:
            values = [None if null else v for v, null in zip(values, mask.tolist(), strict=True)]
        columns.append(values)
    rows = tuple(zip(*columns, strict=True)) if columns else tuple(() for _ in qids)
    return Table(schema, tuple(rows), qids)


def _decode(kind: type, array: np.ndarray) -> list[Any]:
    if kind is np.ndarray:
        return list(array)
    if kind in (int, float, bool):
        return [kind(v) for v in array.tolist()]
    if kind is str:
        return [_raw(v).decode() for v in array.reshape(-1)]
    if kind is bytes:
        return [_raw(v) for v in array.reshape(-1)]
    return [orjson.loads(_raw(v)) for v in array.reshape(-1)]


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
