"""A gRPC client's side of the HTTP/2 connection tests (`test_http2`, `test_grpc_dispatch`):
the request headers of a ModelInfer call, the connection's transport (`Wire`) and its server."""

from __future__ import annotations

from headway.api.grpc.http2 import Http2Connection

PATH = b"/inference.GRPCInferenceService/ModelInfer"
HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", PATH),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]


class Wire:
    """The connection's transport: what it writes, and whether it closed."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> None:
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Server:
    def __init__(self) -> None:
        self.connections: set[Http2Connection] = set()
        self.unanswered = 0
        self.turns = 0
        self.floor: float | None = None  # when bytes read now may have arrived

    def accept_pending(self) -> None:
        pass  # nothing listens

    def arrived_since(self, now: float) -> float:
        return now if self.floor is None else self.floor

    def keep_up(self, now: float) -> None:
        self.turns += 1
