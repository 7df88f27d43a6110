"""An infer body's JSON head is parsed once per request: the quick refusal reads it before the
request is routed (`api.refusals`), and the infer route (`api.inference`) reuses that parse."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from headway.api import inference
from headway.api.app import HeadwayApp
from headway.api.refusals import QuickRefusals
from headway.control.controller import Controller
from headway.errors import InvalidInput
from headway.repository import Repository
from headway.testing import FakeEngine

BODY = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}'


def test_the_same_request_body_is_parsed_once_and_another_body_afresh(tmp_path: Path) -> None:
    app = HeadwayApp(Controller(Repository.scan(tmp_path), FakeEngine()))
    head = app.inference.head(BODY, None)
    assert head["inputs"][0]["data"] == [1.0]
    assert app.inference.head(BODY, None) is head  # the route after the quick refusal
    again = bytes(bytearray(BODY))  # equal bytes of another request: its own parse
    assert again is not BODY and app.inference.head(again, None) is not head
    assert app.inference.head(again, None) == head
    binary = BODY + b"\x00\x01"  # a binary body's head: only its first bytes are JSON
    assert app.inference.head(binary, len(BODY)) == head
    with pytest.raises(InvalidInput, match="outside the body"):
        app.inference.head(binary, len(binary) + 1)
    with pytest.raises(InvalidInput, match="not valid JSON"):
        app.inference.head(binary, None)


def test_a_body_the_quick_refusal_read_is_not_parsed_again_by_the_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(
        "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
        "inputs: [{name: x, datatype: FP32, shape: [-1, 1]}]\n"
    )
    body = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1],
                                     "data": [1.0]}], "parameters": {"slo_ms": 1000}})  # fmt: skip
    parses: list[bytes] = []
    parse = inference.oip.infer_head

    def counted(body: bytes, length: int | None = None) -> dict[str, Any]:
        parses.append(body)
        return parse(body, length)

    monkeypatch.setattr(inference.oip, "infer_head", counted)

    async def scenario() -> None:
        app = HeadwayApp(Controller(Repository.scan(tmp_path), FakeEngine()))
        await app.start()
        # read 50 ms after it arrived: the quick refusal reads its parameters, and serves it
        assert QuickRefusals(app).answer(b"/v2/models/m/infer", {}, body, 0.05, True, False) is None
        status, answer, _ = await app.handle("POST", "/v2/models/m/infer", {}, body)
        assert status == 200, answer
        assert parses == []  # the route used the quick refusal's parse
        again = bytes(bytearray(body))  # another request, not looked at before routing
        assert (await app.handle("POST", "/v2/models/m/infer", {}, again))[0] == 200
        assert parses == [again]
        await app.stop()

    asyncio.run(scenario())
