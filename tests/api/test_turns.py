"""`api.turns.ReadTurns`: when a read's bytes count from, and catching up in a long turn."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headway.api.turns import BACK_TO_BACK_S, CATCH_UP_S, ReadTurns


class Loop:
    def __init__(self) -> None:
        self.soon: list[Callable[[], None]] = []

    def call_soon(self, callback: Callable[[], None]) -> None:
        self.soon.append(callback)

    def end_turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


class App:
    def __init__(self) -> None:
        self.catch_ups = 0
        self.loop_held_until = float("-inf")  # when a model's run on the loop last ended

    def catch_up(self) -> None:
        self.catch_ups += 1


class Turns(ReadTurns):
    def __init__(self) -> None:
        self.loop: Any = Loop()
        self.app: Any = App()


def test_reads_after_a_pause_count_from_now_and_back_to_back_turns_from_the_last_start() -> None:
    turns = Turns()
    assert turns.arrived_since(100.0) == 100.0
    assert turns.arrived_since(100.004) == 100.0  # the same turn
    turns.loop.end_turn()
    ended = turns._turn_ended
    back_to_back = ended + BACK_TO_BACK_S / 2
    assert turns.arrived_since(back_to_back) == 100.0  # may have waited since the last turn began
    turns.loop.end_turn()
    later = turns._turn_ended + 1.0
    assert turns.arrived_since(later) == later  # the loop was idle: it woke for these bytes


def test_reads_after_a_model_ran_on_the_loop_count_from_the_turn_before_it() -> None:
    # The inline engine runs a batch between two turns of reads: what is read after it may
    # have waited in the kernel all through the run, so it is not fresh (it was, before).
    turns = Turns()
    assert turns.arrived_since(100.0) == 100.0
    turns.loop.end_turn()
    ran_until = turns._turn_ended + 0.020  # a 20 ms batch, then the next turn's reads
    turns.app.loop_held_until = ran_until
    read = ran_until + BACK_TO_BACK_S / 2
    assert turns.arrived_since(read) == 100.0
    turns.loop.end_turn()
    idle = max(turns._turn_ended, ran_until) + 1.0  # then a pause: the loop woke for them
    assert turns.arrived_since(idle) == idle


def test_the_first_read_after_a_model_ran_on_the_loop_counts_from_now() -> None:
    # No turn of reads before it bounds its wait: it is not made as old as the clock (a
    # server's first request, read just after its warm-up's last run, was refused as late).
    turns = Turns()
    turns.app.loop_held_until = 100.0
    read = 100.0 + BACK_TO_BACK_S / 2
    assert turns.arrived_since(read) == read
    turns.loop.end_turn()
    turns.app.loop_held_until = turns._turn_ended + 0.020
    after = turns.app.loop_held_until + BACK_TO_BACK_S / 2
    assert turns.arrived_since(after) == read  # from here on, the turn before bounds it


def test_a_long_turn_lets_the_app_catch_up_every_catch_up_interval() -> None:
    turns = Turns()
    turns.arrived_since(10.0)
    turns.keep_up(10.0 + CATCH_UP_S / 2)
    assert turns.app.catch_ups == 0
    turns.keep_up(10.0 + CATCH_UP_S * 1.01)
    turns.keep_up(10.0 + CATCH_UP_S * 1.5)
    assert turns.app.catch_ups == 1
    turns.keep_up(10.0 + CATCH_UP_S * 2.02)
    assert turns.app.catch_ups == 2
