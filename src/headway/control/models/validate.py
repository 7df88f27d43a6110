"""Checking a request's tensors against a model's signature, with messages that say what to fix."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headway.datatypes import OIP_TO_NUMPY, numpy_dtype, oip_datatype
from headway.errors import InvalidInput
from headway.repository import TensorSpec


def check_inputs(model: str, specs: Sequence[TensorSpec], inputs: dict[str, np.ndarray]) -> int:
    """Validate names, datatypes and shapes; returns the number of rows (the batch dimension).

    A tensor whose datatype converts to the declared one without loss (`lossless`) is
    converted, in `inputs`; any other datatype is refused, naming both."""
    if not inputs:
        raise InvalidInput(f"model {model!r}: the request has no inputs")
    if specs:
        named = len(inputs) == len(specs)
        for spec in specs:
            named = named and spec.name in inputs
        if not named:
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
            inputs[spec.name] = _check_tensor(spec, inputs[spec.name])
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


def _check_tensor(spec: TensorSpec, array: np.ndarray) -> np.ndarray:
    shape, want = array.shape, spec.shape
    fits = len(shape) == len(want)
    if fits:  # a loop by index, not any(...) or zip(strict=True), for every tensor
        for i in range(len(want)):
            w = want[i]
            if w != -1 and w != shape[i]:
                fits = False
                break
    if not fits:
        raise InvalidInput(f"input {spec.name!r}: expected shape {list(want)}, got {list(shape)}")
    if array.dtype is OIP_TO_NUMPY.get(spec.datatype):  # the declared dtype itself
        return array
    datatype = oip_datatype(array.dtype)
    if datatype == spec.datatype:
        return array
    if lossless(datatype, spec.datatype):
        return array.astype(numpy_dtype(spec.datatype))
    numeric = "BYTES" not in (datatype, spec.datatype)
    raise InvalidInput(
        f"input {spec.name!r}: expected datatype {spec.datatype}, got {datatype}"
        + (f" ({datatype} does not convert to {spec.datatype} without loss)" if numeric else "")
    )


def lossless(sent: str, declared: str) -> bool:
    """Whether every value of datatype `sent` is exactly a value of `declared`: a wider float
    (FP32 -> FP64), a wider integer of a kind that holds every value (INT32 -> INT64, UINT8 ->
    INT16), or an integer narrow enough for the float's mantissa (INT32 -> FP64, INT16 ->
    FP32). BOOL and BYTES convert to nothing else."""
    if "BOOL" in (sent, declared) or "BYTES" in (sent, declared):
        return False
    source, target = numpy_dtype(sent), numpy_dtype(declared)
    if source.kind in "iu" and target.kind == "f" and source.itemsize >= target.itemsize:
        return False  # numpy calls INT64 -> FP64 safe; it rounds above 2**53
    return bool(np.can_cast(source, target, "safe"))


def check_outputs(model: str, specs: Sequence[TensorSpec], wanted: Sequence[str] | None) -> None:
    if wanted is None or not specs:
        return
    for name in wanted:  # loops, not comprehensions: this runs for every request
        for spec in specs:
            if spec.name == name:
                break
        else:
            break
    else:
        return
    known = {spec.name for spec in specs}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise InvalidInput(
            f"model {model!r} has outputs {sorted(known)}; unknown output(s) {unknown}"
        )
