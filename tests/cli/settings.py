"""ServeSettings as `headway serve` would build them from flags and environment variables,
without serving (`test_serve_flags`, `test_serve_tls`)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from headway.cli import main
from headway.cli.serve import ServeSettings


def settings_from(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str]
) -> ServeSettings:
    captured: list[ServeSettings] = []
    monkeypatch.setattr(main, "run", captured.append)
    result = CliRunner().invoke(main.cli, ["serve", *args], env=env)
    assert result.exit_code == 0, result.output
    return captured[0]
