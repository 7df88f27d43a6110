"""Smoke checks of the evidence benchmark (`bench/evidence/`, docs/evidence.md): each piece runs
at a tiny size and gives figures of the right shape and range, and the plots are drawn. The
figures themselves are the benchmark's business, not asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from bench.evidence import run, selection


def test_an_exp4_ensemble_is_judged_against_its_best_member() -> None:
    row = selection.ensemble("wine", "bagged", seed=0)
    assert row["queries"] == 89  # half of wine's 178 rows
    assert 0.0 <= row["exp4"] <= 1.0 and len(row["members"]) == 5
    assert row["best"] == max(row["members"].values())
    assert row["margin"] == pytest.approx(row["exp4"] - row["best"])


def test_recovery_records_every_event_and_the_degraded_model_loses_weight() -> None:
    run_ = selection.recovery("exp4", 0.1, seed=0, events=400, at=200)
    shares = np.array([run_["share"][m] for m in ("logreg", "bayes", "tree")])
    assert shares.shape == (3, 400)
    np.testing.assert_allclose(shares.sum(axis=0), 1.0)
    assert len(run_["correct"]) == 400
    assert shares[0, -1] < shares[0, 199]  # answering at random costs it weight


def test_personal_selection_serves_every_event() -> None:
    run_ = selection.personal("exp3", True, 0.1, seed=0, events=100, users=4)
    assert len(run_["correct"]) == 100 and set(run_["correct"]) <= {0, 1}
    assert set(run_["model_accuracy_by_group"]) == {"plain-digits", "mirrored-digits", "both"}


def test_answering_at_the_deadline_bounds_the_ensembles_latency() -> None:
    late = selection.stragglers(8, deadline=False, seed=0, queries=60)
    bounded = selection.stragglers(8, deadline=True, seed=0, queries=60)
    assert bounded["p99_ms"] <= selection.SLO_MS + 1e-6
    assert late["p99_ms"] >= bounded["p99_ms"] and late["missing"] == 0.0
    assert 0.0 <= bounded["missing"] <= 1.0 and 0.0 <= bounded["accuracy"] <= 1.0


def test_the_entry_point_writes_figures_and_plots(tmp_path: Path) -> None:
    run.main(["clipper", "--quick", "--parts", "ensemble,stragglers", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "clipper.json").read_text())
    assert data["meta"]["quick"] and data["meta"]["machine"]["cpus"] >= 1
    parts = data["meta"]["parts"]
    assert set(parts) == {"ensemble", "stragglers"} and parts["ensemble"]["machine"]["cpus"] >= 1
    assert {r["pool"] for r in data["ensemble"]["rows"]} == {"mixed", "subspace", "bagged"}
    assert {r["deadline"] for r in data["stragglers"]["rows"]} == {True, False}
    for name in ("clipper-ensemble.png", "clipper-stragglers.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_planner_cell_is_judged_with_both_baselines_and_drawn(tmp_path: Path) -> None:
    from bench.evidence import inferline, plots
    from bench.planner import compare

    catalogue, profiles = compare.load()
    pipeline = compare.PIPELINES["tf-cascade"]
    row = inferline._cell((catalogue, profiles, pipeline, 300, 4.0, 3000.0, 1000, 1, "cpu4"))
    for who in ("planner", "cg_mean", "cg_peak"):
        assert row[who]["cost_per_hour"] > 0 and 0.0 <= row[who]["miss_rate"] <= 1.0
    assert row["seed"] == 1 and row["test_queries"] > 0
    profiles_ms = {
        "m|cpu1|1": {"mean_ms": 1.0, "p99_ms": 2.0},
        "m|cpu1|2": {"mean_ms": 1.5, "p99_ms": 3.0},
    }
    data = {"assumed": [row], "measured": [row], "measured_profiles_ms": profiles_ms}
    drawn = plots.inferline(data, tmp_path / "i.png", "note")
    assert drawn.read_bytes()[:4] == b"\x89PNG"
