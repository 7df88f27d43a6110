"""A streamed answer's events for ASGI and RSGI servers (`api.event_pump`): sent in order as
they come, bounded while the client reads slowly, ended in error when idle, withdrawn when the
client goes."""

from __future__ import annotations

import asyncio

from headway.api.event_pump import EventPump
from headway.api.sse import EventStream


class Withdrawn:
    def __init__(self) -> None:
        self.times = 0

    def __call__(self) -> None:
        self.times += 1


def stream(withdrawn: Withdrawn) -> EventStream:
    return EventStream(
        on_cancel=withdrawn, error_event=lambda message: b"error: " + message.encode()
    )


async def read(pump: EventPump) -> list[bytes]:
    return [data async for data in pump.pieces()]


def test_events_before_and_after_the_server_reads_come_out_in_order() -> None:
    async def run() -> list[bytes]:
        withdrawn = Withdrawn()
        events = stream(withdrawn)
        events.send(b"a")  # before the server attached
        pump = EventPump(events)
        reading = asyncio.ensure_future(read(pump))
        await asyncio.sleep(0)
        events.send(b"b")
        events.send(b"c")
        events.end(b"d")
        got = await reading
        assert withdrawn.times == 0
        return got

    assert b"".join(asyncio.run(run())) == b"abcd"


def test_a_client_that_leaves_events_waiting_past_the_limit_is_cut_off() -> None:
    async def run() -> None:
        withdrawn = Withdrawn()
        events = stream(withdrawn)
        pump = EventPump(events, limit=10)
        events.send(b"12345")
        events.send(b"67890")  # at the limit: kept
        assert pump.size == 10 and withdrawn.times == 0
        events.send(b"x")  # past it: dropped, the stream ended in error
        assert withdrawn.times == 1 and events.ended
        got = await read(pump)
        assert len(got) == 1 and got[0].startswith(b"error: the stream was cut off: it left 11")
        events.send(b"late")  # nothing after the end
        assert pump.queued == []

    asyncio.run(run())


def test_a_stream_that_sends_nothing_ends_with_an_error_event() -> None:
    async def run() -> None:
        withdrawn = Withdrawn()
        events = stream(withdrawn)
        got = await asyncio.wait_for(read(EventPump(events, idle=0.01)), 5)
        assert got == [b"error: the stream sent nothing for 0.01 s (--stream-idle-timeout)"]
        assert withdrawn.times == 1

    asyncio.run(run())


def test_a_client_that_goes_away_withdraws_the_request_and_ends_the_reading() -> None:
    async def run() -> None:
        withdrawn = Withdrawn()
        events = stream(withdrawn)
        pump = EventPump(events)
        reading = asyncio.ensure_future(read(pump))
        events.send(b"a")
        await asyncio.sleep(0)
        pump.gone()
        await asyncio.wait_for(reading, 5)
        assert withdrawn.times == 1 and events.cancelled
        pump.gone()
        assert withdrawn.times == 1  # once

    asyncio.run(run())
