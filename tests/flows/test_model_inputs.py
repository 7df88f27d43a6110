"""A flow's model calls against the models' declared inputs (`flows.model_inputs`): column types
at deploy, each query's rows before its stage is sent, and which calls the frontend can check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.integration import models

from headway.apps import parse_app
from headway.errors import ConfigError, InvalidInput
from headway.flows import Flow, Model, Row
from headway.flows.model_inputs import (
    ModelCall,
    check_rows,
    check_types,
    conform,
    frontend_calls,
)
from headway.flows.operators import Filter, Map, Operator
from headway.flows.types import FlowError
from headway.repository import Repository, TensorSpec

PIXELS = {"digits": (TensorSpec("input-0", "FP64", (-1, 64)),)}
TEXT = {"embed": (TensorSpec("input-0", "BYTES", (-1,)),)}


def signature(key: str) -> tuple[TensorSpec, ...]:
    return {**PIXELS, **TEXT}.get(key, ())


def _cascade() -> Flow:
    flow = Flow("cascade", {"image": np.ndarray, "name": str})
    flow.map(Model("digits", {"probabilities": np.ndarray}, inputs={"input-0": "image"}))
    return flow


# -- at deploy ------------------------------------------------------------------------------
def test_a_text_column_fed_to_a_numeric_model_is_refused_at_deploy() -> None:
    check_types(_cascade(), signature, "app 'a'")  # the image column: fine
    flow = Flow("f", {"image": np.ndarray, "name": str})
    flow.map(Model("digits", {"p": np.ndarray}, inputs={"input-0": "name"}))
    with pytest.raises(FlowError) as refused:
        check_types(flow, signature, "app 'a'")
    message = refused.value.message
    assert "column 'name' is str" in message and "'digits'" in message
    assert "FP64 of shape [-1, 64]" in message
    # stacked side by side (no inputs named): every column counts
    stacked = Flow("s", {"x": float, "label": str})
    stacked.map(Model("digits", {"p": np.ndarray}))
    with pytest.raises(FlowError, match="column 'label' is str"):
        check_types(stacked, signature, "app 'a'")
    numbers = Flow("n", {"x": float})
    numbers.map(Model("embed", {"v": np.ndarray}))
    with pytest.raises(FlowError, match=r"column 'x' is float.*BYTES"):
        check_types(numbers, signature, "app 'a'")
    unknown = Flow("u", {"name": str})
    unknown.map(Model("not-loaded-yet", {"v": np.ndarray}))
    check_types(unknown, signature, "app 'a'")  # inputs not known: checked per query


def test_tensors_the_model_does_not_take_are_refused_at_deploy() -> None:
    flow = Flow("f", {"image": np.ndarray})
    flow.map(Model("digits", {"p": np.ndarray}, inputs={"pixels": "image"}))
    with pytest.raises(
        FlowError, match=r"takes inputs \['input-0'\]; the operator makes \['pixels'\]"
    ):
        check_types(flow, signature, "app 'a'")


def test_deploying_through_the_config_refuses_it_when_model_yaml_declares_inputs(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repository"
    models.python_model(root, "doubler", "Doubler")  # input-0: FP32 [-1, 4]
    (root / "flows").mkdir()
    (root / "flows" / "f.py").write_text(
        "import numpy as np\nfrom headway.flows import Flow, Model\n"
        "flow = Flow('f', {'who': str})\n"
        "flow.map(Model('doubler', {'output-0': np.ndarray}, inputs={'input-0': 'who'}))\n"
    )
    with pytest.raises(ConfigError, match="column 'who' is str, but model 'doubler' takes"):
        parse_app("a", {"flow": "flows/f.py:flow"}, Repository.scan(root))


# -- per query ------------------------------------------------------------------------------
def _row(image: object) -> object:
    return _cascade().table([{"image": image, "name": "x"}])


def test_a_bad_row_is_a_400_naming_the_column_and_the_shape() -> None:
    (call,) = frontend_calls([(op, label) for op, label in _ops(_cascade())])
    check_rows([call], _row([0.5] * 64), signature, "app 'a'")
    check_rows([call], _row([0] * 64), signature, "app 'a'")  # JSON integers: exact in FP64
    for image, expected in (
        ([1.0] * 3, "expected shape [-1, 64], got [1, 3]"),
        ([1.0] * 65, "expected shape [-1, 64], got [1, 65]"),
        ([[1.0] * 64], "expected shape [-1, 64], got [1, 1, 64]"),
        (["a"] * 64, "expected datatype FP64, got BYTES"),
        ([None] * 64, "expected datatype FP64, got BYTES"),
        ([True] * 64, "expected datatype FP64, got BOOL"),
    ):
        with pytest.raises(InvalidInput) as refused:
            check_rows([call], _row(image), signature, "app 'a'")
        message = refused.value.message
        assert message.startswith("app 'a': operator 'model:digits': column 'image' feeds model")
        assert expected in message, message


def test_a_ragged_row_is_refused_when_the_table_is_made() -> None:
    with pytest.raises(InvalidInput, match="column 'image': expected ndarray, got a ragged list"):
        _cascade().table([{"image": [[1, 2], [3]], "name": "x"}])


def _ops(flow: Flow) -> list[tuple[Operator, str]]:
    return [(node.op, node.label) for node in flow.nodes if node.op is not None]


def _keep(row: Row) -> bool:
    return True


def _same(x: np.ndarray) -> np.ndarray:
    return x


def _remade(row: Row) -> np.ndarray:
    return np.asarray(row["image"])


def test_the_frontend_checks_the_models_that_get_the_rows_it_sends() -> None:
    digits = Model("digits", {"p": np.ndarray}, inputs={"input-0": "image"})
    other = Model("digits", {"q": np.ndarray}, inputs={"input-0": "other"})
    stacked = Model("digits", {"r": np.ndarray})
    keep, same = Filter(_keep), Map(_same, col="image")
    remade = Map(_remade, names=["image"])

    def found(*ops: Operator) -> list[str]:
        return [call.label for call in frontend_calls([(op, f"{i}") for i, op in enumerate(ops)])]

    assert found(digits) == ["0"]
    assert found(keep, digits) == ["1"]  # a leading filter runs in the frontend first
    assert found(stacked) == ["0"]
    assert found(digits, stacked) == ["0"]  # the stacked row now has the first model's output
    assert found(digits, other) == ["0", "1"]
    assert found(same, digits) == []  # the image a function made: not the row sent
    assert found(same, other) == ["1"]
    assert found(remade, digits) == []
    assert found(digits, keep, other) == ["0"]  # which rows go on is known only there


def test_conform_converts_numbers_the_models_datatype_holds_exactly() -> None:
    specs = (TensorSpec("a", "FP64", (-1,)), TensorSpec("b", "FP32", (-1,)),
             TensorSpec("c", "INT32", (-1,)), TensorSpec("d", "FP32", (-1,)))  # fmt: skip
    tensors = conform(
        specs,
        {
            "a": np.array([0, 5, 13]),
            "b": np.array([0.1, 0.5]),
            "c": np.array([2**40]),
            "d": np.array([np.nan, 0.5]),
        },
    )
    assert tensors["a"].dtype == np.float64 and tensors["d"].dtype == np.float32
    assert tensors["b"].dtype == np.float64 and tensors["c"].dtype == np.int64  # left to refuse
    assert ModelCall("m", None, "l").feeds(_cascade().schema) == {"input-0": ["image", "name"]}
