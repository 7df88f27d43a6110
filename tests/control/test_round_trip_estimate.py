"""The round trip every prediction adds keeps following the recent actions after its window
fills (it had stopped updating at the 64th action)."""

from headway.control.predictions import Predictions


def test_the_round_trip_estimate_follows_new_actions_after_its_window_is_full() -> None:
    predictions = Predictions(overhead_window=64)
    for _ in range(200):
        predictions.observe_round_trip(0.001)
    assert predictions.overhead == 0.001
    for _ in range(64):
        predictions.observe_round_trip(0.004)
    assert predictions.overhead == 0.004


def test_a_slow_action_leaves_the_estimate_once_it_leaves_the_window() -> None:
    predictions = Predictions(overhead_window=10)
    for seconds in (0.001,) * 8 + (0.050,):
        predictions.observe_round_trip(seconds)
    assert predictions.overhead > 0.001
    for _ in range(15):  # recomputed every 8th action: the 25th sees only these
        predictions.observe_round_trip(0.002)
    assert predictions.overhead == 0.002
