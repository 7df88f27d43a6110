"""`headway profile` with real worker processes, and `headway plan` on what it measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import joblib
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from sklearn.datasets import load_digits

from headway.cli.main import cli
from headway.cli.serve import ServeSettings, build_app
from headway.planning.applying import serve_plan
from headway.planning.description import DEFAULT_CATALOGUE
from headway.planning.plan_file import read_plan
from headway.repository import Repository
from headway.store import Store
from headway.store.profiles import measured, save_measured
from tests.integration import models

CONFIG = """
hardware:
  cpu1: {cost_per_hour: 0.05, threads: 1}
  gpu-like: {cost_per_hour: 0.9, gpu: v100-like}
pipelines:
  cascade:
    stages:
      - {name: fast, model: digits-logreg}
      - {name: slow, model: iris-forest, parents: [fast], scale: 0.3}
"""


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a two-model repository, its config, and a store the profiler filled."""
    folder = tmp_path_factory.mktemp("planning")
    models.digits_logreg(folder / "repo")
    models.iris_forest(folder / "repo")
    (folder / "headway.yaml").write_text(CONFIG)
    result = CliRunner().invoke(
        cli,
        [
            "profile",
            "--repository",
            str(folder / "repo"),
            "--config",
            str(folder / "headway.yaml"),
            "--batch-sizes",
            "1,4",
            "--iterations",
            "5",
            "--state",
            str(folder / "state.db"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "apart)" in result.output  # each figure with how far apart its rounds were
    return folder


@pytest.mark.integration
def test_profile_measures_each_model_per_cpu_kind_and_batch_size(profiled: Path) -> None:
    rows = measured(Store(profiled / "state.db"))
    assert {(r.model, r.hardware, r.batch_size) for r in rows} == {
        (m, "cpu1", b) for m in ("digits-logreg", "iris-forest") for b in (1, 4)
    }
    for row in rows:
        assert row.samples == 5 and row.source == "measured"
        assert row.spread is not None and row.p99_spread is not None  # 5 rounds of 1 call
        assert row.p50 is not None and row.p99 is not None
        assert 0 < row.p50 <= row.p99
        assert row.throughput == pytest.approx(row.batch_size / row.mean)


@pytest.mark.integration
def test_import_then_plan_then_simulate_the_plan(profiled: Path, tmp_path: Path) -> None:
    gpu = tmp_path / "gpu.json"
    gpu.write_text(
        json.dumps(
            {
                "profiles": [
                    {"model": m, "hardware": "gpu-like", "batch_size": b, "mean_ms": 0.2 + 0.01 * b}
                    for m in ("digits-logreg", "iris-forest")
                    for b in (1, 4)
                ]
            }
        )
    )
    state = profiled / "state.db"
    runner = CliRunner()
    result = runner.invoke(cli, ["profile", "--import", str(gpu), "--state", str(state)])
    assert result.exit_code == 0, result.output
    assert {r.hardware for r in measured(Store(state))} == {"cpu1", "gpu-like"}

    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([i / 20 for i in range(200)]))  # 20 queries/s for 10 s
    plan_path = tmp_path / "plan.yaml"
    args = ["plan", "--config", str(profiled / "headway.yaml"), "--app", "cascade"]
    args += ["--slo-ms", "1000", "--trace", str(trace), "--state", str(state)]
    result = runner.invoke(cli, [*args, "-o", str(plan_path)])
    assert result.exit_code == 0, result.output
    plan = yaml.safe_load(plan_path.read_text())
    assert plan["feasible"] and plan["p99_ms"] <= 1000
    # light load and a loose SLO: one replica each, on the cheap CPU kind
    assert {s: (p["hardware"], p["replicas"]) for s, p in plan["stages"].items()} == {
        "fast": ("cpu1", 1),
        "slow": ("cpu1", 1),
    }
    assert plan["cost_per_hour"] == pytest.approx(0.1)
    assert (plan["headroom"], plan["goal_ms"]) == (0.2, 800.0)  # the default headroom
    assert "less 20% headroom: 800.0 ms" in " ".join(result.output.split())
    assert plan["stages"]["slow"]["scale"] == 0.3
    assert 0 < plan["stages"]["fast"]["utilisation"] < 1
    assert any(step.startswith("restart from gpu-like") for step in plan["steps"])
    alone = tmp_path / "inferline.yaml"
    result = runner.invoke(cli, [*args, "--no-restarts", "-o", str(alone)])
    assert result.exit_code == 0, result.output
    inferline = yaml.safe_load(alone.read_text())
    assert not any(step.startswith("restart") for step in inferline["steps"])
    assert inferline["cost_per_hour"] >= plan["cost_per_hour"]
    hurried = tmp_path / "hurried.yaml"  # a budget spent before the search begins
    result = runner.invoke(cli, [*args, "--budget-s", "0.000001", "-o", str(hurried)])
    assert result.exit_code == 0, result.output
    steps = yaml.safe_load(hurried.read_text())["steps"]
    assert any("not restarted from" in step and "gpu-like" in step for step in steps)
    assert not any(step.startswith("restart") for step in steps)
    assert (plan["screened_queries"], plan["trace_queries"]) == (200, 200)
    assert "the trace has 200 queries, so its P99 rests on its 2 slowest" in " ".join(
        result.output.split()
    )
    edge = tmp_path / "edge.yaml"
    result = runner.invoke(cli, [*args, "--headroom", "0", "-o", str(edge)])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(edge.read_text())["goal_ms"] == 1000.0
    assert "(SLO 1000.0 ms)" in result.output
    screened = tmp_path / "screened.yaml"
    result = runner.invoke(cli, [*args, "--screen-queries", "100", "-o", str(screened)])
    assert result.exit_code == 0, result.output
    assert "first 100 of 200 queries, the plan" in " ".join(result.output.split())
    on_prefix = yaml.safe_load(screened.read_text())
    assert (on_prefix["screened_queries"], on_prefix["trace_queries"]) == (100, 200)
    assert on_prefix["stages"] == plan["stages"] and on_prefix["p99_ms"] <= 1000

    result = runner.invoke(cli, [*args, "--simulate", str(plan_path)])
    assert result.exit_code == 0, result.output
    assert "200 queries" in result.output and "within 1000 ms" in result.output

    # the estimate draws each action from the profiles' mean and p99 unless told --no-spread
    def estimate(*flags: str) -> str:  # its p50 and p99, not how fast the simulation ran
        output = runner.invoke(cli, [*args, "--simulate", str(plan_path), *flags]).output
        found = re.search(r"p50 [\d.]+ ms, p99 [\d.]+ ms", output)
        assert found is not None, output
        return found.group()

    assert estimate() == estimate("--spread") != estimate("--no-spread")


@pytest.mark.integration
def test_plan_reports_an_infeasible_slo(profiled: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([0.0, 1.0]))
    args = ["plan", "--config", str(profiled / "headway.yaml"), "--app", "cascade"]
    args += ["--slo-ms", "0.01", "--trace", str(trace), "--state", str(profiled / "state.db")]
    result = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "plan.yaml")])
    assert result.exit_code != 0
    assert "infeasible" in result.output and "critical path" in result.output


