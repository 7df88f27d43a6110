"""The manual clock's timers: they run when the clock is moved past them, in time order, each
at its own time, and a cancelled one never runs."""

from __future__ import annotations

import pytest

from headway.clock import ManualClock


def test_timers_run_in_time_order_at_their_own_time_when_the_clock_moves() -> None:
    clock = ManualClock()
    ran: list[tuple[str, float]] = []
    clock.call_at(0.3, lambda: ran.append(("late", clock.now())))
    clock.call_at(0.1, lambda: ran.append(("early", clock.now())))
    cancelled = clock.call_at(0.2, lambda: ran.append(("cancelled", clock.now())))
    cancelled.cancel()
    clock.advance(0.05)
    assert ran == []
    clock.set(0.3)
    assert ran == [("early", 0.1), ("late", 0.3)]
    assert clock.now() == 0.3 and clock.next_timer() is None


def test_a_timer_set_by_a_timer_runs_in_the_same_move_when_it_falls_due() -> None:
    clock = ManualClock()
    ran: list[float] = []

    def again() -> None:
        ran.append(clock.now())
        if len(ran) < 3:
            clock.call_at(clock.now() + 0.1, again)

    clock.call_at(0.1, again)
    clock.advance(0.25)
    assert ran == pytest.approx([0.1, 0.2])
    assert clock.next_timer() == pytest.approx(0.3)
    assert clock.run_next() and len(ran) == 3
    assert not clock.run_next()


def test_run_next_runs_only_a_timer_due_by_its_bound_passing_cancelled_ones() -> None:
    clock = ManualClock()
    ran: list[tuple[str, float]] = []
    clock.call_at(0.1, lambda: ran.append(("cancelled", clock.now()))).cancel()
    clock.call_at(0.2, lambda: ran.append(("due", clock.now())))
    clock.call_at(0.5, lambda: ran.append(("later", clock.now())))
    assert not clock.run_next(0.15) and ran == [] and clock.now() == 0.0
    assert clock.run_next(0.2) and ran == [("due", 0.2)]
    assert not clock.run_next(0.4) and clock.now() == 0.2
    assert clock.run_next() and ran[-1] == ("later", 0.5)
    assert not clock.run_next()
