"""A generative model's measured steps, written as the stage file `headway plan --generative`
reads, and that file's first steps as the simulated server runs them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.errors import ConfigError
from headway.planning.description import read_document
from headway.planning.generative import parse_generative_stage, size_generative_stage
from headway.planning.plan_file import write_plan
from headway.planning.steps import (
    MeasuredSteps,
    first_step_differs,
    sequence_counts,
    stage_document,
)
from headway.repository import Generation, ModelConfig
from headway.store.profiles import MeasuredProfile


def config(**fields: Any) -> ModelConfig:
    base = ModelConfig("gen", 1, "python", Path("."), slo_ms=800.0, generative=Generation(8, 64))
    return replace(base, **fields)


def row(sequences: int, ms: float, spread: float = 0.02) -> MeasuredProfile:
    seconds = ms / 1e3
    return MeasuredProfile(
        "gen", "cpu1", sequences, mean=seconds, p99=seconds, samples=20, spread=spread
    )


def test_steps_are_measured_at_powers_of_two_up_to_max_sequences() -> None:
    assert sequence_counts(1) == [1]
    assert sequence_counts(8) == [1, 2, 4, 8]
    assert sequence_counts(12) == [1, 2, 4, 8, 12]


def test_a_first_step_is_apart_only_beyond_the_margin_and_the_rounds_spread() -> None:
    assert not first_step_differs(row(4, 10.0), row(4, 10.3))  # 3%: one figure
    assert first_step_differs(row(4, 10.0), row(4, 12.0))  # 20%, rounds 2% apart
    assert not first_step_differs(row(4, 10.0, spread=0.3), row(4, 12.0))  # within the noise


def test_the_stage_file_holds_the_steps_the_model_and_its_targets(tmp_path: Path) -> None:
    steps = [row(1, 4.0), row(2, 5.0), row(4, 7.0), row(8, 11.0)]
    same = MeasuredSteps(
        config(ttft_ms=300.0), steps, [row(n.batch_size, 1e3 * n.mean) for n in steps]
    )
    document = stage_document(same)
    assert document == {
        "steps_ms": {1: 4.0, 2: 5.0, 4: 7.0, 8: 11.0},
        "max_sequences": 8,
        "parts": 64,
        "ttft_ms": 300.0,
        "tpot_ms": 300.0,  # no per-part target: a part within the first part's
    }
    firsts = [row(1, 30.0), row(2, 55.0), row(4, 7.0), row(8, 11.0)]
    apart = stage_document(MeasuredSteps(config(tpot_ms=40.0), steps, firsts))
    assert apart["first_steps_ms"] == {1: 30.0, 2: 55.0, 4: 7.0, 8: 11.0}
    assert apart["ttft_ms"] == 800.0 and apart["tpot_ms"] == 40.0  # slo_ms for the first part
    path = tmp_path / "gen-cpu1.yaml"
    write_plan(apart, path)
    stage = parse_generative_stage(read_document(path), str(path))
    assert stage.profile.durations == {1: 0.004, 2: 0.005, 4: 0.007, 8: 0.011}
    assert stage.profile.first_steps == {1: 0.030, 2: 0.055, 4: 0.007, 8: 0.011}
    assert stage.profile.generative == Generation(8, 64)
    assert (stage.lengths, stage.ttft, stage.tpot) == ({64: 1.0}, 0.8, 0.04)


def test_a_model_that_is_not_generative_or_not_measured_has_no_stage() -> None:
    with pytest.raises(ConfigError, match="not generative"):
        stage_document(MeasuredSteps(config(generative=None), [row(1, 4.0)], []))
    with pytest.raises(ConfigError, match="no step was measured"):
        stage_document(MeasuredSteps(config(), [], []))


def test_a_step_that_starts_sequences_costs_what_their_first_steps_took_beyond() -> None:
    stage = parse_generative_stage(
        {"steps_ms": {1: 4, 8: 11}, "first_steps_ms": {1: 30, 8: 60}, "parts": 8,
         "ttft_ms": 500, "tpot_ms": 50},
        "stage",
    )  # fmt: skip
    profile = stage.profile
    assert profile.step(8) == pytest.approx(0.011)
    assert profile.step(8, 1) == pytest.approx(0.011 + 0.026)  # one started: 30 - 4 ms more
    assert profile.step(8, 8) == pytest.approx(0.011 + 0.049)
    assert profile.step(0) == pytest.approx(0.004)
    without = parse_generative_stage(
        {"steps_ms": {1: 4, 8: 11}, "parts": 8, "ttft_ms": 500, "tpot_ms": 50}, "stage"
    )
    assert without.profile.step(8, 8) == pytest.approx(0.011)


def test_a_stage_whose_first_steps_miss_the_first_part_target_is_not_met() -> None:
    base = {"steps_ms": {1: 4, 8: 11}, "max_sequences": 8, "parts": 16,
            "ttft_ms": 100, "tpot_ms": 50}  # fmt: skip
    times = np.cumsum(np.random.default_rng(3).exponential(1 / 8.0, 40))

    def attained(raw: dict[str, object]) -> float:
        stage = parse_generative_stage(raw, "stage")
        parts = stage.parts(len(times))
        size = size_generative_stage(
            stage.profile, times, parts, ttft=stage.ttft, tpot=stage.tpot, most=1
        )
        return size.attained[1]

    assert attained(base) >= 0.9
    assert attained({**base, "first_steps_ms": {1: 150, 8: 400}}) < 0.5  # a first part late
