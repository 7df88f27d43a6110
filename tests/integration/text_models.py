"""A small generative text model for the stream routes' tests (`test_stream_routes`): what
the OpenAI, generate, SSE and gRPC streaming routes carry, without a trained network."""

from __future__ import annotations

from pathlib import Path

SPELL = '''
import time

import numpy as np


class Spell:
    """Says its prompt back, one word per step (a word and a space each part). A prompt
    `repeat N` says "x " N times, `slow N` too at 50 ms a step, `big N` says 4 KiB words N
    times; `fail ...` raises at its third step. `max_tokens` (the worker caps each sequence at it) may stop it sooner."""

    inputs = [{"name": "text_input", "datatype": "BYTES", "shape": [-1, 1]}]
    outputs = [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}]

    def start(self, text_input, parameters):
        prompt = text_input.flat[0]
        prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
        words = prompt.split() or ["."]
        slow = words[0] == "slow"
        if words[0] in ("repeat", "slow", "big") and len(words) == 2:
            words = ["x" * (4096 if words[0] == "big" else 1)] * int(words[1])
        return {"words": words, "at": 0, "slow": slow, "fail": words[0] == "fail"}

    def step(self, states):
        if any(s["slow"] for s in states):
            time.sleep(0.05)
        if any(s["fail"] and s["at"] == 2 for s in states):
            raise RuntimeError("the spell broke at its third word")
        texts = []
        for s in states:
            texts.append((s["words"][s["at"]] + " ").encode())
            s["at"] += 1
        out = np.empty(len(texts), dtype=object)
        out[:] = texts
        return {"text_output": out}, [s["at"] >= len(s["words"]) for s in states]
'''


def spell(root: Path, max_parts: int = 100_000) -> Path:
    """The generative text model `spell` (see SPELL) under `root`."""
    folder = root / "spell"
    (folder / "1").mkdir(parents=True)
    (folder / "model.py").write_text(SPELL)
    (folder / "model.yaml").write_text(
        "framework: python\nentrypoint: model.py:Spell\nslo_ms: 5000\n"
        f"generative: {{max_sequences: 16, max_parts: {max_parts}}}\n"
    )
    return root
