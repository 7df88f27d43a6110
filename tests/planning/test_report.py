"""What `headway plan` reports beside its plan: the simulated latency distribution against
the SLO, and CG-Mean and CG-Peak estimated on the same trace; `headway plan --report` shows
it from the plan file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from headway.cli.main import cli
from headway.planning.planner import Planner
from headway.planning.report import QUANTILES, baselines, report
from tests.planning.helpers import CATALOGUE, MS, PROFILES, chain


def planner(rate: float = 100.0, slo_ms: float = 100.0, queries: int = 2_000) -> Planner:
    arrivals = np.random.default_rng(0).exponential(1 / rate, queries).cumsum()
    return Planner(chain(1.0, 1.0), PROFILES, CATALOGUE, arrivals, slo_ms * MS, screen=None)


def test_the_report_holds_the_plans_distribution_and_both_baselines() -> None:
    found = planner()
    plan = found.plan()
    assert plan.config is not None
    reported = report(found, plan.config)
    quantiles = [q for q, _ in reported["latency_ms"]]
    values = [ms for _, ms in reported["latency_ms"]]
    assert quantiles == list(QUANTILES) and values == sorted(values)  # a distribution
    assert dict(reported["latency_ms"])[99.0] == pytest.approx(plan.p99 / MS, rel=0.05)
    assert 0.99 <= reported["attainment"] <= 1.0  # the plan meets its P99 SLO
    mean, peak = reported["baselines"]["cg_mean"], reported["baselines"]["cg_peak"]
    assert mean["rate_qps"] == pytest.approx(found.rate)
    assert peak["rate_qps"] > mean["rate_qps"]  # a Poisson trace's busiest 100 ms
    for baseline in (mean, peak):  # whole units: every stage alike
        assert len(set(baseline["config"].values())) == 1
        assert baseline["cost_per_hour"] > 0 and len(baseline["latency_ms"]) == len(QUANTILES)
    # InferLine's point: the plan costs no more than the unit sized for the peak
    assert plan.cost_per_hour <= peak["cost_per_hour"] + 1e-9


def test_a_baseline_no_kind_can_run_says_so() -> None:
    tight = planner(slo_ms=1.0)  # no unit's batch 1 runs in 1 ms
    assert all("infeasible" in b for b in baselines(tight).values())


def test_plan_report_shows_the_plan_file_without_planning(tmp_path: Path) -> None:
    config = tmp_path / "headway.yaml"
    config.write_text(
        "hardware:\n  cpu1: {cost_per_hour: 0.05}\npipelines:\n  two:\n    stages:\n"
        "      - {name: a, model: m0}\n      - {name: b, model: m1, parents: [a]}\n"
    )
    profiles = tmp_path / "profiles.json"
    rows = [{"model": m, "hardware": "cpu1", "batch_size": b, "mean_ms": ms + b}
            for m, ms in (("m0", 2.0), ("m1", 4.0)) for b in (1, 2, 4, 8)]  # fmt: skip
    profiles.write_text(json.dumps({"profiles": rows}))
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([i / 50 for i in range(500)]))
    out = tmp_path / "plan.yaml"
    runner = CliRunner()
    args = ["plan", "--config", str(config), "--app", "two", "--slo-ms", "200", "--trace"]
    args += [str(trace), "--profiles", str(profiles), "--state", str(tmp_path / "none.db")]
    planned = runner.invoke(cli, [*args, "-o", str(out)])
    assert planned.exit_code == 0, planned.output
    document = yaml.safe_load(out.read_text())
    assert set(document["report"]["baselines"]) == {"cg_mean", "cg_peak"}
    shown = runner.invoke(cli, ["plan", "--report", str(out)])
    assert shown.exit_code == 0, shown.output
    for words in ("plan for two", "p99", "CG-Mean", "CG-Peak", "within the SLO", "cpu1 b"):
        assert words in shown.output, (words, shown.output)
    missing = runner.invoke(cli, ["plan", "--app", "two"])
    assert missing.exit_code != 0 and "--config, --slo-ms, --trace" in missing.output
