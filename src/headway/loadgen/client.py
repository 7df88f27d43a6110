"""Run a load: where to send, the pre-encoded requests, and one run's start and end.

``run`` opens the connections, starts the clock and hands over to ``headway.loadgen.pool``,
whose callbacks send and count; then it waits for the last answers (until ``drain_timeout``
after the window's scheduled end) and closes everything.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from urllib.parse import urlsplit

import numpy as np
import uvloop

from headway.loadgen.pool import Driver, LoadConnection
from headway.loadgen.tally import LoadTally
from headway.loadgen.workload import Body

__all__ = ["LoadTally", "Target", "http_request", "run"]


@dataclass(frozen=True)
class Target:
    """Where to send: host, port and any path prefix of an ``http://`` or ``https://`` base
    URL; for https, the TLS context its connections use; the token each request carries."""

    host: str
    port: int
    prefix: str = ""
    tls: ssl.SSLContext | None = field(default=None, compare=False)
    token: str | None = None

    @classmethod
    def parse(cls, url: str, *, token: str | None = None, ca: Path | None = None) -> Target:
        """`url`'s target; `token`: the server's inference token, sent with every request;
        `ca`: a PEM file of the authorities an https server's certificate may be signed by
        (default: the system's)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s)://host[:port] URL")
        tls = None
        if parts.scheme == "https":
            tls = ssl.create_default_context(cafile=None if ca is None else str(ca))
            tls.set_alpn_protocols(["http/1.1"])
        default_port = 443 if tls else 80
        return cls(parts.hostname, parts.port or default_port, parts.path.rstrip("/"), tls, token)

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """httpx's `verify` for the requests made beside the load (the model's metadata)."""
        return self.tls if self.tls is not None else True

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}

    def infer_path(self, model: str, version: str | None = None) -> str:
        return (
            f"{self.prefix}/v2/models/{model}"
            + (f"/versions/{version}" if version else "")
            + "/infer"
        )


def http_request(target: Target, path: str, body: Body) -> bytes:
    """A complete HTTP/1.1 POST, headers and body, ready to write to a socket."""
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: {target.host}:{target.port}",
        "User-Agent: headway-bench",
        f"Content-Length: {len(body.payload)}",
    ]
    if target.token:
        head.append(f"Authorization: Bearer {target.token}")
    if body.header_length is None:
        head.append("Content-Type: application/json")
    else:
        head.append("Content-Type: application/octet-stream")
        head.append(f"Inference-Header-Content-Length: {body.header_length}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body.payload


def run(
    target: Target,
    requests: list[bytes],
    *,
    duration: float,
    warmup: float = 1.0,
    concurrency: int | None = None,
    schedule: np.ndarray | None = None,
    max_connections: int = 1024,
    drain_timeout: float = 10.0,
    progress: Callable[[LoadTally], None] | None = None,
    progress_interval: float = 0.25,
    deadline_s: float | None = None,
) -> LoadTally:
    """Load ``target`` with ``requests`` (rotated) and count what comes back.

    Exactly one of ``concurrency`` (closed loop) and ``schedule`` (open loop: send offsets in
    seconds covering ``warmup + duration``, see ``headway.loadgen.arrivals``) is given. The run
    stops ``drain_timeout`` seconds after the window's scheduled end (``warmup + duration``):
    answers still missing then, and sends a lagging client had not made by then, count as
    timeouts (the send lateness in the tally shows whether the client kept up). Raises
    ConnectionError when no connection to the target can be opened at all.

    ``deadline_s`` (open loop; every request's JSON body carries ``parameters.slo_ms``)
    propagates each request's deadline, ``deadline_s`` after its scheduled time: one sent late
    carries the milliseconds it has left as its ``slo_ms``, and one with none left is not sent
    (``expired``), as a gRPC client does with its deadline (``headway.loadgen.deadlines``).
    """
    if (concurrency is None) == (schedule is None):
        raise ValueError("give exactly one of concurrency (closed loop) and schedule (open loop)")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if not requests:
        raise ValueError("no requests to send")
    if deadline_s is not None and (schedule is None or deadline_s <= 0):
        raise ValueError("deadline propagation needs an open loop (a schedule) and a deadline > 0")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(
            _run(
                target,
                requests,
                duration,
                warmup,
                concurrency,
                schedule,
                max_connections,
                drain_timeout,
                progress,
                progress_interval,
                deadline_s,
            )
        )


async def _run(
    target: Target,
    requests: list[bytes],
    duration: float,
    warmup: float,
    concurrency: int | None,
    schedule: np.ndarray | None,
    max_connections: int,
    drain_timeout: float,
    progress: Callable[[LoadTally], None] | None,
    progress_interval: float,
    deadline_s: float | None,
) -> LoadTally:
    loop = asyncio.get_running_loop()
    d = Driver(
        target.host, target.port, requests, concurrency, schedule, max_connections, deadline_s,
        target.tls,
    )  # fmt: skip
    initial = concurrency if concurrency is not None else min(max_connections, 8)
    opened = await asyncio.gather(
        *(
            loop.create_connection(
                lambda: LoadConnection(d), target.host, target.port, ssl=target.tls
            )
            for _ in range(initial)
        ),
        return_exceptions=True,
    )
    for result in opened:
        if isinstance(result, BaseException):
            if not isinstance(result, OSError):
                raise result
        else:
            d.conns.add(result[1])
    if not d.conns:
        error = next(r for r in opened if isinstance(r, BaseException))
        raise ConnectionError(f"cannot connect to {target.host}:{target.port}: {error}")
    d.tally.peak_connections = len(d.conns)

    d.start = perf_counter()
    d.window_start = d.start + warmup
    d.end = d.window_start + duration
    if concurrency is not None:
        for conn in list(d.conns):
            d.dispatch(conn, d.start)
        loop.call_later(warmup + duration, d.check_done)
    else:
        d.idle.extend(d.conns)
        assert schedule is not None
        due = d.start + schedule  # the same float sums as the pool's, so the same window
        d.tally.scheduled = int(np.count_nonzero((due >= d.window_start) & (due < d.end)))
        d.next_time = d.start + d.offsets[0] if d.offsets else float("inf")
        d.tick()
    stopper = loop.call_later(warmup + duration + drain_timeout, d.stop)

    def report() -> None:
        if not d.done.done() and progress is not None:
            progress(d.snapshot())
            loop.call_later(progress_interval, report)

    if progress is not None:
        loop.call_later(progress_interval, report)
    await d.done
    stopper.cancel()
    d.stopping = True
    for conn in list(d.conns):
        transport, conn.transport = conn.transport, None
        if transport is not None:
            transport.close()
    tally = d.snapshot()
    tally.elapsed = perf_counter() - d.start
    d.conns.clear()
    return tally
