"""An error answer (not a stream) names its error's `reason` beside the protocol's `error`
(`api.errors.problem`), and the client raises the class it names (`codec.error_for`), as it
does for a stream's last event; a reason it does not know, or none, falls back to the status."""

from __future__ import annotations

import orjson
import pytest

from headway.api.errors import error_response, failure, problem
from headway.client.codec import error_for
from headway.errors import (
    Backlogged,
    ColdStartTooSlow,
    DeadlineUnmeetable,
    HeadwayError,
    InvalidInput,
    ModelError,
    ModelNotFound,
    ModelNotReady,
    Overloaded,
    PartTargetUnmeetable,
    PayloadTooLarge,
    SequencesFull,
    Shed,
    Unauthorized,
    Unavailable,
    WorkerFailed,
)

NAMED = [InvalidInput, PayloadTooLarge, ModelNotFound, Unauthorized, Unavailable, ModelNotReady,
         WorkerFailed, DeadlineUnmeetable, ColdStartTooSlow, SequencesFull, PartTargetUnmeetable,
         Shed, Overloaded, ModelError]  # fmt: skip


@pytest.mark.parametrize("kind", NAMED, ids=lambda kind: kind.__name__)
def test_an_error_answer_names_its_reason_and_the_client_raises_its_class(
    kind: type[HeadwayError],
) -> None:
    status, body, _ = error_response(kind("why"))
    assert orjson.loads(body) == {"error": "why", "reason": kind.reason}
    raised = error_for(status, body)
    assert type(raised) is kind and raised.message == "why"


def test_a_reason_shared_with_its_parent_is_the_parents_class() -> None:
    status, body, _ = error_response(Backlogged("behind"))
    assert orjson.loads(body)["reason"] == "deadline" and status == 503
    assert type(error_for(status, body)) is DeadlineUnmeetable


def test_a_bug_is_answered_500_with_the_internal_reason() -> None:
    status, body, _ = failure(KeyError("x"), "POST", "/v2/models/m/infer")
    assert status == 500 and orjson.loads(body)["reason"] == "internal"
    assert type(error_for(status, body)) is ModelError  # a reason it does not know: the status


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (503, problem(503, "waited", "late")[1], Unavailable),  # a quick refusal's finer reason
        (503, b'{"error": "from an older server"}', Unavailable),
        (429, b'{"error": "full", "reason": "error"}', Overloaded),  # the root's: the status
        (404, b'{"error": "x", "reason": 7}', ModelNotFound),
        (400, b"[1, 2]", InvalidInput),
        (418, b'{"error": "teapot", "reason": "not_found"}', ModelNotFound),
        (418, b'{"error": "teapot"}', HeadwayError),
    ],
)
def test_without_a_known_reason_the_status_names_the_class(
    status: int, body: bytes, kind: type[HeadwayError]
) -> None:
    assert type(error_for(status, body)) is kind


def test_an_error_without_a_reason_keeps_the_protocols_shape() -> None:
    assert orjson.loads(problem(404, "no route GET /x")[1]) == {"error": "no route GET /x"}
