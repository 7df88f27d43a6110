"""Warm-up inputs for a flow's stage models, so a stage is warm before its app is ready.

A repository model is warmed from its signature (`headway.control.models.measuring`); a fused stage's
inputs are the columns of the table that reaches it, which the controller cannot make up, so
the application does (`stage_inputs`). Warm-up is best effort: a stage whose columns cannot be
made meets its first queries cold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from headway.flows.operators import Model, Operator
from headway.flows.tensors import NULL
from headway.flows.types import Schema
from headway.repository import TensorSpec

#: The datatype of a scalar column's tensor (as `tensors.to_tensors` makes it).
SCALARS = {int: "INT64", float: "FP64", bool: "BOOL"}


def stage_inputs(
    schema: Schema,
    ops: Sequence[Operator],
    signature: Callable[[str], Sequence[TensorSpec]],
) -> tuple[TensorSpec, ...] | None:
    """The stage's input tensors for rows of zeros; None when a column cannot be made.
    `ops`: the stage's operators first, then the rest of the flow's; `signature(model)` gives
    a repository model's input tensors (empty: unknown).

    The inputs are the columns of the table that reaches the stage, each with its NULL mask
    (`headway.flows.tensors`). A number or bool column is zeros; an array column takes the
    shape and datatype of the model input it feeds (a `Model` operator's `inputs` names the
    column): in the stage itself if one does, else anywhere in the flow (an array column
    usually travels unchanged, as the cascade's image does to its last stage). Strings, bytes,
    objects and arrays no model input describes cannot be made."""
    fed: dict[str, TensorSpec] = {}
    for op in ops:
        if isinstance(op, Model) and op.inputs:
            specs = {spec.name: spec for spec in signature(op.model)}
            for tensor, name in op.inputs.items():
                if tensor in specs:
                    fed.setdefault(name, specs[tensor])
    out: list[TensorSpec] = []
    for column in schema:
        out.append(TensorSpec(NULL + column.name, "BOOL", (-1,)))
        scalar = SCALARS.get(column.type)
        if scalar is not None:
            out.append(TensorSpec(column.name, scalar, (-1,)))
            continue
        spec = fed.get(column.name)
        if column.type is not np.ndarray or spec is None or spec.datatype == "BYTES":
            return None
        if -1 in spec.shape[1:]:
            return None
        out.append(TensorSpec(column.name, spec.datatype, (-1, *spec.shape[1:])))
    return tuple(out)
