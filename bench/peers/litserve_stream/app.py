"""LitServe streaming the demo's text generator at ``POST /v1/completions`` (OpenAI's body;
events in OpenAI's streamed shape), as its docs show for streaming: ``stream=True`` and a
``predict`` that yields.

Two ways to batch, ``--loop``:

- ``batched`` (the default, LitServe's documented batching with streaming,
  ``BatchedStreamingLoop``): up to ``--batch`` requests gathered within ``--wait-ms`` run
  together, one token each per step, until the last of them ends; requests that arrive
  meanwhile wait for the next batch (request-level batching).
- ``continuous``: ``litserve.loops.ContinuousBatchingLoop`` (exported, not in the docs'
  pages): up to ``--batch`` sequences step together and one that ends leaves at once, a new
  one joining at the next step (iteration-level batching).

One API server and one inference worker on CPU (``workers_per_device=1``).

    python app.py --weights <tiny-gpt>/1 --port 8000 [--loop batched --batch 16 --wait-ms 10]
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from typing import Any

import litserve as ls
import textgen_peer
from litserve.loops import ContinuousBatchingLoop, Output
from litserve.utils import LitAPIStatus


class Batched(ls.LitAPI):
    """Request-level: each batch of requests is stepped until its last sequence ends."""

    def __init__(self, weights: str, **options: Any) -> None:
        super().__init__(api_path="/v1/completions", stream=True, **options)
        self.weights = weights

    def setup(self, device: str) -> None:
        self.model = textgen_peer.generator(self.weights)

    def decode_request(self, request, **kwargs: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return textgen_peer.request(request)

    def batch(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return inputs

    def predict(self, sequences: Any, **kwargs: Any) -> Iterator[Any]:
        if isinstance(sequences, dict):  # --batch 1: LitServe passes the one request
            for ((text, ended),) in textgen_peer.whole_batch(self.model, [sequences]):
                yield (text, ended)
            return
        yield from textgen_peer.whole_batch(self.model, sequences)

    def unbatch(self, outputs: Iterator[Any]) -> Iterator[Any]:
        yield from outputs

    def encode_response(self, outputs: Iterator[Any], **kwargs: Any) -> Iterator[Any]:
        for step in outputs:
            if isinstance(step, tuple):
                yield textgen_peer.event(*step)
            else:
                yield ["" if s is None else textgen_peer.event(*s) for s in step]


class Continuous(ls.LitAPI):
    """Iteration-level: LitServe's continuous batching loop calls `step` for every running
    sequence; a sequence that ends frees its place for the next request."""

    def __init__(self, weights: str, batch: int) -> None:
        super().__init__(api_path="/v1/completions", stream=True, max_batch_size=batch,
                         loop=ContinuousBatchingLoop())  # fmt: skip
        self.weights = weights
        self.limit = batch

    def setup(self, device: str) -> None:
        self.model = textgen_peer.generator(self.weights)
        self.batch_ = textgen_peer.Running(self.model)
        self.uids: list[str] = []
        self.lock = threading.Lock()  # the loop adds on its event loop, steps in a thread

    def add_request(self, uid: str, request: Any) -> None:
        with self.lock:
            self.batch_.add(textgen_peer.request(request))
            self.uids.append(uid)

    def has_capacity(self) -> bool:
        return self.batch_.active < self.limit

    def has_active_requests(self) -> bool:
        return self.batch_.active > 0

    def step(self, previous: Any) -> list[Output]:
        with self.lock:
            return self._step()

    def _step(self) -> list[Output]:
        batch = self.batch_
        results = batch.step()
        outputs = []
        for uid, result in zip(self.uids, results, strict=True):
            if result is not None:
                outputs.append(Output(uid, result, LitAPIStatus.OK))
                if result[1]:  # LitServe sends nothing of a finishing output: end it apart
                    outputs.append(Output(uid, None, LitAPIStatus.FINISH_STREAMING))
        # drop the ended sequences so the batch's lists do not grow
        keep = [i for i, left in enumerate(batch.left) if left > 0]
        batch.states = [batch.states[i] for i in keep]
        batch.left = [batch.left[i] for i in keep]
        self.uids = [self.uids[i] for i in keep]
        return outputs

    def encode_response(self, output: Any, **kwargs: Any) -> str:
        return "" if output is None else textgen_peer.event(*output)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", required=True, help="the text generator's version folder")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loop", choices=["batched", "continuous"], default="batched")
    parser.add_argument("--batch", type=int, default=16, help="most sequences stepped together")
    parser.add_argument("--wait-ms", type=float, default=10.0)
    args = parser.parse_args()
    if args.loop == "continuous":
        api: ls.LitAPI = Continuous(args.weights, args.batch)
    else:
        api = Batched(args.weights, max_batch_size=args.batch, batch_timeout=args.wait_ms / 1e3)
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1,
                          fast_queue=True, timeout=False)  # fmt: skip
    server.run(host="127.0.0.1", port=args.port, num_api_servers=1, log_level="warning",
               generate_client_file=False)  # fmt: skip


if __name__ == "__main__":
    main()
