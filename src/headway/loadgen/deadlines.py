"""Deadline propagation: a request sent late carries the time it has left, not its whole SLO.

An open-loop client whose connections are all busy queues its requests; one sent after
waiting there has already spent part of its deadline, but a body that says
`parameters.slo_ms = 50` gives the server the whole 50 ms again, so the server serves as fresh
what is already late at the client. gRPC clients send the time left (`grpc-timeout`) and fail
at once a call whose deadline passed before it was sent; `Late` does the same with the
pre-encoded HTTP requests of `headway.loadgen`: a request sent more than `SLACK_S` after its
scheduled time is rewritten with the milliseconds it has left, and one with none left is not
sent.
"""

from __future__ import annotations

import re

#: Sends later than this are rewritten: below it the request goes out as encoded.
SLACK_S = 0.001
#: The least time left that `Late.with_left` can write (milliseconds to three decimals): less
#: would be written as 0, which gives the server no deadline it could meet, so it counts as none.
LEFT_RESOLUTION_MS = 0.001


def time_left_ms(deadline_s: float, late_s: float) -> float | None:
    """Milliseconds left of `deadline_s` for a request sent `late_s` after its scheduled time,
    or None when none is left that the request could carry (it is not sent: expired)."""
    left_ms = (deadline_s - late_s) * 1e3
    return left_ms if left_ms >= LEFT_RESOLUTION_MS else None


_SLO = re.compile(rb'"slo_ms"\s*:\s*(-?[0-9.eE+-]+)')
_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *([0-9]+)")


class Late:
    """One pre-encoded request that can be rewritten with less time left."""

    __slots__ = ("_after", "_before", "_head_after", "_head_before", "exact")

    def __init__(self, request: bytes) -> None:
        head, separator, body = request.partition(b"\r\n\r\n")
        slo = _SLO.search(body)
        length = _LENGTH.search(head)
        binary = b"inference-header-content-length" in head.lower()
        if not separator or slo is None or length is None or binary:
            raise ValueError(
                "deadline propagation needs requests whose JSON body carries "
                "parameters.slo_ms (send them with an SLO, not as binary tensors)"
            )
        self.exact = request
        self._head_before = head[: length.start(1)]
        self._head_after = head[length.end(1) :] + separator
        self._before = body[: slo.start(1)]
        self._after = body[slo.end(1) :]

    def with_left(self, left_ms: float) -> bytes:
        """The request with `parameters.slo_ms` set to `left_ms` (its Content-Length too)."""
        body = self._before + b"%.3f" % left_ms + self._after
        return self._head_before + b"%d" % len(body) + self._head_after + body
