"""Ray Serve streaming the demo's text generator at ``POST /v1/completions`` (OpenAI's body;
events in OpenAI's streamed shape), as its docs show: the deployment answers a
``StreamingResponse`` over a generator, and batches with ``@serve.batch`` on an async
generator ("streaming batched requests"): up to ``--batch`` requests gathered within
``--wait-ms`` are stepped together, one token each per step; one that ends stops its stream
(``StopIteration``), but the batch runs until its last sequence ends before the next batch
starts (request-level batching: Ray Serve has no way to join a running batch).

Starts a local Ray in this process, one replica, prints ``ready`` and serves until
SIGINT/SIGTERM, as every Ray peer does (``ray_peer.py``).

    PYTHONPATH=src:bench/peers python app.py --weights <tiny-gpt>/1 --port 8000 [--batch 16 --wait-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from typing import Any

import textgen_peer
from ray import serve
from ray_peer import serve_until_stopped
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse


def build(weights: str, batch: int, wait_ms: float) -> Any:
    @serve.deployment(max_ongoing_requests=max(4 * batch, 8))
    class Completions:
        def __init__(self) -> None:
            self.model = textgen_peer.generator(weights)

        @serve.batch(max_batch_size=max(batch, 1), batch_wait_timeout_s=wait_ms / 1e3)
        async def generate(self, sequences: list[dict[str, Any]]) -> AsyncIterator[list[Any]]:
            for step in textgen_peer.whole_batch(self.model, sequences):
                yield [StopIteration if s is None else textgen_peer.event(*s) for s in step]
                await asyncio.sleep(0)  # let the replica send this step's events

        async def __call__(self, request: Request) -> Response:
            if request.method == "GET":
                return Response(b"", status_code=200)
            sequence = textgen_peer.request(await request.json())
            return StreamingResponse(self.generate(sequence), media_type="text/event-stream")

    return Completions.bind()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", required=True, help="the text generator's version folder")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--batch", type=int, default=16, help="@serve.batch max size")
    parser.add_argument("--wait-ms", type=float, default=10.0)
    parser.add_argument("--temp-dir", default=None)
    args = parser.parse_args()

    app = build(args.weights, args.batch, args.wait_ms)
    serve_until_stopped(app, port=args.port, temp_dir=args.temp_dir)


if __name__ == "__main__":
    main()
