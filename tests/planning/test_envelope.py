"""Traffic envelopes: the most arrivals in any window of each length."""

from __future__ import annotations

import numpy as np
import pytest

from headway.planning.envelope import envelope, max_count, window_lengths


def test_window_lengths_double_up_to_a_minute() -> None:
    assert window_lengths(0.01, 0.1) == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.1])
    assert window_lengths(5.0)[-1] == 60.0
    with pytest.raises(ValueError, match="positive"):
        window_lengths(0.0)


def test_max_count_is_the_densest_half_open_window() -> None:
    times = np.array([0.0, 1.0, 1.1, 1.2, 1.3, 5.0])
    assert max_count(times, 0.3) == 3  # [1.0, 1.3) holds 1.0, 1.1, 1.2
    assert max_count(times, 0.31) == 4
    assert max_count(times, 10.0) == 6
    assert max_count(np.array([]), 1.0) == 0


def test_a_burst_shows_in_short_windows_only() -> None:
    steady = np.arange(480) / 8.0  # 8 per second for a minute (exact binary fractions)
    burst = np.sort(np.concatenate([steady, 30.0 + np.arange(20) / 1024.0]))  # 20 in 20 ms
    lengths = [0.125, 1.0, 60.0]
    calm, bursty = envelope(steady, lengths), envelope(burst, lengths)
    assert calm == pytest.approx({0.125: 8.0, 1.0: 8.0, 60.0: 8.0})
    assert bursty[0.125] == pytest.approx(21 / 0.125)  # the burst and one steady arrival
    assert bursty[1.0] == pytest.approx(28.0)
    assert bursty[60.0] == pytest.approx(500 / 60.0)
