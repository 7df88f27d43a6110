"""An answer's bytes on the wire (`api.rendering`)."""

from __future__ import annotations

import httptools
import pytest

from headway.api.errors import JSON
from headway.api.rendering import render


class _Answer:
    def __init__(self) -> None:
        self.headers: dict[bytes, bytes] = {}
        self.body = b""
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


@pytest.mark.parametrize("status", [200, 400, 503])
@pytest.mark.parametrize(("keep_alive", "http10"), [(True, False), (False, False), (True, True)])
def test_a_json_answer_renders_as_any_answer_with_those_headers(
    status: int, keep_alive: bool, http10: bool
) -> None:
    """JSON answers (their head kept between answers) are the bytes of the same answer whose
    headers are any other list, and parse as HTTP with their own length each time."""
    for body in (b'{"a":1}', b"", b'{"b":"' + b"x" * 5000 + b'"}'):
        data = render((status, body, JSON), keep_alive, http10)
        assert data == render((status, body, list(JSON)), keep_alive, http10)
        answer = _Answer()
        parser = httptools.HttpResponseParser(answer)
        parser.feed_data(data)
        assert answer.complete and parser.get_status_code() == status
        assert answer.body == body
        assert answer.headers[b"content-type"] == b"application/json"
        assert answer.headers[b"content-length"] == str(len(body)).encode()
        assert (b"connection" in answer.headers) == (not keep_alive or http10)
