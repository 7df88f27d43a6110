"""Sizing a generative stage through the simulated server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from headway.cli.main import cli
from headway.planning.generative import size_generative_stage
from headway.repository import Generation
from headway.sim import ModelProfile

#: 8 sequences per worker, a step of 10 ms alone and 24 ms full.
PROFILE = ModelProfile(
    {1: 0.010, 8: 0.024}, load_seconds=0.05, size_mb=10, generative=Generation(8, 64)
)


def trace(rate: float, seconds: float = 10.0) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(1 / rate, int(rate * seconds)))
    return times, [48] * len(times)  # 48 parts each: about a second at a full step


def test_more_traffic_needs_more_replicas_and_each_count_is_reported() -> None:
    light = size_generative_stage(PROFILE, *trace(4.0), ttft=0.5, tpot=0.05)
    heavy = size_generative_stage(PROFILE, *trace(16.0), ttft=0.5, tpot=0.05)
    assert light.replicas == 1
    assert heavy.replicas is not None and heavy.replicas > light.replicas
    assert heavy.attained[heavy.replicas] >= 0.9 > heavy.attained[heavy.replicas - 1]


def test_a_target_no_count_can_meet_is_infeasible() -> None:
    # a part every 5 ms, below a step alone (10 ms): every request is refused
    size = size_generative_stage(PROFILE, *trace(4.0), ttft=0.5, tpot=0.005, most=2)
    assert size.replicas is None and size.attained == {1: 0.0, 2: 0.0}


def test_only_a_generative_profile_is_sized() -> None:
    with pytest.raises(ValueError, match="not of a generative model"):
        size_generative_stage(ModelProfile({1: 0.01}, 0.05, 10), *trace(1.0), ttft=1, tpot=1)


STAGE = """
steps_ms: {1: 10, 8: 24}
max_sequences: 8
parts: {8: 0.5, 48: 0.5}
ttft_ms: 500
tpot_ms: 50
most: 4
"""


def test_headway_plan_sizes_a_generative_stage_from_its_yaml(tmp_path: Path) -> None:
    stage = tmp_path / "stage.yaml"
    stage.write_text(STAGE)
    arrivals = tmp_path / "arrivals.json"
    arrivals.write_text(json.dumps(trace(16.0)[0].tolist()))
    out = tmp_path / "sized.yaml"
    args = ["plan", "--generative", str(stage), "--trace", str(arrivals), "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    sized = yaml.safe_load(out.read_text())
    assert sized["replicas"] >= 2 and sized["attained"][sized["replicas"]] >= 0.9
    assert f"{sized['replicas']} replica(s)" in result.output
    stage.write_text(STAGE.replace("tpot_ms: 50", "tpot_ms: 5"))  # below a step alone
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and "infeasible" in result.output
    stage.write_text(STAGE.replace("ttft_ms: 500", "ttft: 500"))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and "unknown keys ['ttft']" in result.output
