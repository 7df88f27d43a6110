"""Checking a request's tensors against a model's signature, with messages that say what to fix."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headway.datatypes import oip_datatype
from headway.errors import InvalidInput
from headway.repository import TensorSpec


def check_inputs(model: str, specs: Sequence[TensorSpec], inputs: dict[str, np.ndarray]) -> int:
    """Validate names, datatypes and shapes; returns the number of rows (the batch dimension)."""
    if not inputs:
        raise InvalidInput(f"model {model!r}: the request has no inputs")
    if specs:
        expected = {spec.name for spec in specs}
        unknown = set(inputs) - expected
        missing = expected - set(inputs)
        if unknown or missing:
            raise InvalidInput(
                f"model {model!r} takes inputs {sorted(expected)}; "
                + (f"unexpected {sorted(unknown)}" if unknown else "")
                + ("; " if unknown and missing else "")
                + (f"missing {sorted(missing)}" if missing else "")
            )
        for spec in specs:
            _check_tensor(spec, inputs[spec.name])
    rows: int | None = None
    for name, array in inputs.items():
        if array.ndim == 0:
            raise InvalidInput(f"input {name!r}: needs a batch dimension, got a scalar")
        if rows is None:
            rows = int(array.shape[0])
        elif array.shape[0] != rows:
            raise InvalidInput(
                f"input {name!r}: batch dimension {array.shape[0]} differs from the other "
                f"inputs' {rows}"
            )
    if not rows:
        raise InvalidInput(f"model {model!r}: the batch is empty (0 rows)")
    return rows


def _check_tensor(spec: TensorSpec, array: np.ndarray) -> None:
    datatype = oip_datatype(array.dtype)
    if datatype != spec.datatype:
        raise InvalidInput(
            f"input {spec.name!r}: expected datatype {spec.datatype}, got {datatype}"
        )
    shape = list(array.shape)
    want = list(spec.shape)
    if len(shape) != len(want) or any(w != -1 and w != s for w, s in zip(want, shape, strict=True)):
        raise InvalidInput(f"input {spec.name!r}: expected shape {want}, got {shape}")


def check_outputs(model: str, specs: Sequence[TensorSpec], wanted: Sequence[str] | None) -> None:
    if wanted is None or not specs:
        return
    known = {spec.name for spec in specs}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise InvalidInput(
            f"model {model!r} has outputs {sorted(known)}; unknown output(s) {unknown}"
        )
