"""Generated traces have the shape the docs promise, reproducibly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headway.traces import TraceSpec, generate, popularity, read, write


def test_same_seed_same_trace_and_another_seed_differs() -> None:
    spec = TraceSpec(models=200, duration=30, rate=50, seed=3)
    a, b = generate(spec), generate(spec)
    np.testing.assert_array_equal(a.times, b.times)
    np.testing.assert_array_equal(a.models, b.models)
    c = generate(TraceSpec(models=200, duration=30, rate=50, seed=4))
    assert len(c) != len(a) or not np.array_equal(c.models, a.models)


def test_mean_rate_and_sorted_times() -> None:
    spec = TraceSpec(models=2000, duration=600, rate=200, interval=10, seed=1)
    trace = generate(spec)
    assert np.all(np.diff(trace.times) >= 0)
    assert trace.times.min() >= 0 and trace.times.max() < spec.duration
    # Heavy tails make totals noisy; 15% is about 4 standard deviations here.
    assert len(trace) / spec.duration == pytest.approx(spec.rate, rel=0.15)


def test_popularity_is_heavy_tailed() -> None:
    trace = generate(TraceSpec(models=5000, duration=300, rate=500, seed=2))
    summary = popularity(trace)
    assert summary["top_1pct_share"] > 0.3  # 1% of models carry a large share
    assert summary["models_with_requests"] < 5000  # many models are never asked for
    assert summary["max_to_median_ratio"] > 100


def test_timer_models_are_periodic() -> None:
    spec = TraceSpec(models=20, duration=200, rate=20, timer_fraction=1.0, sigma=0.0, seed=5)
    trace = generate(spec)
    for model in range(spec.models):
        gaps = np.diff(trace.times[trace.models == model])
        assert gaps.size > 10
        np.testing.assert_allclose(gaps, gaps[0], rtol=1e-6)


def test_bursts_raise_the_peak_interval() -> None:
    calm = generate(
        TraceSpec(
            models=50,
            duration=100,
            rate=100,
            burst_probability=0.0,
            jitter=0.0,
            diurnal=0.0,
            timer_fraction=0.0,
            seed=6,
        )
    )
    bursty = generate(
        TraceSpec(
            models=50,
            duration=100,
            rate=100,
            burst_probability=0.2,
            burst_factor=20.0,
            jitter=0.0,
            diurnal=0.0,
            timer_fraction=0.0,
            seed=6,
        )
    )

    def peak(trace):  # type: ignore[no-untyped-def]
        per = np.bincount((trace.times // 10).astype(int) * 50 + trace.models)
        return per.max() / per.mean()

    assert peak(bursty) > 2 * peak(calm)


def test_file_round_trip_keeps_the_parameters(tmp_path: Path) -> None:
    spec = TraceSpec(models=30, duration=10, rate=30, slo_ms=75, seed=7)
    trace = generate(spec)
    path = tmp_path / "trace.csv"
    write(trace, path)
    header, rows = read(path)
    assert header["trace"]["seed"] == 7 and header["requests"] == len(trace)  # type: ignore[index]
    assert [m for _, m, _ in rows] == [m for _, m in trace.rows()]
    assert all(slo == 75 for _, _, slo in rows)
    np.testing.assert_allclose([t for t, _, _ in rows], trace.times, atol=1e-6)


def test_bad_parameters_and_bad_files_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rate"):
        TraceSpec(rate=0)
    with pytest.raises(ValueError, match="diurnal"):
        TraceSpec(diurnal=1.5)
    bad = tmp_path / "bad.csv"
    bad.write_text("seconds,model,slo_ms\n0.1,m1\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2: expected seconds,model,slo_ms"):
        read(bad)
