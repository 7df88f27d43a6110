"""A model's execution statistics: per batch and per request, as Triton's statistics count."""

from __future__ import annotations

import pytest

from headway.control.model_stats import ModelStats


def test_an_execution_counts_once_per_batch_and_once_per_request_it_carried() -> None:
    stats = ModelStats()
    stats.executed(3, [0.1, 0.2, 0.3], infer_s=0.5, input_s=0.01, output_s=0.002, at=7.0)
    stats.executed(1, [0.05], infer_s=0.2, input_s=0.01, output_s=0.001, at=9.0)
    assert (stats.batch_size.count, stats.batch_size.total) == (2, 4)
    assert stats.queue.count == 4 and stats.queue.total == pytest.approx(0.65)
    assert stats.compute.count == 2 and stats.compute.total == pytest.approx(0.7)
    three = stats.batches[3]
    assert (three.count, three.infer_s, three.input_s) == (1, 0.5, 0.01)
    assert stats.per_request.count == 4
    assert stats.per_request.infer_s == pytest.approx(3 * 0.5 + 0.2)
    assert stats.per_request.output_s == pytest.approx(3 * 0.002 + 0.001)
    assert stats.last_inference == 9.0