def test_plan_names_a_missing_profile(tmp_path: Path) -> None:
    (tmp_path / "headway.yaml").write_text(CONFIG)
    (tmp_path / "trace.json").write_text("[0, 1]")
    args = ["plan", "--config", str(tmp_path / "headway.yaml"), "--app", "cascade"]
    args += ["--slo-ms", "100", "--trace", str(tmp_path / "trace.json")]
    args += ["--state", str(tmp_path / "none.db"), "-o", str(tmp_path / "p.yaml")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    assert "digits-logreg" in result.output and "headway profile" in result.output


@pytest.mark.integration
def test_serve_plan_gives_each_model_its_replicas_and_batch(profiled: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([i / 400 for i in range(2000)]))  # 400 queries/s for 5 s
    plan_path = tmp_path / "plan.yaml"
    args = ["plan", "--config", str(profiled / "headway.yaml"), "--app", "cascade"]
    args += ["--slo-ms", "30", "--trace", str(trace), "--state", str(profiled / "state.db")]
    result = CliRunner().invoke(cli, [*args, "-o", str(plan_path)])
    assert result.exit_code == 0, result.output
    plan = read_plan(plan_path)
    repository = Repository.scan(profiled / "repo")
    workers = serve_plan(plan, repository, DEFAULT_CATALOGUE, gpus=0).workers
    assert workers == sum(s.replicas for s in plan.stages)
    for stage in plan.stages:
        config = repository.get(stage.model)
        assert (config.replicas, config.max_batch_size) == (stage.replicas, stage.max_batch_size)
    settings = ServeSettings(repository=profiled / "repo", plan=plan_path, state=tmp_path / "s.db")
    app = build_app(settings)
    assert app.controller.statistics().size == workers
    assert app.controller.repository.get("iris-forest").replicas == plan.stages[1].replicas


FLOW = """
import numpy as np

from headway.flows import Flow, Model, Row


def unsure(row: Row) -> bool:
    return bool(np.max(row["probabilities"]) < 0.9)


def first4(row: Row) -> np.ndarray:
    return np.asarray(row["x"], dtype=np.float64)[:4]


flow = Flow("cascade", {"x": np.ndarray})
scored = flow.map(Model("digits-logreg", {"probabilities": np.ndarray}, inputs={"input-0": "x"}))
scored.filter(unsure).map(first4, names=["x4"]).map(
    Model("iris-forest", {"label": int}, inputs={"input-0": "x4"})
)
"""


@pytest.mark.integration
def test_plan_a_flow_app_with_scale_factors_from_sample_queries(
    profiled: Path, tmp_path: Path
) -> None:
    (tmp_path / "cascade.py").write_text(FLOW)
    config = tmp_path / "headway.yaml"
    config.write_text(
        CONFIG + f"apps:\n  cascade-flow:\n    flow: {tmp_path / 'cascade.py'}:flow\n"
    )
    rows = load_digits().data[1500:1560]
    model = joblib.load(profiled / "repo" / "digits-logreg" / "1" / "model.joblib")
    share = float(np.mean(model.predict_proba(rows).max(axis=1) < 0.9))
    assert 0 < share < 1
    samples = tmp_path / "samples.json"
    samples.write_text(json.dumps([{"x": row.tolist()} for row in rows]))
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([i / 20 for i in range(100)]))
    args = ["plan", "--config", str(config), "--app", "cascade-flow", "--slo-ms", "1000"]
    args += ["--trace", str(trace), "--state", str(profiled / "state.db")]
    args += ["--samples", str(samples), "--repository", str(profiled / "repo")]
    result = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "plan.yaml")])
    assert result.exit_code == 0, result.output
    stages = yaml.safe_load((tmp_path / "plan.yaml").read_text())["stages"]
    assert stages["digits-logreg"]["scale"] == 1.0
    assert stages["iris-forest"]["scale"] == pytest.approx(share)
    assert stages["iris-forest"]["model"] == "iris-forest"


