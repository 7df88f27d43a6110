"""A deployed flow answers a bad row as `/v2` does, 400 naming the column and the shape, never a
500, whether its first model runs fused with a function (a stage model of its own) or alone;
and a flow that feeds a string column to a numeric model is refused when it is deployed.

The rows go as raw bytes, as any client could send them, while tritonclient's calls beside
them and good rows through the same flows all succeed.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton_http

from headway.launcher import ServerProcess
from tests.integration import models

pytestmark = pytest.mark.integration

CASCADE = """
import numpy as np
from headway.flows import Flow, Model, Table


def top(table: Table) -> list[tuple[int, float]]:
    p = np.stack(table.column("probabilities"))
    return list(zip(p.argmax(axis=1).tolist(), p.max(axis=1).tolist(), strict=True))


flow = Flow("cascade", {"image": np.ndarray})
scored = flow.map(Model("digits-logreg", {"probabilities": np.ndarray}, inputs={"input-0": "image"}))
scored.map(top, names=["label", "confidence"], batching=True)
"""
NAMES = """
import numpy as np
from headway.flows import Flow, Model

flow = Flow("names", {"who": str})
flow.map(Model("digits-logreg", {"probabilities": np.ndarray}, inputs={"input-0": "who"}))
"""
BAD_ROWS = [
    [1.0] * 3,
    [1.0] * 65,
    [[1.0] * 64],  # nested
    ["a"] * 64,  # strings
    [None] * 64,  # nulls
    [[1.0, 2.0], [3.0]],  # ragged
]


@pytest.fixture(scope="module")
def deployed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, np.ndarray]]:
    tmp = tmp_path_factory.mktemp("flow-inputs")
    root = tmp / "repository"
    rows, _ = models.digits_logreg(root)
    (root / "flows").mkdir()
    (root / "flows" / "cascade.py").write_text(CASCADE)
    (root / "flows" / "names.py").write_text(NAMES)
    with ServerProcess(root, state=tmp / "state.db", log=tmp / "server.log") as server:
        for app, fusion in (("fused", True), ("alone", False)):
            body = {"flow": "flows/cascade.py:flow", "fusion": fusion, "slo_ms": 30_000}
            put = httpx.put(f"{server.url}/apps/{app}", json=body, timeout=60)
            assert put.status_code == 201, put.text
        yield server, rows


def _predict(server: ServerProcess, app: str, row: Any) -> tuple[int, dict[str, Any]]:
    """`POST /apps/{app}/predict {"input": row}` as raw bytes."""
    content = orjson.dumps({"input": row})
    request = (
        f"POST /apps/{app}/predict HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
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


def test_a_bad_row_is_a_400_naming_the_column_and_the_shape(
    deployed: tuple[ServerProcess, np.ndarray],
) -> None:
    server, rows = deployed
    triton = triton_http.InferenceServerClient(f"127.0.0.1:{server.port}", network_timeout=5.0)

    def legit() -> None:
        request = triton_http.InferInput("input-0", [1, 64], "FP64")
        request.set_data_from_numpy(rows[:1])
        answer = triton.infer("digits-logreg", [request], timeout=5_000_000)
        assert answer.as_numpy("label") is not None

    for app in ("fused", "alone"):
        for row in BAD_ROWS:
            legit()
            status, answer = _predict(server, app, row)
            assert status == 400, (app, row, answer)
            assert "column 'image'" in answer["error"], answer
            if row in ([1.0] * 3, [1.0] * 65):
                assert f"expected shape [-1, 64], got [1, {len(row)}]" in answer["error"], answer
        for row in (rows[0].tolist(), rows[0].astype(int).tolist()):  # JSON floats, integers
            status, answer = _predict(server, app, row)
            assert status == 200 and not answer["default"], (app, answer)
    legit()


def test_a_string_column_fed_to_a_numeric_model_is_refused_at_deploy(
    deployed: tuple[ServerProcess, np.ndarray],
) -> None:
    server, _ = deployed
    put = httpx.put(f"{server.url}/apps/names", json={"flow": "flows/names.py:flow"}, timeout=60)
    assert put.status_code == 400, put.text
    error = put.json()["error"]
    assert "column 'who' is str" in error and "'digits-logreg'" in error, error
    assert "FP64 of shape [-1, 64]" in error, error
    assert httpx.get(f"{server.url}/apps/names").status_code == 404
