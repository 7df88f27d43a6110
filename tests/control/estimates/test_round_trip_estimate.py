"""The round trip every prediction adds keeps following the recent actions: after its window
fills (it had stopped updating at the 64th action), and after a burst of slow ones when
nothing runs any more (it had refused a tight-deadline model for ever)."""

import pytest

from headway.clock import ManualClock
from headway.control.estimates.durations import ROUND_TRIP_MEMORY_S, Durations
from headway.errors import DeadlineUnmeetable
from tests.control.helpers import ms, request, scheduler, seed


def test_the_round_trip_estimate_follows_new_actions_after_its_window_is_full() -> None:
    durations = Durations(overhead_window=64)
    for _ in range(200):
        durations.observe_round_trip(0.001, 0.0)
    assert durations.overhead == 0.001
    for _ in range(64):
        durations.observe_round_trip(0.004, 0.0)
    assert durations.overhead == 0.004


def test_a_slow_action_leaves_the_estimate_once_it_leaves_the_window() -> None:
    durations = Durations(overhead_window=10)
    for seconds in (0.001,) * 8 + (0.050,):
        durations.observe_round_trip(seconds, 0.0)
    assert durations.overhead > 0.001
    for _ in range(15):  # recomputed every 8th action: the 25th sees only these
        durations.observe_round_trip(0.002, 0.0)
    assert durations.overhead == 0.002


def test_slow_round_trips_refuse_a_tight_model_only_while_they_are_recent(
    clock: ManualClock,
) -> None:
    """tests/integration/test_client.py on a busy machine: `quick` (1 ms runs, a 150 ms SLO)
    shares a worker with `m`, whose last actions came back ~300 ms after they could start (a
    neighbour's stall). Then nothing ran: quick's requests were refused ("needs ~301 ms"), and a
    refused request never runs to measure the round trip again, so it was refused for ever,
    however long the client waited between its tries."""
    s = scheduler(clock, {1: ["m", "quick"]})
    seed(s, "quick", {1: ms(1)})
    for i in range(10):
        s.submit(request(clock, f"m{i}", 1.0))
        [dispatch] = s.poll().dispatches
        clock.advance(ms(301))
        s.complete(dispatch.id, ms(1))
    assert s.durations.overhead == pytest.approx(ms(300))
    stalled_until = clock.now()

    with pytest.raises(DeadlineUnmeetable, match="needs ~301"):
        s.submit(request(clock, "q1", ms(150), "quick"))
    clock.advance(ms(250))  # the client's first backoff: they are recent, they still count
    with pytest.raises(DeadlineUnmeetable, match="needs ~301"):
        s.submit(request(clock, "q2", ms(150), "quick"))
    # a second after the last slow one: weighed without them, admitted and run, measured
    clock.set(stalled_until + ROUND_TRIP_MEMORY_S + ms(1))
    s.submit(request(clock, "q3", ms(150), "quick"))
    assert s.durations.overhead == 0.0
    [dispatch] = s.poll().dispatches
    clock.advance(ms(3))
    s.complete(dispatch.id, ms(1))
    assert s.durations.overhead == pytest.approx(ms(2))  # the round trip measured now


def test_only_round_trips_older_than_the_memory_are_forgotten() -> None:
    durations = Durations(overhead_window=64)
    for i in range(10):  # slow ones at 0.0 .. 0.9 s, then quick ones at 1.0 .. 1.9 s
        durations.observe_round_trip(0.3, i / 10)
    for i in range(10, 20):
        durations.observe_round_trip(0.002, i / 10)
    assert durations.overhead == 0.3
    assert not durations.forget_stale_round_trips(ROUND_TRIP_MEMORY_S)  # none that old
    assert durations.forget_stale_round_trips(1.0 + ROUND_TRIP_MEMORY_S)
    assert durations.overhead == 0.002
    assert durations.forget_stale_round_trips(10.0)
    assert durations.overhead == 0.0
    durations.observe_round_trip(0.004, 10.0)  # the first one after: counted at once
    assert durations.overhead == 0.004
