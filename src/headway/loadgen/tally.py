"""The raw record of a run: counts and latency samples, filled in by the hot loop."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(repr=False)
class LoadTally:
    """Raw counts and samples of one run; ``headway.loadgen.report`` turns them into figures."""

    latencies: list[float] = field(default_factory=list)  # seconds, 200 answers in the window
    lateness: list[float] = field(default_factory=list)  # open loop: send time - scheduled time
    # open loop: when the generator got to each request (to send it, or to queue it for a
    # connection) less its scheduled time: its own lateness, without the waits for a connection
    own_lateness: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)  # non-200 answers in the window
    rejected: int = 0  # 429 or 503 in the window
    rejections: list[float] = field(default_factory=list)  # seconds until each 429/503 came
    errors: int = 0  # any other non-200 in the window
    transport_errors: int = 0  # no HTTP answer: connection refused, reset or unparseable
    timeouts: int = 0  # still unanswered when the drain timeout ran out
    capped: int = 0  # open loop: could not go out on schedule because of max_connections
    expired: int = 0  # deadline propagation: not sent, its deadline passed in the client
    scheduled: int = 0  # requests in the window (open loop: scheduled; closed: sent)
    sent: int = 0  # all requests written, warm-up included
    answered: int = 0  # all answers read, warm-up included
    connections: int = 0  # open now
    peak_connections: int = 0
    elapsed: float = 0.0  # seconds since the start

    @property
    def ok(self) -> int:
        return len(self.latencies)

    def __repr__(self) -> str:  # short: asyncio reprs a finished task's result
        return (
            f"LoadTally(ok={self.ok}, rejected={self.rejected}, errors={self.errors}, "
            f"transport_errors={self.transport_errors}, timeouts={self.timeouts})"
        )
