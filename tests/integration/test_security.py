"""Safe to expose: the admin token, what a model folder may reach, and strict readiness.

One live server, started with `HEADWAY_ADMIN_TOKEN`, over a repository that holds a good model,
one whose load fails, and three that try to reach outside their folders: an absolute
entrypoint, an entrypoint through `..`, and a model folder that is a link out of the
repository. The code outside writes a marker file when imported, so the test sees whether it
ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.oip_client import infer_json

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token-for-tests"
ESCAPES = ("escape-absolute", "escape-dotdot", "escape-linked")


def _outside_code(folder: Path, marker: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    code = folder / "evil.py"
    code.write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        + models.PYTHON_MODELS
    )
    return code


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("security")
    root, outside, marker = tmp / "repository", tmp / "outside", tmp / "ran.txt"
    root.mkdir()
    code = _outside_code(outside, marker)
    models.python_model(root, "doubler", "Doubler")
    models.python_model(root, "broken", "Broken")
    inputs = "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n"
    for name, entry in (
        ("escape-absolute", str(code)),
        ("escape-dotdot", "../../../outside/evil.py"),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "model.yaml").write_text(
            f"framework: python\nentrypoint: {entry}:Doubler\n{inputs}"
        )
    models.python_model(outside, "linked-target", "Doubler")
    (outside / "linked-target" / "1" / "models.py").write_text(code.read_text())
    (root / "escape-linked").symlink_to(outside / "linked-target", target_is_directory=True)
    server = ServerProcess(
        root, state=tmp / "state.db", log=tmp / "server.log", env={"HEADWAY_ADMIN_TOKEN": TOKEN}
    )
    with server:
        yield server, marker


def _auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_readiness_names_the_models_that_do_not_serve(exposed: tuple[ServerProcess, Path]) -> None:
    server, _ = exposed
    ready = httpx.get(f"{server.url}/v2/health/ready")
    assert ready.status_code == 503
    body = ready.json()
    assert body["ready"] is False and body["starting"] is False
    assert sorted(body["models"]) == sorted(["broken", *ESCAPES])
    assert "weights file is corrupt" in body["models"]["broken"]
    assert "broken" in body["error"] and "escape-linked" in body["error"]
    assert httpx.get(f"{server.url}/v2/health/live").status_code == 200
    assert httpx.get(f"{server.url}/v2/models/doubler/ready").status_code == 200


def test_a_model_may_not_reach_outside_its_folder(exposed: tuple[ServerProcess, Path]) -> None:
    server, marker = exposed
    reasons = httpx.get(f"{server.url}/v2/health/ready").json()["models"]
    assert "absolute path" in reasons["escape-absolute"]
    assert "outside" in reasons["escape-dotdot"] and "outside" in reasons["escape-linked"]
    rows = np.ones((1, 4), np.float32)
    for name in ESCAPES:
        answer = infer_json(server.url, name, rows)
        assert answer.status_code in (404, 503), answer.text
        assert "outside" in answer.json()["error"] or "absolute" in answer.json()["error"]
    assert not marker.exists(), "code outside the model's folder was imported"
    np.testing.assert_array_equal(
        infer_json(server.url, "doubler", rows).json()["outputs"][0]["data"], [2.0] * 4
    )


ADMIN_CALLS = [
    ("POST", "/v2/repository/models/doubler/unload", None),
    ("POST", "/v2/repository/models/doubler/load", None),
    ("PUT", "/apps/calc", {"models": ["doubler"], "task": "regression"}),
    ("POST", "/apps/calc/feedback", {"input": [1, 2, 3, 4], "label": 3.0}),
    ("POST", "/apps/calc/models", {"model": "doubler"}),
    ("POST", "/apps/calc/active", {"model": "doubler"}),
    ("DELETE", "/apps/calc", None),
]


def test_admin_routes_need_the_token(exposed: tuple[ServerProcess, Path]) -> None:
    server, _ = exposed
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for method, path, body in ADMIN_CALLS:
            for headers, error in (({}, None), (_auth("wrong"), "invalid_token")):
                refused = client.request(method, path, json=body, headers=headers)
                assert refused.status_code == 401, (method, path, refused.text)
                challenge = refused.headers["www-authenticate"]
                assert challenge.startswith("Bearer") and (error is None or error in challenge)
                assert "token" in refused.json()["error"]
        # Nothing changed: the model still serves, the app was never created.
        assert client.get("/v2/models/doubler/ready").status_code == 200
        assert client.get("/apps/calc").status_code == 404
        # With the token each route does its work.
        for method, path, body in ADMIN_CALLS:
            done = client.request(method, path, json=body, headers=_auth())
            assert done.status_code not in (401, 500), (method, path, done.text)
        assert client.get("/apps/calc").status_code == 404  # deleted, with the token
        # Reading and predicting stay open.
        assert client.get("/v2/models/doubler").status_code == 200
        assert client.post("/v2/repository/index").status_code == 200
        rows = np.ones((1, 4), np.float32)
        assert infer_json(server.url, "doubler", rows).status_code == 200
