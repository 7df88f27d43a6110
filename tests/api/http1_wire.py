"""An HTTP/1.1 client's side of the in-memory connection tests (`test_quick_refusal_answers`,
`test_inference_token`): a model's repository entry, the connection's transport, an infer
request's bytes, the answers read back, and a read in a turn of reads."""

from __future__ import annotations

import time

import orjson

from headway.api.connection import HttpConnection
from headway.api.http import HttpServer

YAML = (
    "framework: python\nentrypoint: m.py:M\nmax_batch_size: 8\n"
    "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\n"
)


class Transport:
    """What the connection writes, and whether it ended its side."""

    def __init__(self) -> None:
        self.data = b""
        self.eof = False

    def write(self, data: bytes) -> None:
        self.data += data

    def write_eof(self) -> None:
        self.eof = True

    def can_write_eof(self) -> bool:
        return True

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def infer(slo_ms: float, *, version: str = "1.1", close: bool = False) -> bytes:
    body = orjson.dumps(
        {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}],
            "parameters": {"slo_ms": slo_ms},
        }
    )
    head = (
        f"POST /v2/models/m/infer HTTP/{version}\r\nHost: h\r\nContent-Type: application/json\r\n"
    )
    if close:
        head += "Connection: close\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def answers(data: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """The HTTP answers in `data`: status line, headers (lower-case names), body."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(headers["content-length"])
        out.append((lines[0], headers, rest[:length]))
        data = rest[length:]
    return out


def read(connection: HttpConnection, server: HttpServer, data: bytes, waited: float) -> None:
    """`data` read in a turn of reads whose bytes may have arrived `waited` s ago."""
    server.turn_open = True
    server.turn_floor = time.monotonic() - waited
    connection.data_received(data)
