"""`headway serve` flags and their HEADWAY_ environment variables map onto ServeSettings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from tests.cli.settings import settings_from
from tests.integration import models

from headway.cli import main
from headway.cli.serve import ServeSettings, build_app, worker_env
from headway.planning.envelope import envelope, window_lengths
from headway.planning.plan_file import write_plan
from headway.repository import Repository
from headway.runtime.worker import SPIN_ENV


def test_environment_variables_use_the_headway_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = {
        "HEADWAY_STATE": str(tmp_path / "s.db"),
        "HEADWAY_PORT": "9001",
        "HEADWAY_MEMORY_BUDGET_MB": "512",
        "HEADWAY_SCHEDULER": "clipper",
    }
    settings = settings_from(monkeypatch, ["--repository", str(tmp_path)], env)
    assert settings.state == tmp_path / "s.db"
    assert settings.port == 9001
    assert settings.memory_budget_mb == 512
    assert settings.scheduler == "clipper"


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = settings_from(
        monkeypatch,
        ["--repository", str(tmp_path), "--port", "9002", "--workers", "3"],
        {"HEADWAY_PORT": "9001"},
    )
    assert settings.port == 9002 and settings.workers == 3
    assert settings.state == Path(".headway/state.db")


def test_bad_flags_are_refused_with_a_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main.cli, ["serve", "--repository", str(tmp_path), "--scheduler", "fifo"]
    )
    assert result.exit_code == 2
    assert "'fifo' is not one of 'clipper', 'headway'" in result.output
    missing = CliRunner().invoke(main.cli, ["serve", "--repository", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_busy_polling_reaches_the_frontend_and_the_workers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = settings_from(
        monkeypatch,
        ["--repository", str(tmp_path), "--busy-poll-us", "750"],
        {"HEADWAY_STATE": str(tmp_path / "s.db")},
    )
    assert settings.busy_poll_us == 750
    repository = Repository.scan(tmp_path)
    assert worker_env(settings, repository)[SPIN_ENV] == "750.0"
    quiet = ServeSettings(repository=tmp_path, state=tmp_path / "q.db")
    assert SPIN_ENV not in worker_env(quiet, repository)
    refused = CliRunner().invoke(
        main.cli, ["serve", "--repository", str(tmp_path), "--busy-poll-us", "-1"]
    )
    assert refused.exit_code == 2 and "--busy-poll-us" in refused.output


def test_busy_polling_with_uvicorn_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main.cli,
        ["serve", "--repository", str(tmp_path), "--http", "uvicorn", "--busy-poll-us", "500",
         "--state", str(tmp_path / "s.db")],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "--busy-poll-us needs Headway's own HTTP server (--http native)" in result.output
    assert not (tmp_path / "s.db").exists()  # refused before the store was opened


def test_read_timeouts_and_the_connection_cap_are_flags_and_environment_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    defaults = settings_from(monkeypatch, ["--repository", str(tmp_path)], {})
    assert (defaults.header_timeout, defaults.body_timeout) == (10.0, 60.0)
    assert defaults.max_connections == 4096
    settings = settings_from(
        monkeypatch,
        ["--repository", str(tmp_path), "--header-timeout", "2.5", "--max-connections", "64"],
        {"HEADWAY_BODY_TIMEOUT": "7"},
    )
    assert (settings.header_timeout, settings.body_timeout) == (2.5, 7.0)
    assert settings.max_connections == 64


def test_the_answer_bounds_are_flags_and_environment_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    defaults = settings_from(monkeypatch, ["--repository", str(tmp_path)], {})
    assert (defaults.write_timeout, defaults.max_answer_mb, defaults.max_unread_mb) == (
        60.0, None, None,
    )  # fmt: skip
    state = {"HEADWAY_STATE": str(tmp_path / "s.db")}
    default_app = build_app(replace(defaults, state=tmp_path / "d.db"))
    assert default_app.max_answer_bytes == 4 * 64 * 2**20  # 4x --max-body-mb
    settings = settings_from(
        monkeypatch,
        ["--repository", str(tmp_path), "--write-timeout", "5", "--max-answer-mb", "2"],
        {"HEADWAY_MAX_UNREAD_MB": "3", **state},
    )
    assert (settings.write_timeout, settings.max_answer_mb, settings.max_unread_mb) == (5, 2, 3)
    assert build_app(settings).max_answer_bytes == 2 * 2**20


def test_the_tuners_hold_down_and_trailing_window_are_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    models.digits_logreg(tmp_path / "repo")
    stage = {"model": "digits-logreg", "hardware": "cpu1", "max_batch_size": 1, "replicas": 1}
    stage.update(scale=1.0, throughput_qps=100.0, utilisation=0.5)
    plan = {"app": "only", "slo_ms": 100.0, "feasible": True, "rate_qps": 8.0}
    plan["envelope"] = envelope(np.arange(480) / 8.0, window_lengths(0.1))
    plan["stages"] = {"only": stage}
    write_plan(plan, tmp_path / "plan.yaml")
    args = ["--repository", str(tmp_path / "repo"), "--plan", str(tmp_path / "plan.yaml")]
    args += ["--tune", "--tune-hold-down-s", "90", "--tune-trailing-s", "45"]
    settings = settings_from(monkeypatch, args, {"HEADWAY_STATE": str(tmp_path / "s.db")})
    app = build_app(settings)
    assert app.tuner is not None
    assert (app.tuner.tuner.hold_down, app.tuner.tuner.trailing) == (90.0, 45.0)
    refused = CliRunner().invoke(main.cli, ["serve", *args[:4], "--tune-hold-down-s", "-1"])
    assert refused.exit_code == 2 and "--tune-hold-down-s" in refused.output
