"""The streaming load's reading and figures (`headway.loadgen.streams`), without a server:
events split anywhere across reads, stamped with the time given, and the figures of a set of
records with known times."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest

from headway.loadgen.client import Target
from headway.loadgen.streams import (
    FAILED,
    OK,
    REJECTED,
    EventReader,
    StreamLoad,
    StreamRecord,
    summarize,
)


def event(document: object) -> bytes:
    return b"data: " + orjson.dumps(document) + b"\n\n"


def completion(text: str) -> bytes:
    return event({"object": "text_completion", "choices": [{"index": 0, "text": text}]})


def test_each_part_is_stamped_when_its_event_is_whole_wherever_the_reads_split() -> None:
    record = StreamRecord(scheduled=10.0)
    events = EventReader(record)
    wire = completion("one ") + completion("two ") + completion("three ") + b"data: [DONE]\n\n"
    first, rest = wire[:30], wire[30:]  # the first event is not whole in the first read
    events.feed(first, 10.5)
    assert record.parts == 0
    events.feed(rest[:-20], 11.0)  # the first two whole, the third's end still to come
    events.feed(rest[-20:], 13.0)
    events.end(200)
    assert (record.parts, record.first, record.last, record.outcome) == (3, 11.0, 13.0, OK)
    assert record.ttft == 1.0 and record.tpot == 1.0


def test_chat_deltas_and_generate_events_count_their_text_only() -> None:
    record = StreamRecord(scheduled=0.0)
    events = EventReader(record)
    role = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    events.feed(event(role), 1.0)  # OpenAI's first chat chunk carries no text
    events.feed(event({"choices": [{"index": 0, "delta": {"content": "hi"}}]}), 2.0)
    events.feed(event({"model_name": "m", "text_output": "there"}), 4.0)
    events.feed(event({"choices": [], "usage": {"completion_tokens": 2}}), 5.0)
    events.end(200)
    assert (record.parts, record.first, record.last) == (2, 2.0, 4.0)
    assert record.tpot == 2.0


def test_an_error_event_fails_the_stream_and_a_refusal_is_counted_apart() -> None:
    broken = StreamRecord(scheduled=0.0)
    events = EventReader(broken)
    events.feed(completion("one ") + event({"error": {"message": "model 'spell' failed"}}), 1.0)
    events.end(200)
    assert (broken.outcome, broken.error) == (FAILED, "model 'spell' failed")
    triton = StreamRecord(scheduled=0.0)
    events = EventReader(triton)
    events.feed(event({"error": "model 'spell' failed"}), 1.0)
    events.end(200)
    assert (triton.outcome, triton.error) == (FAILED, "model 'spell' failed")
    refused = StreamRecord(scheduled=0.0)
    EventReader(refused).end(503)
    assert (refused.outcome, refused.error) == (REJECTED, "HTTP 503")


def finished(scheduled: float, first: float, last: float, parts: int) -> StreamRecord:
    return StreamRecord(scheduled, sent=scheduled, first=first, last=last, parts=parts, outcome=OK)


def test_the_figures_of_the_streams_scheduled_in_the_window_against_both_targets() -> None:
    records = [
        finished(0.5, 0.6, 0.9, 4),  # before the window: not counted
        finished(1.0, 1.1, 1.4, 4),  # ttft 100 ms, tpot 100 ms: meets both
        finished(2.0, 2.5, 2.8, 4),  # ttft 500 ms: misses the first-part target
        finished(3.0, 3.1, 4.0, 4),  # tpot 300 ms: misses the per-part target
        StreamRecord(4.0, sent=4.0, outcome=REJECTED, error="HTTP 503"),
    ]
    figures = summarize(records, (1.0, 5.0), ttft_ms=200.0, tpot_ms=150.0)
    assert (figures["requests"], figures["completed"], figures["rejected"]) == (4, 3, 1)
    assert figures["parts"] == 12 and figures["parts_per_s"] == 3.0
    assert figures["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert figures["ttft_ms"]["max"] == pytest.approx(500.0)
    assert figures["tpot_ms"]["max"] == pytest.approx(300.0)
    assert figures["slo_attainment"] == 0.25 and figures["goodput_rps"] == 0.25
    assert figures["errors"] == {"HTTP 503": 1}
    no_targets = summarize(records, (1.0, 5.0), ttft_ms=None, tpot_ms=None)
    assert no_targets["slo_attainment"] == 0.75  # every stream that ended well


def test_a_server_that_answers_no_connect_fails_each_stream_within_the_timeout() -> None:
    """A server whose listen queue is full drops new connects: each stream fails at the load's
    timeout, and the load ends, rather than waiting for the kernel's retries."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)  # never accepted: the queue holds one connect, the rest get no answer
    address = server.getsockname()
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(address)
        fillers.append(filler)
    target = Target.parse(f"http://{address[0]}:{address[1]}")
    load = StreamLoad(target, "/v1/completions", [b"{}"], timeout=0.5, max_connections=1)
    try:
        records = asyncio.run(asyncio.wait_for(load.open([0.0, 0.0, 0.0]), 30.0))
    finally:
        for filler in fillers:
            filler.close()
        server.close()
    assert [r.outcome for r in records] == [FAILED] * 3
    assert (records[0].error or "").startswith("TimeoutError")  # the last may be cut at the end
