"""An infer path is routed by splitting it the first time and from what that found after."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from headway.api import app as app_module
from headway.api.app import HeadwayApp
from headway.control.controller import Controller
from headway.repository import Repository
from headway.testing import FakeEngine


def _body(value: float) -> bytes:
    return orjson.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [value]}]}
    )


def _repository(root: Path) -> Repository:
    for name in ("a", "b"):
        for version in ("1", "2"):
            (root / name / version).mkdir(parents=True)
        (root / name / "model.yaml").write_text(
            "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
            "inputs: [{name: x, datatype: FP32, shape: [-1, 1]}]\n"
        )
    return Repository.scan(root)


def test_infer_paths_answer_alike_the_first_time_and_after(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = HeadwayApp(Controller(_repository(tmp_path), FakeEngine()))
        await app.start()
        for _ in range(3):  # each path: split once, then known
            for path, model, version in [
                ("/v2/models/a/infer", "a", "2"),
                ("/v2/models/b/infer", "b", "2"),
                ("/v2/models/a/versions/1/infer", "a", "1"),
                ("/v2/models/%62/versions/1/infer", "b", "1"),  # each segment decoded
            ]:
                status, body, _ = await app.handle("POST", path, {}, _body(2.5))
                assert status == 200, body
                answer = orjson.loads(body)
                assert (answer["model_name"], answer["model_version"]) == (model, version)
                assert answer["outputs"][0]["data"] == [2.5]
            for path in ("/v2//models/b/infer", "/v2/models/b/infer/", "/v2/models%2Fa/infer"):
                status, body, _ = await app.handle("POST", path, {}, _body(2.5))
                assert status == 404, body  # an empty segment, an encoded '/': no route
            status, body, _ = await app.handle("GET", "/v2/models/a/infer", {}, b"")
            assert status == 405, body  # a known path with another method is routed as before
            status, body, _ = await app.handle("POST", "/v2/models/c/infer", {}, _body(1.0))
            assert status == 404, body
            status, body, _ = await app.handle("POST", "/v2/models/a/versions/7/infer", {}, b"{")
            assert status == 404, body
        await app.stop()  # a stopped app refuses even the paths it knows
        status, body, _ = await app.handle("POST", "/v2/models/a/infer", {}, _body(1.0))
        assert status == 503 and b"starting" in body

    asyncio.run(scenario())


def test_the_known_infer_paths_are_bounded(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = HeadwayApp(Controller(_repository(tmp_path), FakeEngine()))
        await app.start()
        for n in range(app_module._INFER_TARGETS_KEPT * 2 + 5):  # any path may be an infer path
            await app.handle("POST", f"/v2/models/nobody-{n}/infer", {}, _body(1.0))
            assert len(app._infer_targets) <= app_module._INFER_TARGETS_KEPT
        status, _, _ = await app.handle("POST", "/v2/models/a/infer", {}, _body(1.0))
        assert status == 200
        await app.stop()

    asyncio.run(scenario())
