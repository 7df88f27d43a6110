"""The README's first command: `headway demo` trains, serves, drives traffic and reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from headway.cli.main import cli

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
    assert len(rows) >= 6
    for row in rows:
        cells = [c.strip() for c in row.split("│") if c.strip()]
        accuracy, errors = float(cells[2]), int(cells[-1])
        assert accuracy > 0.8 and errors == 0, row
