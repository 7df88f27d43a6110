"""A flow's model calls checked against the models' declared inputs, as `/v2/.../infer` checks
a request (`control.models.validate`): the column types when the flow is deployed, each query's values
before the stage that calls the model is sent.

A deployed flow's stage runs the rows of many queries in one worker action: a row a model cannot
take (a wrong width, a nested list, strings for numbers) would fail the whole action, the other
queries' rows with it, as a 500. So the frontend checks each query's rows first, where it can
tell what reaches the model: a model whose input columns arrive unchanged from the rows the
frontend sends (or holds, for `select`). A bad row is then a 400 that names the column and the
shape or datatype the model takes, and costs nobody else anything. A model that reads what a
function made inside a fused stage is not checked here: what it gets is the function's doing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from headway.control.models.validate import check_inputs
from headway.datatypes import OIP_TO_NUMPY
from headway.errors import InvalidInput
from headway.flows.graph import FlowGraph
from headway.flows.local import leading_filters
from headway.flows.operators import Filter, Map, Model, Operator, encode_inputs
from headway.flows.select import Select
from headway.flows.types import FlowError, Schema, Table, type_name
from headway.repository import TensorSpec

#: A model's declared inputs by its key (`name` or `name@version`); empty when not known.
Signature = Callable[[str], Sequence[TensorSpec]]

#: The tensor a model operator stacks all its row's columns into when no `inputs` are named.
STACKED = "input-0"


@dataclass(frozen=True)
class ModelCall:
    """One model an operator calls, with the columns of its input tensors (tensor -> column;
    None: the row's columns side by side as `input-0`)."""

    model: str
    inputs: Mapping[str, str] | None
    label: str

    def feeds(self, schema: Schema) -> dict[str, list[str]]:
        """tensor -> the columns that make it."""
        if self.inputs:
            return {tensor: [column] for tensor, column in self.inputs.items()}
        return {STACKED: schema.names}


def model_calls(op: Operator, label: str) -> list[ModelCall]:
    """The models an operator calls (none for most)."""
    if isinstance(op, Model):
        return [ModelCall(op.model, op.inputs, label)]
    if isinstance(op, Select):
        return [ModelCall(model, op.inputs, label) for model in op.models]
    return []


# -- when the flow is deployed --------------------------------------------------------------
def check_types(flow: FlowGraph, signature: Signature, where: str) -> None:
    """Every model call whose model's inputs are known: the tensors it makes are those the model
    takes, and no text column feeds a numeric input nor a number a BYTES one; FlowError naming
    the operator, the column and what the model takes."""
    for node in flow.nodes:
        if node.op is None:
            continue
        for call in model_calls(node.op, node.label):
            specs = {spec.name: spec for spec in signature(call.model)}
            if not specs:
                continue
            schema = node.inputs[0].shape.schema
            fed = call.feeds(schema)
            if set(fed) != set(specs):
                raise FlowError(
                    f"{where}: operator {node.label!r}: model {call.model!r} takes inputs "
                    f"{sorted(specs)}; the operator makes {sorted(fed)} (name them with "
                    "inputs={tensor: column})"
                )
            for tensor, columns in fed.items():
                spec = specs[tensor]
                for column in columns:
                    kind = schema.type_of(column)
                    text, number = kind in (str, bytes), kind in (int, float)
                    if (text and spec.datatype != "BYTES") or (number and spec.datatype == "BYTES"):
                        raise FlowError(
                            f"{where}: operator {node.label!r}: column {column!r} is "
                            f"{type_name(kind)}, but model {call.model!r} takes input "
                            f"{tensor!r} as {spec.datatype} of shape {list(spec.shape)}"
                        )


# -- per query ------------------------------------------------------------------------------
def frontend_calls(ops: Sequence[tuple[Operator, str]]) -> list[ModelCall]:
    """The model calls of an action stage whose inputs the frontend holds: those whose columns
    reach them unchanged from the rows it sends (after the stage's leading filters, which it
    runs itself). A filter after those ends what can be told (which rows go on is known only
    there), as does a function that remakes the whole row."""
    found: list[ModelCall] = []
    changed: set[str] = set()  # columns made or remade since the rows were sent
    intact = True  # the row is still exactly the one sent
    for op, label in ops[leading_filters(list(ops)) :]:
        if isinstance(op, Filter):
            break
        if isinstance(op, Map):
            if op.col is None:
                break
            changed.update({op.col, *op.names})
            intact = False
        elif isinstance(op, Model):
            mine = model_calls(op, label)
            if (op.inputs is None and intact) or (
                op.inputs is not None and not changed.intersection(op.inputs.values())
            ):
                found.extend(mine)
            changed.update(op.names or op.outputs)
            intact = False
    return found


def check_rows(found: Sequence[ModelCall], table: Table, signature: Signature, where: str) -> None:
    """One query's rows against the models of `found` (`control.models.validate.check_inputs`, as
    `/v2` runs it); InvalidInput naming the column and what the model takes."""
    for call in found:
        specs = signature(call.model)
        if not specs or not table.rows:
            continue
        tensors = conform(specs, encode_inputs(table, call.inputs, f"{where}: {call.label}"))
        try:
            check_inputs(call.model, specs, tensors)
        except InvalidInput as exc:
            raise InvalidInput(
                f"{where}: operator {call.label!r}: {_fed_by(call, table.schema, exc.message)}"
            ) from None


def conform(specs: Sequence[TensorSpec], tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`tensors`, each array of numbers in its model's numeric datatype where that holds every
    value exactly. A flow's rows come from JSON, whose numbers have no datatype (numpy makes
    integers INT64, the others FP64): `[0, 5, 13]` is a good row for an FP64 model, as `/v2`
    takes the same numbers with the datatype the request declares. A value the model's
    datatype cannot hold (0.1 in FP32, 2**40 in INT32) stays as it was, for `check_inputs` to
    refuse."""
    for spec in specs:
        array = tensors.get(spec.name)
        target = OIP_TO_NUMPY.get(spec.datatype)
        if array is None or target is None or array.dtype == target:
            continue
        if array.dtype.kind not in "iuf" or target.kind not in "iuf":
            continue
        with np.errstate(all="ignore"):
            cast = array.astype(target)
        if np.array_equal(cast, array, equal_nan=array.dtype.kind == "f"):
            tensors[spec.name] = cast
    return tensors


def _fed_by(call: ModelCall, schema: Schema, message: str) -> str:
    """`message` of `check_inputs`, prefixed with the column(s) of the tensor it names."""
    for tensor, columns in call.feeds(schema).items():
        if message.startswith(f"input {tensor!r}"):
            named = f"column {columns[0]!r}" if len(columns) == 1 else f"columns {columns}"
            return f"{named} feeds model {call.model!r} {message}"
    return message
