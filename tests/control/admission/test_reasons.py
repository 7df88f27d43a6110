"""One vocabulary of refusals (`control.admission.reasons`): each reason named once, counted
under the name /metrics shows, and said to the client in words it can act on."""

from __future__ import annotations

from dataclasses import fields

from headway.api.metrics import _EVENTS
from headway.control.actions import Counters
from headway.control.admission.reasons import (
    BACKLOG,
    DROPPED,
    LATE,
    REFUSALS,
    REFUSED_BY_WORKER,
    REFUSED_UNREAD,
    REJECTED_AT_ADMISSION,
    SHED,
)
from headway.errors import DeadlineUnmeetable, Shed


def test_every_place_a_request_is_refused_is_a_counter_and_a_metrics_family() -> None:
    stages = {REFUSED_UNREAD, REJECTED_AT_ADMISSION, DROPPED, REFUSED_BY_WORKER}
    assert stages <= {f.name for f in fields(Counters)}
    assert stages <= {event for event, _, _ in _EVENTS}


def test_each_refusal_before_decoding_has_one_name_and_the_error_a_caller_raises() -> None:
    assert [r.reason for r in REFUSALS] == ["late", "backlog", "shed"]
    assert isinstance(LATE.refuse("m"), DeadlineUnmeetable)
    assert isinstance(BACKLOG.refuse("m"), DeadlineUnmeetable)
    assert isinstance(SHED.refuse("m"), Shed)
    assert SHED.refuse("m").reason == "shed" and LATE.refuse("m").reason == "deadline"


def test_a_late_refusal_says_how_long_the_request_waited_when_it_is_known() -> None:
    assert LATE.message("m") == (
        "model 'm': deadline cannot be met: the request waited too long to be read (the "
        "server is overloaded); retry with backoff, or raise the timeout or slo_ms"
    )
    assert "waited 60.0 ms to be read" in LATE.message("m", 0.060)
    assert "{waited}" not in BACKLOG.message("m", 0.060)
