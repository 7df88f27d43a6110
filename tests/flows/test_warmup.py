"""Which stage inputs the app can make up for a warm-up, and their shapes."""

from __future__ import annotations

import numpy as np

from headway.flows import Model
from headway.flows.types import Schema
from headway.flows.warmup import stage_inputs
from headway.repository import TensorSpec

IMAGE = Model("m", {"p": np.ndarray}, inputs={"input-0": "image"})


def signature(model: str) -> tuple[TensorSpec, ...]:
    return {"m": (TensorSpec("input-0", "FP32", (-1, 8, 8)),)}.get(model, ())


def test_numbers_are_zeros_and_an_array_takes_the_shape_of_the_model_input_it_feeds() -> None:
    schema = Schema([("image", np.ndarray), ("n", int), ("x", float), ("ok", bool)])
    specs = stage_inputs(schema, [IMAGE], signature)
    assert specs is not None
    assert {s.name: (s.datatype, s.shape) for s in specs} == {
        "\0null:image": ("BOOL", (-1,)),
        "image": ("FP32", (-1, 8, 8)),
        "\0null:n": ("BOOL", (-1,)),
        "n": ("INT64", (-1,)),
        "\0null:x": ("BOOL", (-1,)),
        "x": ("FP64", (-1,)),
        "\0null:ok": ("BOOL", (-1,)),
        "ok": ("BOOL", (-1,)),
    }


def test_a_column_that_cannot_be_made_up_leaves_the_stage_cold() -> None:
    assert stage_inputs(Schema([("name", str)]), [IMAGE], signature) is None
    assert stage_inputs(Schema([("other", np.ndarray)]), [IMAGE], signature) is None
    unknown = Model("unsigned", {"p": np.ndarray}, inputs={"input-0": "image"})
    assert stage_inputs(Schema([("image", np.ndarray)]), [unknown], signature) is None
