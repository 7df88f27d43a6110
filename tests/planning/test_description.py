"""What the planner reads from files: each problem named with its file and key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headway.errors import ConfigError
from headway.planning.description import (
    DEFAULT_CATALOGUE,
    load_planning,
    parse_catalogue,
    parse_pipeline,
    read_arrivals,
    read_profile_rows,
)
from headway.planning.plan_file import read_plan


def test_a_config_without_hardware_gets_the_default_catalogue(tmp_path: Path) -> None:
    config = tmp_path / "headway.yaml"
    config.write_text("pipelines:\n  p:\n    stages:\n      - {model: m}\n")
    catalogue, pipelines = load_planning(config)
    assert catalogue == DEFAULT_CATALOGUE
    assert pipelines["p"].names == ["m"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"cpu1": {"cost": 1}}, r"hardware\.cpu1: unknown key\(s\) \['cost'\]"),
        ({"cpu1": {"threads": 2}}, r"hardware\.cpu1: cost_per_hour is required"),
        ({"cpu1": {"cost_per_hour": "cheap"}}, r"cost_per_hour: expected a number"),
        ({}, "lists no hardware"),
    ],
)
def test_catalogue_errors_name_the_kind_and_key(raw: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_catalogue(raw)


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([{"model": "a", "batch": 2}], r"stages\[0\]: unknown key\(s\) \['batch'\]"),
        ([{"name": "a"}], r"stages\[0\]: model is required"),
        ([{"model": "b", "parents": ["a"]}], "parent 'a' must be a stage listed before"),
        (
            [{"model": "a", "scale": 0.5}, {"model": "b", "parents": ["a"], "scale": 0.8}],
            "exceeds parent 'a'",
        ),
        ([{"model": "a"}, {"model": "a"}], "used twice"),
    ],
)
def test_pipeline_errors_name_the_stage(stages: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_pipeline("p", {"stages": stages})


def test_profile_and_trace_files_are_checked(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("profiles:\n  - {model: m, hardware: gpu, batch_size: 1}\n")
    with pytest.raises(ConfigError, match=r"profiles\[0\]: missing \['mean_ms'\]"):
        read_profile_rows(bad)
    trace = tmp_path / "t.json"
    trace.write_text('["soon"]')
    with pytest.raises(ConfigError, match="list of arrival times"):
        read_arrivals(trace)
    trace.write_text("[2.0, 1.0, 3.0]")
    assert np.array_equal(read_arrivals(trace), [1.0, 2.0, 3.0])


def test_an_infeasible_plan_file_is_refused_with_its_reason(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("app: a\nfeasible: false\nreason: the critical path is 12 ms\n")
    with pytest.raises(ConfigError, match="infeasible: the critical path is 12 ms"):
        read_plan(plan)
    plan.write_text("app: a\nfeasible: true\nstages: {s: {model: m}}\n")
    with pytest.raises(ConfigError, match="not a valid plan file"):
        read_plan(plan)
