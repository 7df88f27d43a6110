"""Streaming load: requests answered as server-sent events, timed part by part.

`headway bench --stream` sends text-generation requests (OpenAI's `/v1/completions` with
`stream: true` by default, which Headway, vLLM and the peers' apps in bench/peers speak, or
Triton's `generate_stream`), closed loop (`concurrency` streams at once) or open loop (on an
arrival schedule), over raw keep-alive HTTP/1.1 connections: the head, each chunk, each event
is read as it comes and stamped, with no client library between the socket and the clock.

A part is an event that carries text (`choices[0].text`, `choices[0].delta.content` or
`text_output`). Per request: time to first part (TTFT, from its scheduled send time in open
loop, as latency is), time per part after it (TPOT: the mean gap from the first part to the
last), and parts. A request meets its targets when it ended well, its TTFT is within the
first-part target and its TPOT within the per-part target; DistServe's goodput is the highest
rate at which 90% do (`RateSearch`, as `--find-rate` does for whole answers).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from headway.loadgen.client import Target

OK, REJECTED, FAILED = "ok", "rejected", "failed"


@dataclass
class StreamRecord:
    """One request's record (times on `time.perf_counter`)."""

    scheduled: float
    sent: float = 0.0
    first: float | None = None
    last: float | None = None
    parts: int = 0
    outcome: str = FAILED
    error: str = ""

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.scheduled

    @property
    def tpot(self) -> float | None:
        if self.parts < 2 or self.first is None or self.last is None:
            return None
        return (self.last - self.first) / (self.parts - 1)


@dataclass
class StreamLoad:
    """Where to send and what: pre-encoded request bodies, rotated."""

    target: Target
    path: str
    bodies: list[bytes]
    timeout: float = 60.0
    max_connections: int = 1024
    records: list[StreamRecord] = field(default_factory=list)

    def request(self, body: bytes) -> bytes:
        headers = "".join(f"{k}: {v}\r\n" for k, v in self.target.headers.items())
        return (
            f"POST {self.target.prefix}{self.path} HTTP/1.1\r\nHost: {self.target.host}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def closed(self, concurrency: int, seconds: float) -> list[StreamRecord]:
        """`concurrency` streams at once for `seconds` (each starts as one ends)."""
        ends = time.perf_counter() + seconds
        wire = [self.request(body) for body in self.bodies]

        async def worker(number: int) -> None:
            connection: EventConnection | None = None
            sent = number
            while time.perf_counter() < ends:
                record = StreamRecord(time.perf_counter())
                self.records.append(record)
                connection = await self._exchange(connection, wire[sent % len(wire)], record)
                sent += concurrency
            if connection is not None:
                connection.close()

        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        return self.records

    async def open(self, schedule: list[float]) -> list[StreamRecord]:
        """One stream at each offset of `schedule` (seconds from now), on a pool of
        connections: an idle one if there is one, else a new one (up to max_connections)."""
        wire = [self.request(body) for body in self.bodies]
        idle: list[EventConnection] = []
        opened = 0
        start = time.perf_counter()
        running: set[asyncio.Task[None]] = set()
        freed = asyncio.Event()

        async def one(
            record: StreamRecord, data: bytes, connection: EventConnection | None
        ) -> None:
            nonlocal opened
            kept = await self._exchange(connection, data, record)
            if kept is None:
                opened -= 1  # closed (its stream failed, or the server said so): room for one
            else:
                idle.append(kept)
            freed.set()

        for number, offset in enumerate(schedule):
            due = start + offset
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            while not idle and opened >= self.max_connections:
                freed.clear()
                await freed.wait()
            connection = idle.pop() if idle else None
            if connection is None:
                opened += 1
            record = StreamRecord(due)
            self.records.append(record)
            task = asyncio.ensure_future(one(record, wire[number % len(wire)], connection))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.wait(running, timeout=self.timeout)
        for task in running:
            task.cancel()
        for connection in idle:
            connection.close()
        return self.records

    async def _exchange(
        self, connection: EventConnection | None, data: bytes, record: StreamRecord
    ) -> EventConnection | None:
        """Send one request and read its stream; the connection if it may be used again. The
        timeout holds from the connect on: a server whose listen queue is full answers no
        connect, and the load would wait for the kernel's retries instead."""
        try:
            async with asyncio.timeout(self.timeout):
                if connection is None:
                    connection = await EventConnection.open(self.target)
                record.sent = time.perf_counter()
                connection.writer.write(data)
                keep = await connection.read_stream(record)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            record.outcome, record.error = FAILED, f"{type(exc).__name__}: {exc}"
            if connection is not None:
                connection.close()
            return None
        if not keep:
            connection.close()
            return None
        return connection


class EventConnection:
    """One keep-alive HTTP/1.1 connection that reads answers as event streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, target: Target) -> EventConnection:
        reader, writer = await asyncio.open_connection(
            target.host, target.port, ssl=target.tls, limit=2**20
        )
        return cls(reader, writer)

    def close(self) -> None:
        self.writer.close()

    async def read_stream(self, record: StreamRecord) -> bool:
        """Read one answer into `record`; whether the connection may be kept."""
        reader = self.reader
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        keep = headers.get("connection") != "close"
        events = EventReader(record)
        if headers.get("transfer-encoding") == "chunked":
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await reader.readexactly(size + 2)
                if not size:
                    break
                events.feed(chunk[:-2], time.perf_counter())
        elif "content-length" in headers:
            events.feed(
                await reader.readexactly(int(headers["content-length"])), time.perf_counter()
            )
        else:
            keep = False
            while chunk := await reader.read(65536):
                events.feed(chunk, time.perf_counter())
        events.end(status)
        return keep


class EventReader:
    """A stream's bytes as events: each part stamped as it arrives."""

    __slots__ = ("buffer", "errored", "record")

    def __init__(self, record: StreamRecord) -> None:
        self.record = record
        self.buffer = b""
        self.errored = ""

    def feed(self, data: bytes, now: float) -> None:
        """The bytes read at `now` (perf_counter): each whole event in them counted."""
        buffer = self.buffer + data if self.buffer else data
        *events, self.buffer = buffer.split(b"\n\n")
        if not events:
            return
        record = self.record
        for raw in events:
            at = raw.find(b"data:")
            if at < 0:
                continue
            payload = raw[at + 5 :].strip()
            if payload == b"[DONE]":
                continue
            text, error = _read(payload)
            if error:
                self.errored = error
            elif text:
                record.parts += 1
                if record.first is None:
                    record.first = now
                record.last = now

    def end(self, status: int) -> None:
        record = self.record
        if status == 200 and not self.errored:
            record.outcome = OK
        elif status in (429, 503):
            record.outcome, record.error = REJECTED, f"HTTP {status}"
        else:
            record.outcome = FAILED
            record.error = self.errored or f"HTTP {status}: {self.buffer[:200]!r}"


def _read(payload: bytes) -> tuple[str, str]:
    """The text an event carries ("" for none) and its error's message ("" for none): OpenAI's
    `{"error": {"message": ...}}` or Triton's `{"error": "..."}`."""
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload.decode(errors="replace"), ""  # plain text events count as they are
    if not isinstance(document, dict):
        return str(document), ""
    if "error" in document:
        error = document["error"]
        message = error.get("message") if isinstance(error, dict) else error
        return "", str(message or payload[:200].decode(errors="replace"))
    if "text_output" in document:
        return str(document["text_output"] or ""), ""
    choices = document.get("choices") or ()
    if not choices:
        return "", ""
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or ""), ""
    return str(choice.get("text") or ""), ""


