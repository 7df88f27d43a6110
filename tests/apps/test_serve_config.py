"""`headway serve --config`: a bad application config stops the start-up with a clear message."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from headway.cli.main import cli


def _repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "clf" / "1").mkdir(parents=True)
    (root / "clf" / "model.yaml").write_text("framework: sklearn\n")
    return root


def test_a_bad_config_fails_before_any_worker_starts(tmp_path: Path) -> None:
    config = tmp_path / "headway.yaml"
    config.write_text("apps:\n  digits:\n    models: [clf, knn]\n    policy: exp4\n")
    args = ["serve", "-r", str(_repository(tmp_path)), "--state", str(tmp_path / "s.db")]
    result = CliRunner().invoke(cli, [*args, "--config", str(config)])
    assert result.exit_code == 1
    assert "app 'digits': models: 'knn': no such model; the repository has ['clf']" in (
        result.output
    )
    # the same through the environment
    result = CliRunner().invoke(cli, args, env={"HEADWAY_CONFIG": str(config)})
    assert result.exit_code == 1 and "'knn': no such model" in result.output


def test_the_config_file_must_exist(tmp_path: Path) -> None:
    args = ["serve", "-r", str(_repository(tmp_path)), "--config", str(tmp_path / "nope.yaml")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "does not exist" in result.output
