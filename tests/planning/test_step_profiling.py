"""`headway profile` measures a generative model's steps on a real worker, and `headway plan
--generative` sizes its stage from the file written, with no number typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from headway.cli.main import cli
from tests.streams.models import prefilling

pytestmark = pytest.mark.integration


def test_a_generative_model_is_profiled_per_step_and_its_stage_planned(tmp_path: Path) -> None:
    repository = prefilling(tmp_path / "models", extra="ttft_ms: 2000\ntpot_ms: 200\n")
    stages = tmp_path / "stages"
    profiled = CliRunner().invoke(
        cli,
        ["profile", "-r", str(repository), "--hardware", "cpu1", "--iterations", "6",
         "--warmup", "1", "--rounds", "2", "--stages", str(stages),
         "--state", str(tmp_path / "state.db")],
    )  # fmt: skip
    assert profiled.exit_code == 0, profiled.output
    assert "prefilling on cpu1, sequences 4" in profiled.output  # with its rounds' spread
    stage_file = stages / "prefilling-cpu1.yaml"
    stage = yaml.safe_load(stage_file.read_text())
    steps, first = stage["steps_ms"], stage["first_steps_ms"]
    assert sorted(steps) == sorted(first) == [1, 2, 4]
    # each sequence sleeps PREFILL_S (20 ms) to start: a first step of n takes n times more
    assert all(first[n] > steps[n] + 10 * n for n in steps)
    assert steps[4] > steps[1]  # each sequence in a step costs PER_SEQUENCE_S
    assert stage["max_sequences"] == 4 and stage["parts"] == 400
    assert (stage["ttft_ms"], stage["tpot_ms"]) == (2000.0, 200.0)

    arrivals = tmp_path / "arrivals.json"
    arrivals.write_text(json.dumps(np.arange(0.0, 6.0, 1.0).tolist()))
    out = tmp_path / "sized.yaml"
    planned = CliRunner().invoke(
        cli, ["plan", "--generative", str(stage_file), "--trace", str(arrivals), "-o", str(out)]
    )
    assert planned.exit_code == 0, planned.output
    sized = yaml.safe_load(out.read_text())
    assert sized["replicas"] >= 1 and sized["attained"][sized["replicas"]] >= 0.9