@pytest.mark.integration
def test_profile_frontend_measures_the_server_and_plan_estimates_it(
    profiled: Path, tmp_path: Path
) -> None:
    """`headway profile --frontend` serves the app over HTTP and keeps its time per query
    outside the models in the store; `headway plan` then estimates it (the plan file says how
    much) unless told --frontend-ms."""
    app_config = tmp_path / "app.yaml"
    app_config.write_text(yaml.safe_dump({"apps": {"digits": {"models": ["digits-logreg"]}}}))
    samples = tmp_path / "rows.json"
    samples.write_text(json.dumps(load_digits().data[:8].tolist()))
    state = tmp_path / "state.db"
    runner = CliRunner()
    args = ["profile", "--frontend", "digits", "--config", str(app_config)]
    args += ["--repository", str(profiled / "repo"), "--samples", str(samples)]
    result = runner.invoke(cli, [*args, "--frontend-seconds", "1", "--state", str(state)])
    assert result.exit_code == 0, result.output
    rows = measured(Store(state))
    assert [(r.model, r.hardware) for r in rows] == [("(frontend of digits)", "server")]
    assert rows[0].samples > 0 and 0 < rows[0].mean < 1.0
    assert "per query outside the models" in result.output

    # the models' profiles next to it, then a plan of the one-model app
    save_measured(Store(state), measured(Store(profiled / "state.db")))
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([i / 10 for i in range(50)]))
    plan_args = ["plan", "--config", str(app_config), "--app", "digits", "--slo-ms", "1000"]
    plan_args += ["--trace", str(trace), "--state", str(state), "--catalogue"]
    catalogue = tmp_path / "catalogue.yaml"
    catalogue.write_text("hardware:\n  cpu1: {cost_per_hour: 0.05}\n")
    plan_args.append(str(catalogue))
    result = runner.invoke(cli, [*plan_args, "-o", str(tmp_path / "plan.yaml")])
    assert result.exit_code == 0, result.output
    plan = yaml.safe_load((tmp_path / "plan.yaml").read_text())
    assert plan["frontend_ms"] == pytest.approx(rows[0].mean * 1e3, abs=1e-3)
    result = runner.invoke(cli, [*plan_args, "--frontend-ms", "0", "-o", str(tmp_path / "p0.yaml")])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((tmp_path / "p0.yaml").read_text())["frontend_ms"] == 0


