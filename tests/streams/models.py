"""Small generative models for the streams tests, written into a repository folder."""

from __future__ import annotations

from pathlib import Path

COUNTING = '''
import os
import time

import numpy as np


class Counting:
    """Each sequence counts from its input up by one per step, and ends after as many
    steps as its input says (`parameters["max_tokens"]` may say fewer: the worker caps it).
    A step takes STEP_S plus PER_SEQUENCE_S per sequence in it; a count from 0 (the warm-up's
    inputs) makes 8 parts. An input of -1 fails its
    start; an input of -2 makes the step it runs in raise; an input of -3 kills the worker."""

    inputs = [{"name": "n", "datatype": "INT64", "shape": [-1, 1]}]
    outputs = [{"name": "count", "datatype": "INT64", "shape": [-1]}]
    STEP_S = 0.004
    PER_SEQUENCE_S = 0.001

    def start(self, n, parameters):
        value = int(n[0, 0])
        if value == -1:
            raise ValueError("a count cannot start from -1")
        return {"n": value, "made": 0}

    def step(self, states):
        time.sleep(self.STEP_S + self.PER_SEQUENCE_S * len(states))
        if any(s["n"] == -2 for s in states):
            raise RuntimeError("the count broke on a -2")
        if any(s["n"] == -3 for s in states):
            os._exit(3)
        for s in states:
            s["made"] += 1
        counts = np.array([s["made"] for s in states], dtype=np.int64)
        return {"count": counts}, [s["made"] >= (s["n"] if s["n"] > 0 else 8) for s in states]
'''


def counting(root: Path, *, max_sequences: int = 4, extra: str = "") -> Path:
    """A generative counting model `counting` (see COUNTING) under `root`."""
    folder = root / "counting"
    (folder / "1").mkdir(parents=True)
    (folder / "model.py").write_text(COUNTING)
    (folder / "model.yaml").write_text(
        "framework: python\nentrypoint: model.py:Counting\nslo_ms: 5000\n"
        f"generative: {{max_sequences: {max_sequences}, max_parts: 400}}\n" + extra
    )
    return root


PREFILLING = (
    COUNTING.replace("class Counting:", "class Prefilling:")
    .replace(
        '        return {"n": value, "made": 0}',
        "        time.sleep(self.PREFILL_S)  # reading its input: a first step costs more\n"
        '        return {"n": value, "made": 0}',
    )
    .replace("    PER_SEQUENCE_S = 0.001\n", "    PER_SEQUENCE_S = 0.001\n    PREFILL_S = 0.02\n")
)


def prefilling(root: Path, *, max_sequences: int = 4, extra: str = "") -> Path:
    """`counting`, whose sequences each take PREFILL_S more to start (see PREFILLING): its
    first steps take longer than the following ones."""
    folder = root / "prefilling"
    (folder / "1").mkdir(parents=True)
    (folder / "model.py").write_text(PREFILLING)
    (folder / "model.yaml").write_text(
        "framework: python\nentrypoint: model.py:Prefilling\nslo_ms: 5000\n"
        f"generative: {{max_sequences: {max_sequences}, max_parts: 400}}\n" + extra
    )
    return root
