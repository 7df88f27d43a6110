"""A no-op RSGI app on granian (a Rust HTTP server for Python): the ceiling of a Python handler.

The handler reads the body, decodes it with ``orjson`` (as any JSON handler must) and answers a
constant OIP body: what remains of a request in Python when the HTTP layer is not Python.

    python app.py --port 8000
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
from granian.constants import Interfaces
from granian.server import Server

NOOP = orjson.dumps(
    {"model_name": "noop", "outputs": [
        {"name": "output-0", "datatype": "FP64", "shape": [1, 2], "data": [0.5, 0.5]}]}
)  # fmt: skip
HEADERS = [("content-type", "application/json")]


async def app(scope: Any, protocol: Any) -> None:
    body = await protocol()
    if body:
        orjson.loads(body)
    protocol.response_bytes(200, HEADERS, NOOP)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    Server(
        "app:app", address="127.0.0.1", port=args.port, interface=Interfaces.RSGI, workers=1,
        runtime_threads=1, log_access=False, websockets=False,
    ).serve()  # fmt: skip


if __name__ == "__main__":
    main()
