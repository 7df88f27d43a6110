"""The seam's records: `InferenceRequest` (the caller's, read-only), `Job` (the scheduler's,
one per admitted request or measuring run) and `Prediction`. Plain classes with hand-written
`__init__`s (one of each is made per request, and a dataclass's generated `__init__` runs
interpreted even where its module is compiled)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from headway.control.jobs import Job
from headway.control.request import (
    DEFAULT_PRIORITY,
    FutureReceiver,
    InferenceRequest,
    Prediction,
    priority_level,
)
from headway.errors import InvalidInput
from tests.control.helpers import Tag


def test_a_request_names_its_model_and_leaves_the_rest_to_the_controller() -> None:
    request = InferenceRequest("m")
    assert (request.model, request.version, request.timeout, request.priority) == (
        "m", None, None, None,
    )  # fmt: skip
    assert (request.arrival, request.inputs, request.outputs, request.trace) == (
        None, None, None, None,
    )  # fmt: skip


def test_a_request_not_yet_decoded_is_decoded_into_a_new_one() -> None:
    unread = InferenceRequest("m", version="2", timeout=0.5, priority=3, arrival=7.0)
    inputs = {"x": np.zeros((1, 2))}
    decoded = unread.decoded(inputs, ["y"], trace="t")
    assert unread.inputs is None and decoded.inputs is inputs
    assert (decoded.model, decoded.version, decoded.timeout, decoded.priority) == ("m", "2", 0.5, 3)
    assert (decoded.arrival, decoded.outputs, decoded.trace) == (7.0, ["y"], "t")
    assert "x" in repr(decoded) and "'m'" in repr(decoded)
    with pytest.raises(AttributeError):
        decoded.timeouts = 2.0  # type: ignore[attr-defined]  # a typo is an error (__slots__)


def test_triton_priorities_become_sort_levels() -> None:
    assert priority_level(None) == priority_level(0) == priority_level(-3) == DEFAULT_PRIORITY
    assert priority_level(1) == 1


def test_a_job_made_with_the_five_required_arguments_has_the_former_defaults() -> None:
    inputs = {"x": np.zeros((2, 3))}
    job = Job("m@1", inputs, 2, 1.0, 3.5)
    assert (job.model, job.inputs, job.rows) == ("m@1", inputs, 2)
    assert (job.arrival, job.deadline) == (1.0, 3.5)
    assert job.priority == DEFAULT_PRIORITY
    assert job.outputs is None and job.receiver is None
    assert (job.attempts, job.seq) == (0, 0)
    assert job.measured is True and job.counted is False and job.trace is None


def test_every_field_of_a_job_can_be_given_by_position_or_by_name() -> None:
    tag = Tag("tag")
    by_position = Job("m@1", {}, 1, 0.0, 1.0, 3, ("y",), tag, 2, 7, False, "t", True)
    by_name = Job(
        "m@1", {}, 1, 0.0, 1.0, priority=3, outputs=("y",), receiver=tag,
        attempts=2, seq=7, measured=False, trace="t", counted=True,
    )  # fmt: skip
    for job in (by_position, by_name):
        assert (job.priority, job.outputs, job.receiver) == (3, ("y",), tag)
        assert (job.attempts, job.seq, job.measured) == (2, 7, False)
        assert (job.trace, job.counted) == ("t", True)


def test_jobs_compare_by_identity_and_take_no_unknown_attribute() -> None:
    first, second = Job("m@1", {}, 1, 0.0, 1.0), Job("m@1", {}, 1, 0.0, 1.0)
    assert first == first and first != second
    assert "m@1" in repr(first)
    with pytest.raises(AttributeError):
        first.deadlines = 2.0  # type: ignore[attr-defined]  # a typo is an error (__slots__)


def test_a_prediction_holds_its_model_version_and_outputs() -> None:
    outputs = {"y": np.ones((1, 2))}
    prediction = Prediction("m", 3, outputs)
    assert (prediction.model, prediction.version, prediction.outputs) == ("m", 3, outputs)
    assert "'m'" in repr(prediction) and "['y']" in repr(prediction)


def test_a_future_receiver_settles_its_future_once_and_then_says_so() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        settled: list[asyncio.Future[Prediction]] = []
        answered: asyncio.Future[Prediction] = loop.create_future()
        receiver = FutureReceiver(answered, settled.append)
        prediction = Prediction("m", 1, {})
        receiver.done(prediction)
        receiver.fail(InvalidInput("too late: answered already"))
        assert answered.result() is prediction and settled == [answered]
        failed: asyncio.Future[Prediction] = loop.create_future()
        FutureReceiver(failed).fail(InvalidInput("no"))
        with pytest.raises(InvalidInput):
            failed.result()
        gone: asyncio.Future[Prediction] = loop.create_future()
        gone.cancel()  # its awaiter gave up: nothing comes to it, nothing is said
        FutureReceiver(gone, settled.append).done(prediction)
        assert settled == [answered]
        with pytest.raises(NotImplementedError):
            receiver.part({})

    asyncio.run(scenario())
