"""An infer body's JSON head is parsed once per request: the quick refusal reads it before the
request is routed (`api.refusals`), and the infer route reuses that parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from headway.api.app import HeadwayApp
from headway.control.controller import Controller
from headway.errors import InvalidInput
from headway.repository import Repository
from headway.testing import FakeEngine

BODY = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}'


def test_the_same_request_body_is_parsed_once_and_another_body_afresh(tmp_path: Path) -> None:
    app = HeadwayApp(Controller(Repository.scan(tmp_path), FakeEngine()))
    head = app.infer_head(BODY, None)
    assert head["inputs"][0]["data"] == [1.0]
    assert app.infer_head(BODY, None) is head  # the route after the quick refusal
    again = bytes(bytearray(BODY))  # equal bytes of another request: its own parse
    assert again is not BODY and app.infer_head(again, None) is not head
    assert app.infer_head(again, None) == head
    binary = BODY + b"\x00\x01"  # a binary body's head: only its first bytes are JSON
    assert app.infer_head(binary, len(BODY)) == head
    with pytest.raises(InvalidInput, match="outside the body"):
        app.infer_head(binary, len(binary) + 1)
    with pytest.raises(InvalidInput, match="not valid JSON"):
        app.infer_head(binary, None)
