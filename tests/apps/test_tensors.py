"""The one rule from a model's outputs to the selection's answer, and JSON input rows to batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from headway.apps import input_digest, model_inputs, selection_output
from headway.errors import InvalidInput
from headway.repository import TensorSpec
from headway.selection import ModelAnswer

DIGITS = (TensorSpec("input-0", "FP64", (-1, 64)),)


# -- outputs --------------------------------------------------------------------------------------
def test_a_classifier_label_wins_with_its_top_probability_as_confidence() -> None:
    outputs = {
        "label": np.array([7], np.int64),
        "probabilities": np.array([[0.1, 0.2, 0.7]]),
    }
    assert selection_output(outputs) == ModelAnswer(7, pytest.approx(0.7))
    assert selection_output({"label": np.array([3])}) == ModelAnswer(3, None)
    assert selection_output({"label": np.array([b"cat"], dtype=object)}) == ModelAnswer("cat", None)


def test_without_a_label_a_2d_output_predicts_its_argmax() -> None:
    probabilities = {"probabilities": np.array([[0.2, 0.8]])}
    assert selection_output(probabilities) == ModelAnswer(1, pytest.approx(0.8))
    scores = {"output-0": np.array([[-3.0, 5.0, 1.0]], np.float32)}  # logits: no confidence
    assert selection_output(scores) == ModelAnswer(1, None)
    first = {"logits": np.array([[0.0, 2.0]]), "extra": np.array([[9.0, 0.0]])}
    assert selection_output(first) == ModelAnswer(1, None)


def test_a_single_value_is_the_class_as_it_is() -> None:
    assert selection_output({"output-0": np.array([4], np.int64)}) == 4
    assert selection_output({"output-0": np.array([[2.0]])}) == 2.0
    assert isinstance(selection_output({"output-0": np.array([4], np.int64)}), int)


def test_a_regressor_answers_numbers() -> None:
    assert selection_output({"output-0": np.array([[1.5]])}, "regression") == 1.5
    assert selection_output({"output-0": np.array([[1.0, 2.0]])}, "regression") == [1.0, 2.0]
    # a regressor's label-like output is not special
    assert selection_output({"label": np.array([3.5])}, "regression") == 3.5


def test_no_outputs_is_an_error() -> None:
    with pytest.raises(ValueError, match="no outputs"):
        selection_output({})


# -- inputs ---------------------------------------------------------------------------------------
def test_one_row_becomes_a_one_row_batch_of_the_model_datatype() -> None:
    batch = model_inputs("digits", [1] * 64, DIGITS)
    assert list(batch) == ["input-0"]
    assert batch["input-0"].shape == (1, 64) and batch["input-0"].dtype == np.float64
    image = model_inputs("cnn", [[0, 1], [2, 3]], (TensorSpec("x", "FP32", (-1, 2, 2)),))
    assert image["x"].shape == (1, 2, 2) and image["x"].dtype == np.float32
    assert model_inputs("n", 3, (TensorSpec("v", "INT64", (-1,)),))["v"].tolist() == [3]


def test_named_inputs_come_as_an_object() -> None:
    specs = (TensorSpec("a", "FP32", (-1, 2)), TensorSpec("b", "INT32", (-1, 1)))
    batch = model_inputs("two", {"a": [1.0, 2.0], "b": [5]}, specs)
    assert batch["a"].dtype == np.float32 and batch["b"].tolist() == [[5]]
    with pytest.raises(InvalidInput, match="send the input as an object"):
        model_inputs("two", [1.0, 2.0], specs)
    with pytest.raises(InvalidInput, match=r"takes inputs \['a', 'b'\]"):
        model_inputs("two", {"a": [1.0, 2.0]}, specs)


def test_without_a_signature_numpy_infers_the_datatype() -> None:
    assert model_inputs("m", [1.5, 2], ())["input-0"].dtype == np.float64
    assert model_inputs("m", ["hi", "there"], ())["input-0"].dtype == object


@pytest.mark.parametrize(
    ("value", "specs", "message"),
    [
        (["1"] * 64, DIGITS, "expected numbers"),
        ([True] * 64, DIGITS, "expected numbers"),
        ([None] * 64, DIGITS, "expected numbers"),
        ([], DIGITS, "the input is empty"),
        ([[1, 2], [3]], DIGITS, "cannot be made a tensor"),
        ([1.5], (TensorSpec("v", "INT64", (-1, 1)),), "cannot hold fractions"),
        ([2**70], (TensorSpec("v", "INT64", (-1, 1)),), "cannot be made a tensor"),
        ([1], (TensorSpec("t", "BYTES", (-1, 1)),), "holds strings only"),
        ([1], (TensorSpec("f", "BOOL", (-1, 1)),), "true/false only"),
        ({}, (), "the input object is empty"),
    ],
)
def test_bad_input_rows_are_named(value: Any, specs: tuple[TensorSpec, ...], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        model_inputs("m", value, specs)


def test_the_input_digest_ignores_json_spelling() -> None:
    assert input_digest([1, 2.0]) == input_digest([1.0, 2])
    assert input_digest({"a": 1, "b": [2]}) == input_digest({"b": [2.0], "a": 1.0})
    assert input_digest([1, 2]) != input_digest([2, 1])
    assert input_digest([True]) != input_digest([1])
