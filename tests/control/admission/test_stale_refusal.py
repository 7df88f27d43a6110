"""A request that waited too long to be read is refused before its tensors are decoded.

Under overload requests wait in the kernel and the frontend before they are read; the frontend
screens each with what it knows from its parameters (its deadline, `Controller.screen`), so a
stale request costs no decode and no admission. It is refused as `LATE` only if even one row
cannot make it. Times are seconds, written as milliseconds (`ms(10)`); the clock is injected.
"""

from __future__ import annotations

from headway.clock import ManualClock
from headway.control.admission.reasons import LATE
from headway.control.admission.unread import UnreadRefusals
from headway.control.request import InferenceRequest
from headway.control.scheduling.scheduler import Scheduler
from tests.control.helpers import ms, over, scheduler, seed


def measured(clock: ManualClock, one_row: float) -> tuple[Scheduler, UnreadRefusals]:
    s = scheduler(clock, {1: ["m"]}, max_batch=64)
    seed(s, "m", {1: one_row})
    return s, over(s, clock, inline=False)


def unread(arrived: float) -> InferenceRequest:
    return InferenceRequest("m", timeout=ms(50), arrival=arrived)


def test_a_request_whose_deadline_passed_while_it_waited_to_be_read_is_refused(
    clock: ManualClock,
) -> None:
    _, refusals = measured(clock, ms(2))
    arrived = clock.now()
    clock.advance(ms(60))  # waited 60 ms to be read, with a 50 ms SLO
    assert refusals.screen(unread(arrived)) is LATE
    assert "waited 60.0 ms to be read" in LATE.message("m", ms(60))


def test_a_request_left_less_than_one_rows_run_is_refused(clock: ManualClock) -> None:
    s, refusals = measured(clock, ms(5))
    need = s.durations.service_time("m", 1)
    assert need is not None
    arrived = clock.now()
    clock.advance(ms(50) - need / 2)  # time left: half of what one row needs
    assert refusals.screen(unread(arrived)) is LATE


def test_a_request_with_time_for_one_row_is_left_to_admission(clock: ManualClock) -> None:
    s, refusals = measured(clock, ms(5))
    need = s.durations.service_time("m", 1)
    assert need is not None
    arrived = clock.now()
    clock.advance(ms(50) - 2 * need)  # time left: twice what one row needs
    assert refusals.screen(unread(arrived)) is None


def test_a_model_never_measured_refuses_only_what_is_already_late(clock: ManualClock) -> None:
    refusals = over(scheduler(clock, {1: ["m"]}, max_batch=8), clock, inline=False)
    arrived = clock.now()
    clock.advance(ms(49))
    assert refusals.screen(unread(arrived)) is None
    clock.advance(ms(1))
    assert refusals.screen(unread(arrived)) is LATE
