"""A flow names Python code the server imports: through the admin API (no token set, a laptop's
default) only a file of the model repository can be named, and a flow app stored by an older
server that names a file outside is not served again. The file outside writes a marker when
imported, so the test sees whether it ran; tritonclient's calls beside it all succeed."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton_http

from headway.launcher import ServerProcess
from headway.store import Store
from headway.store.apps import AppStore
from tests.integration import models

pytestmark = pytest.mark.integration

FLOW = """
from pathlib import Path
import numpy as np
from headway.flows import Flow, Model

Path({marker!r}).write_text("imported")


def single(x: np.ndarray) -> np.ndarray:  # JSON numbers arrive as FP64; the model takes FP32
    return np.asarray(x, np.float32)


flow = Flow("doubled", {{"x": np.ndarray}})
flow.map(single, col="x").map(Model("doubler", {{"output-0": np.ndarray}}, inputs={{"input-0": "x"}}))
"""


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path, Path]]:
    tmp = tmp_path_factory.mktemp("flow-sources")
    root, outside, marker = tmp / "repository", tmp / "outside", tmp / "imported.txt"
    models.python_model(root, "doubler", "Doubler")
    (root / "flows").mkdir()
    outside.mkdir()
    (root / "flows" / "doubled.py").write_text(FLOW.format(marker=str(tmp / "inside.txt")))
    evil = outside / "evil.py"
    evil.write_text(FLOW.format(marker=str(marker)))
    # what a server before the fix kept of `PUT /apps/stored {"flow": ".../evil.py:flow"}`
    store = Store(tmp / "state.db")
    AppStore(store).save_app("stored", {"flow": f"{evil}:flow", "slo_ms": 1000.0})
    store.close()
    with ServerProcess(root, state=tmp / "state.db", log=tmp / "server.log") as server:
        yield server, evil, marker


def _put(server: ServerProcess, app: str, body: dict[str, str]) -> tuple[int, dict[str, str]]:
    """`PUT /apps/{app}` as raw bytes, as curl sends it."""
    content = orjson.dumps(body)
    request = (
        f"PUT /apps/{app} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(content)}\r\nConnection: close\r\n\r\n"
    ).encode() + content
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(payload)


def test_a_flow_file_outside_the_repository_is_never_imported(
    laptop: tuple[ServerProcess, Path, Path],
) -> None:
    server, evil, marker = laptop
    root = evil.parent.parent / "repository"
    triton = triton_http.InferenceServerClient(f"127.0.0.1:{server.port}", network_timeout=5.0)
    rows = np.ones((1, 4), np.float32)

    def legit() -> None:
        request = triton_http.InferInput("input-0", [1, 4], "FP32")
        request.set_data_from_numpy(rows)
        answer = triton.infer("doubler", [request], timeout=5_000_000)
        np.testing.assert_array_equal(answer.as_numpy("output-0"), rows * 2)

    for spec in (
        f"{evil}:flow",
        "../outside/evil.py:flow",
        f"{evil.parent}/../outside/evil.py:flow",
    ):
        legit()
        status, answer = _put(server, "pwn", {"flow": spec})
        assert status == 400, answer
        error = answer["error"]  # the file as resolved, and the folder it must lie in
        assert f"resolves to {evil.resolve()}, outside {root.resolve()}" in error, error
    legit()
    assert not marker.exists(), "a flow file outside the repository was imported"
    assert httpx.get(f"{server.url}/apps/pwn").status_code == 404
    # the app an older server stored with that file is not served either
    assert httpx.get(f"{server.url}/apps/stored").status_code == 404
    # a flow file of the repository deploys, named relative to it
    status, answer = _put(server, "doubled", {"flow": "flows/doubled.py:flow"})
    assert status == 201, answer
    done = httpx.post(f"{server.url}/apps/doubled/predict", json={"input": [1.0, 2.0, 3.0, 4.0]})
    assert done.status_code == 200, done.text
    assert done.json()["output"][0]["output-0"] == [2.0, 4.0, 6.0, 8.0]
