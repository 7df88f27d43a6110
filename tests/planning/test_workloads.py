"""Arrival traces: gamma gaps with the CV asked for, ramps and spikes, reproducibly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from headway.cli.main import cli
from headway.planning.description import read_arrivals
from headway.planning.workloads import ArrivalSpec, arrival_times


@pytest.mark.parametrize("cv", [0.1, 1.0, 4.0])
def test_gaps_have_the_coefficient_of_variation_asked_for(cv: float) -> None:
    times = arrival_times(ArrivalSpec(rate=200, duration=300, cv=cv, seed=1))
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.15)
    assert len(times) / 300 == pytest.approx(200, rel=0.15)


def test_a_spike_multiplies_the_rate_for_its_seconds() -> None:
    spec = ArrivalSpec(rate=100, duration=60, cv=1.0, spike_at=30, spike_factor=3, seed=2)
    times = arrival_times(spec)
    before = np.sum((times >= 15) & (times < 25))
    during = np.sum((times >= 30) & (times < 40))
    assert during / before == pytest.approx(3.0, rel=0.15)
    assert np.array_equal(times, arrival_times(spec))  # the same spec, the same times


def test_a_ramp_reaches_its_final_rate() -> None:
    times = arrival_times(ArrivalSpec(rate=50, duration=100, cv=0.1, ramp_to=150, seed=3))
    first = np.sum(times < 10) / 10  # mean rate over the first 10 s: 55
    last = np.sum(times >= 90) / 10  # and over the last 10 s: 145
    assert first == pytest.approx(55, rel=0.05) and last == pytest.approx(145, rel=0.05)
    assert np.all(np.diff(times) >= 0) and times[-1] < 100


def test_out_of_range_parameters_are_named() -> None:
    with pytest.raises(ValueError, match="cv"):
        ArrivalSpec(rate=1, duration=1, cv=0)


def test_headway_trace_app_writes_what_the_planner_reads(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    args = ["trace", "--app", "cascade", "--rate", "50", "--duration", "20", "--cv", "4"]
    result = CliRunner().invoke(cli, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    times = read_arrivals(out)
    assert len(times) == len(json.loads(out.read_text())) > 100
    csv = tmp_path / "trace.csv"
    result = CliRunner().invoke(cli, [*args, "-o", str(csv)])
    assert np.allclose(read_arrivals(csv), times, atol=1e-6)


def test_stream_options_need_an_app(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["trace", "--cv", "2", "-o", str(tmp_path / "t.csv")])
    assert result.exit_code != 0 and "give --app" in result.output
