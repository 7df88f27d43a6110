"""Which idle connections `closing.reclaim` closes at the connection cap."""

from __future__ import annotations

from dataclasses import dataclass

from headway.api.closing import reclaim


@dataclass
class Idle:
    last_active: float
    proven: bool = True
    reclaimable: bool = True
    closed: bool = False

    def close(self) -> None:
        self.closed = True


def test_a_socket_that_never_sent_a_request_goes_before_a_client_between_requests() -> None:
    client = Idle(last_active=1.0)  # answered a request, idle since 1.0
    holder = Idle(last_active=5.0, proven=False)  # connected at 5.0, nothing but blank lines
    assert reclaim([client, holder]) == [holder]
    assert holder.closed and not client.closed


def test_among_alike_the_longest_idle_goes_first_and_busy_ones_never() -> None:
    busy = Idle(last_active=0.0, reclaimable=False)
    old, new = Idle(last_active=1.0), Idle(last_active=2.0)
    assert reclaim([new, busy, old]) == [old]
    assert reclaim([busy]) == []
