"""A 4-operator chain for the fusion experiment: pre-process -> model -> post-process -> format.
With fusion the whole chain is one worker action; without, four."""

from __future__ import annotations

import numpy as np

from headway.flows import Flow, Model, Row


def preprocess(row: Row) -> np.ndarray:
    return np.asarray(row["image"], dtype=np.float64) / 16.0


def postprocess(row: Row) -> tuple[int, float]:
    probabilities = row["probabilities"]
    return int(np.argmax(probabilities)), float(np.max(probabilities))


def present(row: Row) -> str:
    return f"{row['label']} ({row['confidence']:.0%})"


def build() -> Flow:
    flow = Flow("chain", {"image": np.ndarray})
    x = flow.map(preprocess, names=["x"])
    scored = x.map(Model("digits-logreg", {"probabilities": np.ndarray}, inputs={"input-0": "x"}))
    scored.map(postprocess, names=["label", "confidence"]).map(present, names=["answer"])
    return flow


flow = build()
