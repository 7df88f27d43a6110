"""A request that waited too long to be read is refused before its tensors are decoded.

Under overload requests wait in the kernel and the frontend before they are read; the frontend
asks `admit_unread` with what it knows from the request's parameters (its deadline), so a stale
request costs no decode and no admission. It is refused only if even one row cannot make it.
Times are seconds, written as milliseconds (`ms(10)`); the clock is injected.
"""

from __future__ import annotations

import pytest

from headway.clock import ManualClock
from headway.control.admission import admit_unread
from headway.control.scheduler import Scheduler
from headway.errors import DeadlineUnmeetable
from tests.control.helpers import ms, scheduler, seed


def measured(clock: ManualClock, one_row: float) -> Scheduler:
    s = scheduler(clock, {1: ["m"]}, max_batch=64)
    seed(s, "m", {1: one_row})
    return s


def test_a_request_whose_deadline_passed_while_it_waited_to_be_read_is_refused(
    clock: ManualClock,
) -> None:
    s = measured(clock, ms(2))
    arrived = clock.now()
    clock.advance(ms(60))  # waited 60 ms to be read, with a 50 ms SLO
    with pytest.raises(DeadlineUnmeetable, match=r"waited 60\.0 ms to be read.*0\.00 ms left"):
        admit_unread("m", arrived + ms(50), now=clock.now(), waited=ms(60),
                     predictions=s.predictions)  # fmt: skip


def test_a_request_left_less_than_one_rows_run_is_refused(clock: ManualClock) -> None:
    s = measured(clock, ms(5))
    need = s.predictions.service_time("m", 1)
    assert need is not None
    arrived = clock.now()
    clock.advance(ms(50) - need / 2)  # time left: half of what one row needs
    with pytest.raises(DeadlineUnmeetable, match="to be read"):
        admit_unread("m", arrived + ms(50), now=clock.now(), waited=ms(50) - need / 2,
                     predictions=s.predictions)  # fmt: skip


def test_a_request_with_time_for_one_row_is_left_to_admission(clock: ManualClock) -> None:
    s = measured(clock, ms(5))
    need = s.predictions.service_time("m", 1)
    assert need is not None
    arrived = clock.now()
    clock.advance(ms(50) - 2 * need)  # time left: twice what one row needs
    admit_unread("m", arrived + ms(50), now=clock.now(), waited=ms(50) - 2 * need,
                 predictions=s.predictions)  # fmt: skip


def test_a_model_never_measured_refuses_only_what_is_already_late(clock: ManualClock) -> None:
    s = scheduler(clock, {}, sizes={"new": 0.0}, max_batch=8)
    arrived = clock.now()
    clock.advance(ms(49))
    admit_unread("new", arrived + ms(50), now=clock.now(), waited=ms(49),
                 predictions=s.predictions)  # fmt: skip
    clock.advance(ms(1))
    with pytest.raises(DeadlineUnmeetable, match="is already late"):
        admit_unread("new", arrived + ms(50), now=clock.now(), waited=ms(50),
                     predictions=s.predictions)  # fmt: skip
