"""A tiny Open Inference Protocol server for the load generator's tests, in its own process.

Run as a script it serves on loopback and prints its port. Every model takes one FP32 input
``x`` of shape ``[-1, 4]`` (JSON or binary) and answers 400 if a request does not match; the
model name picks a deterministic pattern, decided by a per-model request counter ``n`` (1-based):

- ``m``: 200.
- ``every5``: 503 when ``n % 5 == 0``, else 200.
- ``mixed``: 503 if ``n % 5 == 0``, else 500 if ``n % 7 == 0``, else 429 if ``n % 11 == 0``,
  else 200.
- ``slow``: 200 after 20 ms (the connection is held meanwhile).
- ``serial``: 200, one request at a time, 10 ms each (a queue with a capacity of 100 req/s).
- ``close``: 200, with ``Connection: close`` on every third answer.
- ``drop``: every tenth request, the connection is closed without an answer.
- ``stall``: never answers.

``GET /stats`` gives per-model counts (``requests``, ``statuses``, ``rows``, ``binary``,
``dropped``, and ``slo_ms``: requests per ``parameters.slo_ms`` sent, "none" without one);
``POST /reset`` zeroes them.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httptools
import httpx
import orjson
import pytest

MODELS = ("m", "every5", "mixed", "slow", "serial", "close", "drop", "stall")
#: ``serial``'s service time: its capacity is 1 / SERIAL_S requests a second.
SERIAL_S = 0.010


def _metadata(name: str) -> bytes:
    return orjson.dumps(
        {
            "name": name,
            "platform": "test_raw",
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}],
        }
    )


def _response(status: int, body: bytes, close: bool = False) -> bytes:
    head = (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode() + body


def _rows(body: bytes, header_length: int | None) -> tuple[int, bool]:
    """Rows in a valid request for the test models; ValueError says what is wrong."""
    header = orjson.loads(body if header_length is None else body[:header_length])
    (tensor,) = header["inputs"]
    if tensor["name"] != "x" or tensor["datatype"] != "FP32":
        raise ValueError("expected input x of FP32")
    rows, cols = tensor["shape"]
    if cols != 4 or rows < 1:
        raise ValueError(f"bad shape {tensor['shape']}")
    if header_length is None:
        if len(tensor["data"]) != rows * 4 or not all(isinstance(v, float) for v in tensor["data"]):
            raise ValueError("data does not match the shape")
        return rows, False
    size = tensor["parameters"]["binary_data_size"]
    if size != rows * 16 or len(body) - header_length != size:
        raise ValueError("binary data does not match the shape")
    return rows, True


def _parameters(body: bytes, header_length: int | None) -> dict[str, Any]:
    header = orjson.loads(body if header_length is None else body[:header_length])
    return header.get("parameters") or {}  # type: ignore[no-any-return]


class _Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.models: dict[str, dict[str, Any]] = {
            name: {
                "requests": 0,
                "statuses": {},
                "rows": 0,
                "binary": 0,
                "dropped": 0,
                "slo_ms": {},
            }
            for name in MODELS
        }


class _Handler(asyncio.Protocol):
    stats = _Stats()
    serial_free_at = 0.0  # loop time at which ``serial`` finishes what it was given

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.header_length: int | None = None

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url, self.body, self.header_length = url, [], None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"inference-header-content-length":
            self.header_length = int(value)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        parts = self.url.decode().strip("/").split("/")
        method = self.parser.get_method()
        if parts == ["stats"]:
            return self.transport.write(_response(200, orjson.dumps(self.stats.models)))
        if parts == ["reset"] and method == b"POST":
            self.stats.reset()
            return self.transport.write(_response(200, b"{}"))
        if len(parts) < 3 or parts[:2] != ["v2", "models"] or parts[2] not in MODELS:
            return self.transport.write(_response(404, b'{"error": "no such model"}'))
        name = parts[2]
        if method == b"GET" and len(parts) == 3:
            return self.transport.write(_response(200, _metadata(name)))
        self.infer(name, b"".join(self.body))

    def infer(self, name: str, body: bytes) -> None:
        model = self.stats.models[name]
        model["requests"] += 1
        n = model["requests"]
        try:
            rows, binary = _rows(body, self.header_length)
            model["rows"] += rows
            model["binary"] += binary
            slo = str(_parameters(body, self.header_length).get("slo_ms", "none"))
            model["slo_ms"][slo] = model["slo_ms"].get(slo, 0) + 1
            status = 200
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            status = 400
        if status == 200 and name == "every5" and n % 5 == 0:
            status = 503
        if status == 200 and name == "mixed":
            status = 503 if n % 5 == 0 else 500 if n % 7 == 0 else 429 if n % 11 == 0 else 200
        if name == "stall":
            return
        if name == "drop" and n % 10 == 0:
            model["dropped"] += 1
            self.transport.close()
            return
        statuses = model["statuses"]
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        answer = _response(
            status,
            b'{"model_name": "%s", "outputs": []}' % name.encode(),
            close=name == "close" and n % 3 == 0,
        )
        if name == "slow":
            asyncio.get_running_loop().call_later(0.02, self.transport.write, answer)
        elif name == "serial":
            loop = asyncio.get_running_loop()
            done = max(loop.time(), _Handler.serial_free_at) + SERIAL_S
            _Handler.serial_free_at = done
            loop.call_at(done, self.transport.write, answer)
        else:
            self.transport.write(answer)
        if name == "close" and n % 3 == 0:
            self.transport.close()


def _serve() -> None:
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Handler, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    uvloop.run(main())


@dataclass
class OipServer:
    url: str

    def stats(self, model: str) -> dict[str, Any]:
        return httpx.get(f"{self.url}/stats").json()[model]  # type: ignore[no-any-return]

    def reset(self) -> None:
        httpx.post(f"{self.url}/reset").raise_for_status()


@pytest.fixture(scope="session")
def oip_server() -> Iterator[OipServer]:
    process = subprocess.Popen([sys.executable, str(Path(__file__))], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield OipServer(f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def oip(oip_server: OipServer) -> OipServer:
    """The test server with its counters zeroed."""
    oip_server.reset()
    return oip_server


@pytest.fixture
def closed_port() -> int:
    """A loopback port that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    _serve()
