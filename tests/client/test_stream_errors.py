"""An error event that ends a stream reaches the client as the class the server raised: the
server names it by its `reason` (`api.errors.error_json`, OpenAI's `code`), the client reads
it back (`codec.event_of`); a reason it does not know is a plain HeadwayError."""

from __future__ import annotations

import orjson
import pytest

from headway.api.completions import CompletionEvents, parse
from headway.api.errors import error_json
from headway.api.generate import GenerateEvents
from headway.api.inference import InferEvents
from headway.api.oip import InferRequest
from headway.api.streamed import StreamedReply
from headway.client.codec import event_of
from headway.errors import (
    Backlogged,
    DeadlineUnmeetable,
    HeadwayError,
    ModelError,
    SequencesFull,
    WorkerFailed,
    error_for_reason,
)


class _Never:
    def withdraw(self, ticket: object) -> bool:
        return False


def _ended_with(events: object, error: Exception) -> bytes:
    """The last event of a stream that made one part, then failed with `error`."""
    sent: list[bytes] = []
    reply = StreamedReply(_Never(), lambda response: None, events)  # type: ignore[arg-type]
    reply.part({})
    assert reply.stream is not None
    reply.stream.attach(_Sink(sent))
    reply.fail(error)
    return sent[-1]


class _Sink:
    def __init__(self, sent: list[bytes]) -> None:
        self.sent = sent

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def end(self) -> None:
        pass


def _raised(event: bytes) -> HeadwayError:
    (line,) = [line for line in event.decode().splitlines() if line.startswith("data:")]
    with pytest.raises(HeadwayError) as raised:
        event_of(line)
    return raised.value


@pytest.mark.parametrize(
    "events",
    [
        GenerateEvents("spell", 1, "/v2/models/spell/generate_stream"),
        CompletionEvents(parse(b'{"model": "spell", "prompt": "x", "stream": true}', chat=False)),
    ],
    ids=["generate", "openai"],
)
@pytest.mark.parametrize("error", [ModelError("it broke"), WorkerFailed("it died"),
                                   SequencesFull("all taken")])  # fmt: skip
def test_a_stream_error_reaches_the_client_as_its_own_class(
    events: object, error: HeadwayError
) -> None:
    raised = _raised(_ended_with(events, error))
    assert type(raised) is type(error) and error.message in raised.message


def test_the_infer_routes_error_event_keeps_tritons_error_and_adds_the_reason() -> None:
    events = InferEvents("spell", InferRequest({}), limit=1 << 20)
    event = _ended_with(events, WorkerFailed("the worker died"))
    document = orjson.loads(event.removeprefix(b"data: "))
    assert document == {"error": "the worker died", "reason": "worker_failed"}
    assert isinstance(_raised(event), WorkerFailed)


def test_a_bug_inside_a_stream_is_an_internal_error_a_plain_headway_error() -> None:
    events = GenerateEvents("spell", 1, "/v2/models/spell/generate_stream")
    raised = _raised(_ended_with(events, KeyError("x")))
    assert type(raised) is HeadwayError and "internal error: KeyError" in raised.message


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("model_error", ModelError),
        ("worker_failed", WorkerFailed),
        (Backlogged.reason, DeadlineUnmeetable),  # shared with its parent: the parent answers
        ("stream_idle", HeadwayError),
        ("no such reason", HeadwayError),
        (None, HeadwayError),
        (7, HeadwayError),
    ],
)
def test_each_reason_names_one_class(reason: object, kind: type[HeadwayError]) -> None:
    error = error_for_reason(reason, "why")
    assert type(error) is kind and error.message == "why"


def test_an_event_without_a_reason_is_a_plain_headway_error() -> None:
    with pytest.raises(HeadwayError) as raised:
        event_of('data: {"error": "from a server that names no reason"}')
    assert type(raised.value) is HeadwayError
    assert type(_raised(b"data: " + error_json("m", "model_error"))) is ModelError