def summarize(
    records: list[StreamRecord],
    window: tuple[float, float],
    *,
    ttft_ms: float | None,
    tpot_ms: float | None,
) -> dict[str, Any]:
    """The figures of the streams scheduled inside `window` (start, end on perf_counter)."""
    start, end = window
    measured = [r for r in records if start <= r.scheduled < end]
    seconds = end - start
    ok = [r for r in measured if r.outcome == OK]
    ttfts = sorted(r.ttft * 1e3 for r in ok if r.ttft is not None)
    tpots = sorted(r.tpot * 1e3 for r in ok if r.tpot is not None)
    parts = sum(r.parts for r in measured)
    met = sum(1 for r in ok if _meets(r, ttft_ms, tpot_ms))
    lateness = sorted(max(0.0, (r.sent - r.scheduled) * 1e3) for r in measured if r.sent)
    errors: dict[str, int] = {}
    for r in measured:
        if r.outcome != OK:
            errors[r.error[:160]] = errors.get(r.error[:160], 0) + 1
    return {
        "duration_s": round(seconds, 3),
        "requests": len(measured),
        "completed": len(ok),
        "rejected": sum(1 for r in measured if r.outcome == REJECTED),
        "failed": sum(1 for r in measured if r.outcome == FAILED),
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
        "parts": parts,
        "parts_per_s": round(parts / seconds, 1) if seconds > 0 else 0.0,
        "requests_per_s": round(len(ok) / seconds, 2) if seconds > 0 else 0.0,
        "ttft_ms": _percentiles(ttfts),
        "tpot_ms": _percentiles(tpots),
        "parts_per_request": round(parts / len(measured), 1) if measured else 0.0,
        "ttft_target_ms": ttft_ms,
        "tpot_target_ms": tpot_ms,
        "slo_ms": ttft_ms,  # what `rate_search.judge` weighs the generator's lateness against
        "slo_attainment": round(met / len(measured), 4) if measured else None,
        "goodput_rps": round(met / seconds, 2) if seconds > 0 else 0.0,
        "own_send_lateness_ms": _percentiles(lateness),
    }


def _meets(record: StreamRecord, ttft_ms: float | None, tpot_ms: float | None) -> bool:
    ttft, tpot = record.ttft, record.tpot
    if ttft is None:
        return False
    if ttft_ms is not None and ttft * 1e3 > ttft_ms:
        return False
    return tpot_ms is None or tpot is None or tpot * 1e3 <= tpot_ms


def _percentiles(values: list[float]) -> dict[str, float | None]:
    def at(q: float) -> float | None:
        if not values:
            return None
        return round(values[min(len(values) - 1, math.ceil(q * len(values)) - 1)], 2)

    mean = round(sum(values) / len(values), 2) if values else None
    return {"mean": mean, "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1.0)}
