"""The demo's text generator as the peers serve it: the same `headway.textgen.Generator` (the
same weights, read from the same version folder), OpenAI's completions body in, OpenAI's
streamed completion events out, so that one load generator drives every system alike.

The peers' apps (`litserve_stream/`, `ray_stream/`) import this with `bench/peers` and
Headway's `src` on their PYTHONPATH; it needs numpy and torch only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from headway.textgen import Generator


def generator(weights: str) -> Generator:
    """The generator loaded from a version folder (`<model>/1`)."""
    model = Generator()
    model.load(Path(weights))
    return model


def request(body: dict[str, Any]) -> dict[str, Any]:
    """A completions body as a sequence to start: its prompt, its parameters as Headway's
    route passes them (the body's `parameters` object, then `max_tokens`, `temperature`,
    `seed`), and its token budget."""
    parameters = dict(body.get("parameters") or {})
    for key in ("temperature", "seed", "top_k"):
        if body.get(key) is not None:
            parameters[key] = body[key]
    tokens = int(body.get("max_tokens") or 16)
    return {"prompt": str(body.get("prompt", "")), "parameters": parameters, "tokens": tokens}


class Running:
    """Sequences advanced together, one token each per `step`: the peers' batch."""

    def __init__(self, model: Generator) -> None:
        self.model = model
        self.states: list[dict[str, Any]] = []
        self.left: list[int] = []

    def add(self, sequence: dict[str, Any]) -> int:
        """Start a sequence (its prefill); its index in this batch."""
        prompt = np.array([[sequence["prompt"].encode()]], dtype=object)
        self.states.append(self.model.start(prompt, sequence["parameters"]))
        self.left.append(sequence["tokens"])
        return len(self.states) - 1

    def step(self) -> list[tuple[str, bool] | None]:
        """Each sequence's next text and whether it ended (None: it had ended before)."""
        going = [i for i, left in enumerate(self.left) if left > 0]
        out: list[tuple[str, bool] | None] = [None] * len(self.states)
        if not going:
            return out
        parts, finished = self.model.step([self.states[i] for i in going])
        for row, i in enumerate(going):
            self.left[i] -= 1
            ended = finished[row] or self.left[i] == 0
            if ended:
                self.left[i] = 0
                self.model.stop(self.states[i])
            out[i] = (parts["text_output"][row].decode(), ended)
        return out

    @property
    def active(self) -> int:
        return sum(1 for left in self.left if left > 0)


def whole_batch(model: Generator, sequences: list[dict[str, Any]]) -> Iterator[list[Any]]:
    """Request-level batching: start every sequence, then step them all until the last one
    ends; per step each one's (text, ended), or None once it has ended."""
    batch = Running(model)
    for sequence in sequences:
        batch.add(sequence)
    while batch.active:
        yield batch.step()


def event(text: str, ended: bool = False) -> str:
    """One streamed completion event (OpenAI's shape), and `[DONE]` after the last."""
    choice = {"index": 0, "text": text, "finish_reason": "length" if ended else None}
    data = json.dumps({"object": "text_completion", "choices": [choice]})
    return f"data: {data}\n\n" + ("data: [DONE]\n\n" if ended else "")
