"""The quick refusal reads an infer body's parameters itself, before routing: a body it cannot
read cheaply and surely goes the usual way, which answers it (`api.refusals`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from headway.api.app import HeadwayApp
from headway.api.refusals import QuickRefusals
from headway.control.controller import Controller
from headway.repository import Repository
from headway.testing import FakeEngine

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\n"
)


@pytest.mark.parametrize("parameters", [b"5", b"[1]", b'"slo_ms"', b"true"])
def test_parameters_that_are_not_an_object_go_the_usual_way_and_get_a_400(
    tmp_path: Path, parameters: bytes
) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "model.yaml").write_text(YAML)
    body = b'{"parameters": ' + parameters + b', "inputs": []}'

    async def scenario() -> None:
        app = HeadwayApp(Controller(Repository.scan(tmp_path), FakeEngine()))
        await app.start()
        # waited long enough to be looked at: the quick refusal reads the parameters
        assert QuickRefusals(app).answer(b"/v2/models/m/infer", {}, body, 0.05, True, False) is None
        status, answer, _ = await app.handle("POST", "/v2/models/m/infer", {}, body)
        assert status == 400 and orjson.loads(answer)["error"] == "'parameters' must be an object"
        await app.stop()

    asyncio.run(scenario())
