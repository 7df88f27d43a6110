"""The README's first command: `headway demo` trains, serves, drives traffic and reports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
import httpx
import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from headway.cli.demo import ask
from headway.cli.main import cli
from headway.client import Client, Retry
from headway.launcher import ServerProcess
from tests.integration import models
from tests.integration.models import batches_run

pytestmark = pytest.mark.integration


def test_demo_serves_every_framework_and_prints_a_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "demo",
            "--repository",
            str(tmp_path / "demo"),
            "--port",
            "0",
            "--duration",
            "0.5",
            "--concurrency",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    for framework in ("sklearn", "python", "torch", "onnx", "xgboost", "lightgbm"):
        assert framework in result.output
    rows = [line for line in result.output.splitlines() if "│" in line and "0." in line]
    rows = [row for row in rows if "tiny-gpt" not in row]
    assert len(rows) >= 6
    for row in rows:
        cells = [c.strip() for c in row.split("│") if c.strip()]
        accuracy, errors = float(cells[2]), int(cells[-1])
        assert accuracy > 0.8 and errors == 0, row
    # the text generator: trained, served, its streams measured, and what it wrote shown
    [generator] = [line for line in result.output.splitlines() if "│ tiny-gpt" in line]
    cells = [c.strip() for c in generator.split("│") if c.strip()]
    assert float(cells[2].replace(",", "")) > 0 and cells[3] != "-" and int(cells[-1]) == 0
    assert "'Return the" in result.output


# -- the demo's requests on a busy server -------------------------------------------------------
def _rows_body(slo_ms: float | None = None) -> bytes:
    request: dict[str, Any] = {
        "inputs": [{"name": "input-0", "shape": [2, 4], "datatype": "FP32", "data": [0.5] * 8}]
    }
    if slo_ms is not None:
        request["parameters"] = {"slo_ms": slo_ms}
    return orjson.dumps(request)


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One worker shared by a model that sleeps 0.5 s and one that answers at once (150 ms SLO)."""
    root = tmp_path_factory.mktemp("busy-repository")
    models.sleeper(root, "slow", 0.5, "slo_ms: 5000\n")
    models.sleeper(root, "quick", 0.0, "slo_ms: 150\n")
    logs = tmp_path_factory.mktemp("busy")
    with ServerProcess(root, state=logs / "state.db", workers=1, log=logs / "server.log") as srv:
        yield srv


def test_the_demo_retries_a_refusal_and_says_why(busy_server: ServerProcess) -> None:
    url = busy_server.url
    rows = {"input-0": np.full((2, 4), 0.5, np.float32)}
    reports: list[str] = []
    with Client(url, on_retry=reports.append) as client, ThreadPoolExecutor(1) as pool:
        ask(client, "quick", rows)  # measured: the scheduler knows it is quick
        reports.clear()
        long_run = pool.submit(httpx.post, f"{url}/v2/models/slow/infer", content=_rows_body())
        time.sleep(0.15)  # the worker is busy with `slow` for ~0.35 s more
        answer = ask(client, "quick", rows)
        assert long_run.result().status_code == 200
    np.testing.assert_array_equal(answer["output-0"], [[2.0], [2.0]])
    # refused at arrival (its worker busy) or dropped from the queue: said, then retried
    assert reports and all(r.startswith("503 model 'quick@1': ") for r in reports), reports


def test_the_demo_gives_up_with_the_servers_reason(busy_server: ServerProcess) -> None:
    rows = {"input-0": np.full((2, 4), 0.5, np.float32)}
    with (
        Client(busy_server.url, retry=Retry(backoff=0.01)) as client,
        pytest.raises(click.ClickException) as refused,
    ):
        ask(client, "slow", rows, parameters={"slo_ms": 10})
    message = refused.value.format_message()
    assert message.startswith(
        "POST /v2/models/slow/infer after 6 tries: model 'slow@1': deadline cannot be met"
    )


def test_a_batch_larger_than_any_measured_is_served_once_measured(
    busy_server: ServerProcess,
) -> None:
    """The issue's demo failure: measured at batch 1 only, 50 rows of a model whose cost is
    per call (0.5 s) were estimated per row (25 s) and refused for ever; the sweep at load and
    the probe after a doubtful refusal measure them, and a retry is served."""
    url = busy_server.url
    while batches_run(url, "slow") < 3:  # the warm-up runs at batch 1 measured it
        time.sleep(0.1)
    rows = {"input-0": np.full((50, 4), 0.5, np.float32)}
    with Client(url, retry=Retry(attempts=7)) as client:
        answer = ask(client, "slow", rows)
    assert answer["output-0"].shape == (50, 1)