@pytest.mark.integration
def test_profile_under_load_keeps_the_models_and_frontend_as_loaded(
    profiled: Path, tmp_path: Path
) -> None:
    """`headway profile --frontend APP --under-load QPS` serves the app at that rate and keeps
    each model's time per batch size under it, and the loop's, in place of the idle ones."""
    app_config = tmp_path / "app.yaml"
    app_config.write_text(yaml.safe_dump({"apps": {"digits": {"models": ["digits-logreg"]}}}))
    samples = tmp_path / "rows.json"
    samples.write_text(json.dumps(load_digits().data[:8].tolist()))
    state = tmp_path / "state.db"
    save_measured(Store(state), measured(Store(profiled / "state.db")))
    idle = {(r.model, r.batch_size): r for r in measured(Store(state)) if r.hardware == "cpu1"}
    args = ["profile", "--frontend", "digits", "--config", str(app_config), "--hardware", "cpu1"]
    args += ["--repository", str(profiled / "repo"), "--samples", str(samples)]
    args += ["--frontend-seconds", "1", "--under-load", "50", "--state", str(state)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "under 50 queries/s" in result.output
    rows = {(r.model, r.batch_size): r for r in measured(Store(state)) if r.hardware != "gpu-like"}
    # the served model's rows were replaced by the loaded run's (its queries are the samples);
    # the other model, not served by the app, keeps its idle rows
    for size in (1, 4):
        loaded = rows[("digits-logreg", size)]
        assert loaded.samples > 25 and loaded.samples != idle[("digits-logreg", size)].samples
        assert rows[("iris-forest", size)] == idle[("iris-forest", size)]
    assert rows[("(frontend of digits)", 1)].samples == rows[("digits-logreg", 1)].samples


@pytest.mark.integration
def test_profile_under_load_needs_the_models_idle_profiles(tmp_path: Path) -> None:
    models.digits_logreg(tmp_path / "repo")
    app_config = tmp_path / "app.yaml"
    app_config.write_text(yaml.safe_dump({"apps": {"digits": {"models": ["digits-logreg"]}}}))
    samples = tmp_path / "rows.json"
    samples.write_text(json.dumps(load_digits().data[:8].tolist()))
    args = ["profile", "--frontend", "digits", "--config", str(app_config)]
    args += ["--repository", str(tmp_path / "repo"), "--samples", str(samples)]
    args += ["--frontend-seconds", "1", "--under-load", "50", "--state", str(tmp_path / "s.db")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    assert "no kept profile on cpu1" in result.output
