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


def test_a_batchs_waits_are_counted_as_if_observed_one_by_one() -> None:
    # The queue histogram takes a batch's waits in one call: the same buckets (bounds
    # included), count and sum, to the last bit, as observing each wait in turn.
    waits = [0.0, 0.0005, 0.00051, 0.003, 0.1, 0.1 + 1e-12, 7.5, 12.0, 0.0004999, 1 / 3]
    batched, one_by_one = ModelStats(), ModelStats()
    batched.executed(10, waits, infer_s=0.1, input_s=0.0, output_s=0.0, at=1.0)
    batched.executed(2, waits[:2], infer_s=0.1, input_s=0.0, output_s=0.0, at=2.0)
    for wait in waits + waits[:2]:
        one_by_one.queue.observe(wait)
    assert batched.queue.counts == one_by_one.queue.counts
    assert batched.queue.counts[0] == 5 and batched.queue.counts[-1] == 1  # <= 0.5 ms; > 10 s
    assert (batched.queue.count, batched.queue.total) == (12, one_by_one.queue.total)
