"""`Request` is a plain class with a hand-written `__init__` (one is made per request, and a
dataclass's generated `__init__` runs interpreted even where its module is compiled): its
arguments, defaults and attributes are those the dataclass had."""

from __future__ import annotations

import numpy as np
import pytest

from headway.control.models import Prediction
from headway.control.request import DEFAULT_PRIORITY, Request


def test_a_request_made_with_the_five_required_arguments_has_the_former_defaults() -> None:
    inputs = {"x": np.zeros((2, 3))}
    request = Request("m@1", inputs, 2, 1.0, 3.5)
    assert (request.model, request.inputs, request.rows) == ("m@1", inputs, 2)
    assert (request.arrival, request.deadline) == (1.0, 3.5)
    assert request.priority == DEFAULT_PRIORITY
    assert request.outputs is None and request.token is None and request.then is None
    assert (request.attempts, request.seq) == (0, 0)
    assert request.measured is True and request.counted is False and request.trace is None
    assert request.sort_key() == (DEFAULT_PRIORITY, 3.5, 0)


def test_every_field_can_be_given_by_position_or_by_name() -> None:
    def then(token: object) -> None:
        pass

    by_position = Request("m@1", {}, 1, 0.0, 1.0, 3, ("y",), "tag", then, 2, 7, False, "t", True)
    by_name = Request(
        "m@1", {}, 1, 0.0, 1.0, priority=3, outputs=("y",), token="tag", then=then,
        attempts=2, seq=7, measured=False, trace="t", counted=True,
    )  # fmt: skip
    for request in (by_position, by_name):
        assert (request.priority, request.outputs, request.token, request.then) == (
            3, ("y",), "tag", then,
        )  # fmt: skip
        assert (request.attempts, request.seq, request.measured) == (2, 7, False)
        assert (request.trace, request.counted) == ("t", True)


def test_requests_compare_by_identity_and_take_no_unknown_attribute() -> None:
    first, second = Request("m@1", {}, 1, 0.0, 1.0), Request("m@1", {}, 1, 0.0, 1.0)
    assert first == first and first != second  # eq=False, as the dataclass was
    assert "m@1" in repr(first)
    with pytest.raises(AttributeError):
        first.deadlines = 2.0  # type: ignore[attr-defined]  # a typo is an error (__slots__)


def test_a_prediction_holds_its_model_version_and_outputs() -> None:
    outputs = {"y": np.ones((1, 2))}
    prediction = Prediction("m", 3, outputs)
    assert (prediction.model, prediction.version, prediction.outputs) == ("m", 3, outputs)
    assert "'m'" in repr(prediction) and "['y']" in repr(prediction)
