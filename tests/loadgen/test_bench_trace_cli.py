"""`headway bench --trace FILE` replays a multi-model trace against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.integration import models

from headway.cli.main import cli
from headway.launcher import ServerProcess
from headway.traces import TraceSpec, generate, write


@pytest.mark.integration
def test_bench_replays_a_trace_and_counts_every_request(tmp_path: Path) -> None:
    spec = TraceSpec(models=3, duration=2.0, rate=30, prefix="tiny", sigma=0.5, seed=1)
    trace = generate(spec)
    path = tmp_path / "trace.csv"
    write(trace, path)
    root = tmp_path / "repo"
    for index in range(spec.models):
        models.python_model(root, spec.model_name(index), "Doubler")
    with ServerProcess(root, state=tmp_path / "s.db") as server:
        result = CliRunner().invoke(
            cli, ["bench", "--url", server.url, "--trace", str(path), "--json", "--no-progress"]
        )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output[result.output.index("{") :])
    assert figures["requests"] == len(trace)
    assert figures["ok"] == len(trace)


def test_trace_and_single_model_options_do_not_mix(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write(generate(TraceSpec(models=2, duration=1, rate=5)), path)
    mixed = CliRunner().invoke(cli, ["bench", "--trace", str(path), "--model", "m"])
    assert mixed.exit_code == 2 and "--trace replays its own models" in mixed.output
    neither = CliRunner().invoke(cli, ["bench"])
    assert neither.exit_code == 2 and "--model" in neither.output
