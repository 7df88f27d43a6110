"""What an RPC may ask of the call it serves (`service.Context`), for a unary call
(`calls.Call`) and for each request of a streaming one (`bidi.StreamCall`) alike."""

from __future__ import annotations

import time
from typing import NoReturn, Protocol

import grpc

from headway.api.grpc.frames import Headers


class CallDeadline(Protocol):
    """A call as its context reads it: its metadata and its deadline."""

    headers: Headers
    #: Seconds from `received` (the call's `grpc-timeout`; for a stream, the whole stream's).
    timeout: float | None
    received: float


class Aborted(Exception):
    """An RPC ended its call with a status (`CallContext.abort`)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class CallContext:
    """What an RPC may ask of its call (`service.Context`), over a unary or a streaming call."""

    __slots__ = ("call",)

    def __init__(self, call: CallDeadline) -> None:
        self.call = call

    def time_remaining(self) -> float | None:
        call = self.call
        if call.timeout is None:
            return None
        return max(0.0, call.received + call.timeout - time.monotonic())

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return tuple(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in self.call.headers
            if not name.startswith(b":")
        )

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise Aborted(code, details)
