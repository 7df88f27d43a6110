"""The dashboard's history: a bounded ring of per-second figures, the figures of an interval
from two readings of the records, and the recorder that reads once a second."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.api.dashboard.history import Ring
from headway.api.dashboard.recorder import TABLE_WINDOW, Recorder, process_usage
from headway.api.dashboard.sampling import (
    Reading,
    Usage,
    model_figures,
    quantile_ms,
    sample,
    stream_figures,
)
from headway.api.dashboard.tables import tables
from headway.control.model_stats import ModelStats
from headway.control.snapshots import (
    CacheSnapshot,
    ControllerSnapshot,
    HistogramSnapshot,
    ModelCounts,
    ModelScheduling,
    ModelSnapshot,
    ModelStatus,
    SchedulerSnapshot,
    WorkerSnapshot,
)
from headway.repository import ModelConfig


def values(found: dict[str, Any], key: tuple[str, str, str]) -> list[float | None]:
    for group, name, figure, series in found["series"]:
        if (group, name, figure) == key:
            return [None if math.isnan(v) else float(v) for v in series]
    raise KeyError(key)


def test_the_ring_keeps_the_last_samples_and_answers_those_after_a_number() -> None:
    ring = Ring(capacity=3, max_series=8)
    for second in range(4):
        ring.add(100.0 + second, {("model", "m", "answered"): float(second)})
    everything = ring.since(0)
    assert (everything["first"], everything["last"]) == (2, 4)  # the first fell out
    assert list(everything["t"]) == [101.0, 102.0, 103.0]
    assert values(everything, ("model", "m", "answered")) == [1.0, 2.0, 3.0]
    newer = ring.since(3)
    assert (newer["first"], newer["last"], list(newer["t"])) == (4, 4, [103.0])
    assert ring.since(4) == {"first": 5, "last": 4, "t": [], "series": []}


def test_a_series_missing_from_a_sample_has_no_figure_there_and_is_forgotten_when_gone() -> None:
    ring = Ring(capacity=3, max_series=8)
    ring.add(1.0, {("worker", "0", "cpu"): 5.0, ("worker", "1", "cpu"): 7.0})
    ring.add(2.0, {("worker", "0", "cpu"): 6.0, ("worker", "1", "cpu"): None})
    assert values(ring.since(0), ("worker", "1", "cpu")) == [7.0, None]
    for second in (3.0, 4.0, 5.0, 6.0):  # a lap without worker 1, to the end of a lap
        ring.add(second, {("worker", "0", "cpu"): second})
    assert set(ring.series) == {("worker", "0", "cpu")}


def test_the_series_are_bounded_and_so_is_their_memory() -> None:
    ring = Ring(capacity=900, max_series=2)
    ring.add(1.0, {("model", name, "queue"): 0.0 for name in "abc"})
    assert len(ring.series) == 2 and ring.dropped == 1
    assert ring.nbytes == 900 * 8 + 2 * 900 * 4 <= ring.most_bytes == 900 * (8 + 4 * 2)
    with pytest.raises(ValueError):
        Ring(capacity=0)


def histogram(*values: float) -> HistogramSnapshot:
    stats = ModelStats()
    for value in values:
        stats.latency.observe(value)
    return HistogramSnapshot.of(stats.latency)


def counts(**changes: Any) -> ModelCounts:
    return replace(ModelCounts.of(ModelStats()), **changes)


def test_an_intervals_figures_are_what_happened_in_it() -> None:
    before = counts(requests=10, successes=8, errors={"deadline": 1},
                    latency=histogram(*[0.001] * 8))  # fmt: skip
    # then: 10 more requests, 9 answered (1 late, in the 50 ms bucket), 1 more refused
    now = counts(requests=20, successes=17, late=1, errors={"deadline": 1, "overloaded": 1},
                 latency=histogram(*[0.001] * 16, 0.05))  # fmt: skip
    figures = model_figures(now, before)
    assert (figures["requests"], figures["answered"], figures["late"]) == (10, 9, 1)
    assert figures["rejected:deadline"] == 0 and figures["rejected:overloaded"] == 1
    assert figures["slo"] == pytest.approx(8 / 10)  # in time over settled: 9 answered + 1
    assert figures["p50_ms"] == 1.0 and figures["p99_ms"] == 50.0  # of the interval's 9
    assert figures["batch"] is None  # no batch ran in it
    assert quantile_ms(histogram(), 0.5) is None


def test_streams_figures_are_those_of_a_model_that_streamed() -> None:
    assert stream_figures(counts(), None) == {}  # never streamed: nothing to draw
    before = counts(first_part=histogram(0.002), part_gap=histogram(0.001), parts=5)
    now = counts(first_part=histogram(0.002, 0.02, 0.02),
                 part_gap=histogram(0.001, *[0.005] * 57), parts=65)  # fmt: skip
    figures = stream_figures(now, before)
    assert figures == {"ttfp_p50_ms": 20.0, "ttfp_p99_ms": 20.0, "tpot_p50_ms": 5.0,
                       "tpot_p99_ms": 5.0, "parts": 60}  # fmt: skip


def snapshot(at: float, model: ModelCounts, ran: float, queued: int = 0) -> ControllerSnapshot:
    config = ModelConfig(name="m", version=1, framework="python", path=Path("m"))
    status = ModelStatus("m", "m@1", True, config, "READY", "", False, (0,), (), 1.5)
    scheduling = ModelScheduling(queued, (0,), 8.0, 0, 0, {})
    worker = WorkerSnapshot(0, 42, None, 1.5, None, 1, ("infer", "m@1"), {"m@1": ran})
    return ControllerSnapshot(
        at, (ModelSnapshot(status, model, scheduling),), (worker,), CacheSnapshot(0, 0, 0, 0),
        SchedulerSnapshot("headway", 0.0, {}, {}), "fake", 1, {0: 42},
    )  # fmt: skip


def reading(second: float, requests: int, ran: float, cpu: float) -> Reading:
    model = counts(requests=requests, successes=requests)
    operators = [{"name": "flow/map:f", "app": "flow", "calls": requests}]
    apps = [{"name": "pick", "policy": "exp3", "weights": {"m": 0.25 + second / 100}},
            {"name": "flow", "queries": requests}]  # fmt: skip
    return Reading(1000.0 + second, snapshot(second, model, ran), apps, operators,
                   {0: Usage(cpu, 50.0)})  # fmt: skip


def test_a_sample_holds_models_workers_apps_and_operators() -> None:
    figures = sample(reading(2.0, 30, ran=0.9, cpu=3.5), reading(1.0, 10, ran=0.4, cpu=3.0))
    assert figures["model", "m", "requests"] == 20 and figures["model", "m", "replicas"] == 1
    assert figures["worker", "0", "cpu"] == pytest.approx(50.0)  # half a core
    assert figures["worker", "0", "rss_mb"] == 50.0 and figures["worker", "0", "models_mb"] == 1.5
    assert figures["worker", "0", "busy:m"] == pytest.approx(0.5)  # labels, not keys
    assert figures["operator", "flow/map:f", "calls"] == 20
    assert figures["app", "pick", "weight:m"] == pytest.approx(0.27)  # the weights now
    assert figures["app", "flow", "queries"] == 20


def test_the_recorder_reads_on_its_timer_and_the_tables_cover_its_window() -> None:
    seconds = iter(range(100))

    def reader() -> Reading:
        second = next(seconds)
        return reading(float(second), 10 * second, ran=0.1 * second, cpu=0.0)

    async def scenario() -> Recorder:
        recorder = Recorder(reader, seconds=60, period=0.01)
        recorder.start()
        await asyncio.sleep(0.2)
        recorder.stop()
        return recorder

    recorder = asyncio.run(scenario())
    assert recorder.ticks >= 5 and recorder.ring is not None
    assert recorder.ring.seq == recorder.ticks - 1  # the first reading is the baseline
    assert values(recorder.ring.since(0), ("model", "m", "requests"))[-1] == 10
    now, before = recorder.latest()
    assert before is not None and now.at - before.at == min(recorder.ticks - 1, TABLE_WINDOW)
    table = tables(now, before)
    (model,) = table["models"]
    assert model["rate"] == pytest.approx(10.0) and model["replicas"] == 1
    (worker,) = table["workers"]
    assert worker["running"] == "infer m" and worker["busy"] == {"m": pytest.approx(0.1)}


def test_a_process_usage_is_read_from_proc() -> None:
    import os

    mine = process_usage(os.getpid())
    if mine is None:
        pytest.skip("no /proc here")
    assert mine.rss_mb > 1.0 and mine.cpu_s > 0
    assert process_usage(2**22 + 7) is None  # no such process
    assert np.isfinite(mine.cpu_s)
