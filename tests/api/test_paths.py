"""Request paths are split on '/' first, then each segment is percent-decoded (`api.paths`),
the same under every HTTP server: an encoded slash or an empty segment is no separator a
proxy's path rules did not see."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from headway.api.app import HeadwayApp
from headway.api.asgi import AsgiApp
from headway.api.paths import from_decoded, segments
from headway.api.rsgi import GranianServer
from headway.control.controller import Controller
from headway.repository import Repository
from headway.testing import FakeEngine


def test_segments_are_split_then_decoded() -> None:
    assert segments("/") == [] and segments("") == []
    assert segments("/v2/models/m/infer") == ["v2", "models", "m", "infer"]
    assert segments("/v2/models/my%20model") == ["v2", "models", "my model"]
    assert segments("/v2%2Frepository%2Fmodels") == ["v2/repository/models"]
    assert segments("/v2//models/") == ["v2", "", "models", ""]
    assert segments("/a/%2e%2e/b") == ["a", "..", "b"]  # a name like any other: no route
    assert segments("/bad%ff") == ["bad\ufffd"]


def test_a_path_a_server_decoded_is_not_decoded_twice() -> None:
    # granian decodes "/m%2541" to "/m%41": that is the name, not "/mA"
    assert segments(from_decoded("/v2/models/m%41")) == ["v2", "models", "m%41"]
    assert from_decoded("/plain") == "/plain"


def _repository(root: Path) -> Repository:
    (root / "m" / "1").mkdir(parents=True)
    (root / "m" / "model.yaml").write_text(
        "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
        "inputs: [{name: x, datatype: FP32, shape: [-1, 1]}]\n"
    )
    return Repository.scan(root)


def test_an_encoded_slash_or_an_empty_segment_routes_nowhere(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = HeadwayApp(Controller(_repository(tmp_path), FakeEngine()))
        await app.start()
        for path in (
            "/v2%2Frepository%2Fmodels%2Fm%2Funload",
            "/v2/repository%2Fmodels%2Fm/unload",
            "/v2//repository/models/m/unload",
            "//v2/repository/models/m/unload",
            "/v2/repository/models/m/unload/",
            "/v2/repository/models/m%2F/unload",
        ):
            status, body, _ = await app.handle("POST", path, {}, b"")
            assert status == 404, (path, body)
            assert app.controller.model("m").state == "READY"
        status, body, _ = await app.handle("GET", "/v2//health/live", {}, b"")
        assert status == 404 and "empty segment" in orjson.loads(body)["error"]
        status, _, _ = await app.handle("POST", "/v2/repository/models/%6D/unload", {}, b"")
        assert status == 200  # a segment's escapes are decoded: 'm'
        await app.stop()

    asyncio.run(scenario())


def test_asgi_and_rsgi_hand_the_app_the_path_as_sent(tmp_path: Path) -> None:
    """uvicorn decodes `path` but keeps `raw_path`; granian gives a decoded path only: both
    reach the routes as the native server's raw path does."""
    seen: list[str] = []
    routes = HeadwayApp(Controller(_repository(tmp_path), FakeEngine()))

    class Recorder:  # the app as the two adapters use it; records the paths it is handed
        max_body_bytes = routes.max_body_bytes
        check_length = routes.check_length
        read_body = routes.read_body

        async def handle(self, method: str, path: str, *rest: Any) -> Any:
            seen.append(path)
            return 404, b"{}", []

    async def scenario() -> None:
        app: Any = Recorder()

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {"type": "http", "method": "POST", "headers": [], "query_string": b""}
        asgi = AsgiApp(app)
        await asgi.answer({**scope, "path": "/v2/x/y", "raw_path": b"/v2%2Fx/y"}, receive)
        await asgi.answer({**scope, "path": "/v2/a b"}, receive)  # no raw_path: re-escaped
        await asgi.answer({**scope, "path": "/v2/m%41"}, receive)

        async def body() -> bytes:
            return b""

        granian = GranianServer(app, port=1)
        rsgi_scope = SimpleNamespace(
            method="POST", path="/v2/m%41", query_string="", headers={"content-length": "0"}
        )
        await granian.answer(rsgi_scope, body)

    asyncio.run(scenario())
    assert seen == ["/v2%2Fx/y", "/v2/a b", "/v2/m%2541", "/v2/m%2541"]
    assert [segments(path)[-1] for path in seen] == ["y", "a b", "m%41", "m%41"]
