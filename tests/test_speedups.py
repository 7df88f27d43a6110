"""The optional compiled request path (`headway.speedups`): when a build is used, and that a
compiled server answers exactly as the pure one does."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from headway.compiled import ENVIRONMENT, GROUP, MANIFEST, PureSources, choose, source_root
from headway.launcher import ServerProcess
from tests.integration import models


@pytest.fixture
def meta_path() -> Iterator[None]:
    """`sys.meta_path` as it was, whatever `choose` put on it."""
    saved = list(sys.meta_path)
    yield
    sys.meta_path[:] = saved


def tree(root: Path, source: str) -> Path:
    """A package with one module `headway_probe.m`, built as far as the manifest goes."""
    (root / "headway").mkdir()
    (root / "headway_probe").mkdir()
    (root / "headway_probe" / "m.py").write_text(source)
    digest = hashlib.sha256(source.encode()).hexdigest()
    (root / "headway" / MANIFEST).write_text(json.dumps({"headway_probe.m": digest}))
    return root


def pure_finders(root: Path) -> list[PureSources]:
    """The finders `choose(root)` put first on the import path."""
    return [f for f in sys.meta_path if isinstance(f, PureSources) and f.root == root]


def test_without_a_build_nothing_changes(tmp_path: Path, meta_path: None) -> None:
    assert choose(tmp_path) is False
    assert pure_finders(tmp_path) == []


def test_a_fresh_build_is_used_unless_switched_off(
    tmp_path: Path, meta_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path, "X = 1\n")
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    assert choose(root) is True
    assert pure_finders(tmp_path) == []
    monkeypatch.setenv(ENVIRONMENT, "0")
    assert choose(root) is False
    [finder] = pure_finders(tmp_path)
    spec = finder.find_spec("headway_probe.m")
    assert spec is not None and spec.origin == str(root / "headway_probe" / "m.py")
    assert finder.find_spec("headway_probe.other") is None


def test_a_source_changed_since_the_build_runs_pure_with_a_warning(
    tmp_path: Path, meta_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path, "X = 1\n")
    (root / "headway_probe" / "m.py").write_text("X = 2\n")
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    with pytest.warns(RuntimeWarning, match=r"older than headway_probe\.m"):
        assert choose(root) is False
    [finder] = pure_finders(tmp_path)
    assert finder.modules == {"headway_probe.m"}


def test_a_stale_build_switched_off_runs_pure_without_a_word(
    tmp_path: Path, meta_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the test suite runs where a developer's build lies: the suite's warnings are errors."""
    root = tree(tmp_path, "X = 1\n")
    (root / "headway_probe" / "m.py").write_text("X = 2\n")
    monkeypatch.setenv(ENVIRONMENT, "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose(root) is False
    assert len(pure_finders(tmp_path)) == 1


# -- a compiled server against the pure one -------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This tree's package copied and compiled (minutes of CPU; skipped without a compiler)."""
    pytest.importorskip("mypyc", reason="mypy (the speedups extra) is not installed")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the speedups with")
    from headway.speedups import build

    root = tmp_path_factory.mktemp("speedups")
    ignore = shutil.ignore_patterns("__pycache__", "*.so", MANIFEST)
    shutil.copytree(source_root() / "headway", root / "headway", ignore=ignore)
    build(root)
    return root


BURST = 32  # requests sent 16 at a time at the end of `exchanges`


def body(rows: np.ndarray, datatype: str = "FP64", **extra: object) -> bytes:
    tensor = {"name": "input-0", "shape": list(rows.shape), "datatype": datatype,
              "data": rows.ravel().tolist()}  # fmt: skip
    return orjson.dumps({"inputs": [tensor], **extra})


def exchanges(url: str, rows: np.ndarray) -> list[tuple[int, str, bytes]]:
    """Each request's status, content type and body: answers, refusals and errors."""
    infer = "/v2/models/digits-logreg/infer"
    posts = [
        (infer, body(rows[:3])),
        (infer, body(rows[:1], outputs=[{"name": "probabilities"}])),
        (infer, body(rows[3:5], "FP32", id="q-7", outputs=[{"name": "label"}])),
        (infer, body(rows[:2], outputs=[{"name": "nothing"}])),
        (infer, body(rows[:1, :60])),
        (infer, body(rows[:1], "FP17")),
        (infer, b'{"inputs": [{"name": "input-0", "shape": [1, 64]'),
        (infer, b'{"outputs": []}'),
        ("/v2/models/no-such-model/infer", body(rows[:1])),
        ("/v2/models/iris-forest/infer", body(rows[:2, :4])),
    ]
    gets = ["/v2/models/digits-logreg", "/v2/models/digits-logreg/ready", "/v2/health/ready",
            "/v2/models/no-such-model"]  # fmt: skip
    seen: list[tuple[int, str, bytes]] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for path, payload in posts:
            r = client.post(path, content=payload, headers={"content-type": "application/json"})
            seen.append((r.status_code, r.headers.get("content-type", ""), r.content))
        for path in gets:
            r = client.get(path)
            seen.append((r.status_code, r.headers.get("content-type", ""), r.content))

        def one(i: int) -> tuple[int, str, bytes]:  # a burst, so that requests share batches
            r = client.post(infer, content=body(rows[i : i + 1]))
            return r.status_code, r.headers.get("content-type", ""), r.content

        with ThreadPoolExecutor(16) as pool:
            seen.extend(pool.map(one, range(BURST)))
    return seen


@pytest.mark.integration
def test_the_compiled_server_answers_exactly_as_the_pure_one(built: Path, tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    rows, expected = models.digits_logreg(repository)
    models.iris_forest(repository)
    answers, loaded = {}, {}
    for speedups in ("0", "1"):
        env = {"PYTHONPATH": str(built), ENVIRONMENT: speedups}
        state = tmp_path / f"state-{speedups}.db"
        with ServerProcess(repository, state=state, grpc_port=0, env=env) as server:
            assert server.process is not None
            answers[speedups] = exchanges(server.url, rows)
            maps = Path(f"/proc/{server.process.pid}/maps").read_text()
        loaded[speedups] = f"/{GROUP}__mypyc." in maps  # all the compiled modules' code
    assert loaded == {"0": False, "1": True}
    # one at a time, each request is a batch of its own: the same bytes
    assert answers["1"][:-BURST] == answers["0"][:-BURST]
    # in the burst, batches form as requests meet: a row's floats may differ in the last bits
    # with the batch it was computed in (BLAS), on either build
    for (status_1, type_1, compiled), (status_0, type_0, pure) in zip(
        answers["1"][-BURST:], answers["0"][-BURST:], strict=True
    ):
        assert (status_1, type_1) == (status_0, type_0) == (200, "application/json")
        got, want = orjson.loads(compiled), orjson.loads(pure)
        for output, reference in zip(got.pop("outputs"), want.pop("outputs"), strict=True):
            np.testing.assert_allclose(output.pop("data"), reference.pop("data"), rtol=1e-12)
            assert output == reference
        assert got == want
    statuses = [status for status, _, _ in answers["0"]]
    assert statuses[:10] == [200, 200, 200, 400, 400, 400, 400, 400, 404, 200]
    first = orjson.loads(answers["0"][0][2])
    outputs = {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in first["outputs"]}
    np.testing.assert_allclose(outputs["probabilities"], expected["probabilities"][:3])


#: A late infer request read by a connection in a process of its own, on `FakeEngine` workers:
#: the quick refusal's answer and counts, and whether its modules ran compiled.
REFUSAL = """
import asyncio, sys, time
from pathlib import Path

import orjson

from headway.api.app import HeadwayApp
from headway.api.connection import HttpConnection
from headway.api.http import HttpServer
from headway.control.admission import unread
from headway.control.controller import Controller
from headway.repository import Repository
from headway.testing import FakeEngine


class Transport:
    data = b""

    def write(self, data): self.data += data
    def get_extra_info(self, name): return None
    def is_closing(self): return False


async def main(folder):
    (folder / "m" / "1").mkdir(parents=True)
    (folder / "m" / "model.yaml").write_text(
        "framework: python\\nentrypoint: m.py:M\\nmax_batch_size: 8\\n"
        "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\\n")
    app = HeadwayApp(Controller(Repository.scan(folder), FakeEngine()))
    await app.start()
    server = HttpServer(app)
    server.loop = asyncio.get_running_loop()
    connection = HttpConnection(server)
    transport = Transport()
    connection.connection_made(transport)
    body = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
                                     "data": [1, 2]}], "parameters": {"slo_ms": 50}})
    head = b"POST /v2/models/m/infer HTTP/1.1\\r\\nHost: h\\r\\nContent-Length: %d\\r\\n\\r\\n"
    server.turn_open, server.turn_floor = True, time.monotonic() - 1.0  # read a second late
    for _ in range(3):
        connection.data_received(head % len(body) + body)
    errors = dict(app.controller.model_statistics("m").counts.errors)
    await app.stop()
    print(orjson.dumps({"written": transport.data.decode(), "errors": errors,
                        "compiled": not unread.__file__.endswith(".py")}).decode())


asyncio.run(main(Path(sys.argv[1])))
"""


@pytest.mark.integration
def test_a_compiled_frontend_refuses_unread_exactly_as_the_pure_one(
    built: Path, tmp_path: Path
) -> None:
    """The quick refusal's modules are compiled too: the same 503s, counted the same way."""
    seen = {}
    for speedups in ("0", "1"):
        done = subprocess.run(
            [sys.executable, "-c", REFUSAL, str(tmp_path / speedups)],
            env={**os.environ, "PYTHONPATH": str(built), ENVIRONMENT: speedups},
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        seen[speedups] = orjson.loads(done.stdout.splitlines()[-1])
    assert [seen[s].pop("compiled") for s in ("0", "1")] == [False, True]
    assert seen["1"] == seen["0"]
    assert seen["0"]["errors"] == {"deadline": 3}
    assert seen["0"]["written"].count("HTTP/1.1 503 Service Unavailable") == 3
    assert "waited too long to be read" in seen["0"]["written"]
