"""Checking request tensors against a model's signature, with messages that say what to fix."""

from __future__ import annotations

import numpy as np
import pytest

from headway.control.models.validate import check_inputs, check_outputs
from headway.datatypes import oip_datatype
from headway.errors import InvalidInput
from headway.repository import TensorSpec

SPECS = (TensorSpec("input-0", "FP32", (-1, 64)),)


def test_valid_inputs_return_the_number_of_rows() -> None:
    assert check_inputs("m", SPECS, {"input-0": np.zeros((3, 64), np.float32)}) == 3


def test_shape_mismatch_names_the_input_and_both_shapes() -> None:
    with pytest.raises(InvalidInput) as info:
        check_inputs("m", SPECS, {"input-0": np.zeros((3, 10), np.float32)})
    assert info.value.message == "input 'input-0': expected shape [-1, 64], got [3, 10]"


def test_rank_mismatch_is_a_shape_mismatch() -> None:
    with pytest.raises(InvalidInput, match=r"expected shape \[-1, 64\], got \[3, 64, 1\]"):
        check_inputs("m", SPECS, {"input-0": np.zeros((3, 64, 1), np.float32)})


def test_fixed_dimensions_must_match_exactly() -> None:
    specs = (TensorSpec("img", "UINT8", (-1, 2, 2)),)
    assert check_inputs("m", specs, {"img": np.zeros((5, 2, 2), np.uint8)}) == 5
    with pytest.raises(InvalidInput, match=r"expected shape \[-1, 2, 2\], got \[5, 2, 3\]"):
        check_inputs("m", specs, {"img": np.zeros((5, 2, 3), np.uint8)})


def test_datatype_mismatch() -> None:
    with pytest.raises(InvalidInput) as info:
        check_inputs("m", SPECS, {"input-0": np.zeros((3, 64), np.float64)})
    assert info.value.message == (
        "input 'input-0': expected datatype FP32, got FP64 "
        "(FP64 does not convert to FP32 without loss)"
    )


@pytest.mark.parametrize(
    ("declared", "sent", "value"),
    [
        ("FP64", np.float32, 0.1),  # FP32's 0.1 is exactly an FP64 value
        ("INT64", np.int32, -(2**31)),
        ("FP64", np.int32, 2**31 - 1),
        ("INT32", np.uint16, 65535),
    ],
)
def test_a_datatype_that_converts_without_loss_is_converted(
    declared: str, sent: type, value: float
) -> None:
    specs = (TensorSpec("x", declared, (-1, 2)),)
    inputs = {"x": np.full((3, 2), value, dtype=sent)}
    original = inputs["x"].copy()
    assert check_inputs("m", specs, inputs) == 3
    converted = inputs["x"]
    assert oip_datatype(converted.dtype) == declared
    assert (converted.astype(original.dtype) == original).all()  # the same values, exactly


@pytest.mark.parametrize(
    ("declared", "sent"),
    [("INT32", np.int64), ("FP64", np.int64), ("FP32", np.int32), ("INT64", np.uint64),
     ("INT64", np.bool_), ("FP32", np.float64)],
)  # fmt: skip
def test_a_datatype_that_would_lose_values_is_refused(declared: str, sent: type) -> None:
    specs = (TensorSpec("x", declared, (-1,)),)
    with pytest.raises(InvalidInput, match=rf"'x': expected datatype {declared}, got "):
        check_inputs("m", specs, {"x": np.zeros(2, dtype=sent)})


def test_bytes_input_accepts_object_and_string_arrays() -> None:
    specs = (TensorSpec("text", "BYTES", (-1,)),)
    texts = np.array([b"a", b"b"], dtype=object)
    assert check_inputs("m", specs, {"text": texts}) == 2
    assert check_inputs("m", specs, {"text": np.array(["a", "b", "c"])}) == 3


def test_unknown_and_missing_inputs_are_named() -> None:
    specs = (TensorSpec("a", "FP32", (-1,)), TensorSpec("b", "FP32", (-1,)))
    with pytest.raises(InvalidInput) as info:
        check_inputs("m", specs, {"a": np.zeros(2, np.float32), "c": np.zeros(2, np.float32)})
    assert (
        info.value.message == "model 'm' takes inputs ['a', 'b']; unexpected ['c']; missing ['b']"
    )
    with pytest.raises(InvalidInput, match=r"missing \['b'\]$"):
        check_inputs("m", specs, {"a": np.zeros(2, np.float32)})


def test_no_inputs() -> None:
    with pytest.raises(InvalidInput, match="has no inputs"):
        check_inputs("m", SPECS, {})


def test_inputs_must_agree_on_the_batch_dimension() -> None:
    with pytest.raises(InvalidInput, match="input 'b': batch dimension 3 differs from the other"):
        check_inputs("m", (), {"a": np.zeros(2), "b": np.zeros(3)})


def test_scalar_has_no_batch_dimension() -> None:
    with pytest.raises(InvalidInput, match="input 'a': needs a batch dimension, got a scalar"):
        check_inputs("m", (), {"a": np.float32(1.0) * np.ones(())})


def test_empty_batch_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"the batch is empty \(0 rows\)"):
        check_inputs("m", (), {"a": np.zeros((0, 4))})


def test_without_a_signature_only_the_batch_is_checked() -> None:
    assert check_inputs("m", (), {"a": np.zeros((4, 2)), "b": np.zeros(4, np.int8)}) == 4


def test_check_outputs() -> None:
    specs = (TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP64", (-1, 3)))
    check_outputs("m", specs, None)
    check_outputs("m", specs, ["label"])
    check_outputs("m", specs, ["probabilities", "label"])
    check_outputs("m", (), ["anything"])  # unknown signature: the model decides
    with pytest.raises(InvalidInput) as info:
        check_outputs("m", specs, ["label", "scores"])
    assert info.value.message == (
        "model 'm' has outputs ['label', 'probabilities']; unknown output(s) ['scores']"
    )
