"""Between an application's JSON and a model's tensors: one input row in, one answer out.

`model_inputs` turns a query's row into each model's one-row batch (checked against its
signature, so numpy never coerces quietly); `selection_output` is the one rule for what a
model's answer means to the selection (class and confidence, or a regression value).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from headway.datatypes import numpy_dtype
from headway.errors import InvalidInput
from headway.repository import TensorSpec
from headway.selection import ModelAnswer
from headway.selection.losses import plain

DEFAULT_INPUT = "input-0"
LABEL, PROBABILITIES, DEFAULT_OUTPUT = "label", "probabilities", "output-0"


def model_inputs(model: str, value: Any, specs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    """One input row -> the one-row batch that model `model` takes.

    The row is a number, a (nested) list, or an object `{input name: value}` for models with
    several named inputs. It gets the model's input name and datatype (from its signature; a
    model without one gets `input-0` and the datatype numpy infers). Leaves must be numbers for
    numeric inputs (no strings, booleans or nulls that numpy would quietly coerce) and strings
    for BYTES inputs."""
    if isinstance(value, Mapping):
        by_name = {spec.name: spec for spec in specs}
        if specs and set(value) != set(by_name):
            raise InvalidInput(
                f"model {model!r} takes inputs {sorted(by_name)}; the input names {sorted(value)}"
            )
        if not value:
            raise InvalidInput("the input object is empty")
        return {str(n): _row(model, str(n), v, by_name.get(str(n))) for n, v in value.items()}
    if len(specs) > 1:
        raise InvalidInput(
            f"model {model!r} takes inputs {[s.name for s in specs]}: "
            "send the input as an object {name: value}"
        )
    spec = specs[0] if specs else None
    name = spec.name if spec else DEFAULT_INPUT
    return {name: _row(model, name, value, spec)}


def _row(model: str, name: str, value: Any, spec: TensorSpec | None) -> np.ndarray:
    dtype = numpy_dtype(spec.datatype) if spec is not None else None
    leaves = _leaves(value)
    where = f"model {model!r} input {name!r}"
    if not leaves:
        raise InvalidInput(f"{where}: the input is empty")
    texts = all(isinstance(x, str) for x in leaves)
    if dtype == np.dtype(object) or (dtype is None and texts):
        if not texts:
            raise InvalidInput(f"{where}: a BYTES input holds strings only")
        dtype = np.dtype(object)
    elif dtype is not None and dtype.kind == "b":
        if not all(isinstance(x, bool) for x in leaves):
            raise InvalidInput(f"{where}: a BOOL input holds true/false only")
    else:
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in leaves):
            raise InvalidInput(f"{where}: expected numbers, got {value!r:.80}")
        if (
            dtype is not None
            and dtype.kind in "iu"
            and any(isinstance(x, float) and not x.is_integer() for x in leaves)
        ):
            raise InvalidInput(f"{where}: an integer input cannot hold fractions")
    try:
        array = np.array(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidInput(f"{where}: cannot be made a tensor: {exc}") from None
    return array.reshape((1, *array.shape))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for item in value:
            out.extend(_leaves(item))
        return out
    return [value]


def selection_output(outputs: Mapping[str, np.ndarray], task: str = "classification") -> Any:
    """The answer a model's first row of outputs gives to the selection: the one rule.

    - classification: the `label` output when the model has one (scikit-learn classifiers do),
      with the top entry of its `probabilities` as the model's own confidence; otherwise the
      `probabilities` output, else `output-0`, else the first output: a row of several values
      (a 2-D tensor) predicts its argmax, with the top value as confidence when the row is a
      probability vector (non-negative, summing to 1); a single value is the class as it is.
    - regression: `output-0` (else the first output): a single value as a number, else the row
      as a list of numbers.

    Byte strings become text, numpy scalars Python numbers, so every answer is JSON."""
    if not outputs:
        raise ValueError("the model answered no outputs")
    first = next(iter(outputs))
    if task == "classification" and LABEL in outputs:
        label = _plain(np.asarray(outputs[LABEL])[0])
        probabilities = outputs.get(PROBABILITIES)
        confidence = None
        if probabilities is not None and np.asarray(probabilities).ndim == 2:
            confidence = float(np.max(np.asarray(probabilities)[0]))
        return ModelAnswer(label, confidence)
    if task == "classification":
        name = next((n for n in (PROBABILITIES, DEFAULT_OUTPUT) if n in outputs), first)
    else:
        name = DEFAULT_OUTPUT if DEFAULT_OUTPUT in outputs else first
    row = np.asarray(outputs[name])[0]
    if row.size == 1:
        return _plain(row.reshape(-1)[0])
    if task != "classification":
        return _plain(row)
    flat = row.reshape(-1)
    confidence = None
    if flat.dtype.kind == "f" and flat.min() >= 0 and abs(float(flat.sum()) - 1.0) <= 1e-3:
        confidence = float(flat.max())
    return ModelAnswer(int(np.argmax(flat)), confidence)


def _plain(value: Any) -> Any:
    value = plain(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def input_digest(value: Any) -> bytes:
    """A digest of an input row that ignores JSON spelling (1 vs 1.0, key order)."""
    return hashlib.blake2b(orjson.dumps(_canonical(value)), digest_size=16).digest()


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Mapping):
        return [
            [str(k), _canonical(v)] for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        ]
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return repr(value)
