"""A 4-operator chain for the fusion experiment: pre-process -> model -> post-process -> format.
With fusion the whole chain is one worker action; without, four. Every operator batches (the
functions take the whole table), so the fused chain batches the rows of concurrent queries too."""

from __future__ import annotations

import numpy as np

from headway.flows import Flow, Model, Table


def preprocess(table: Table) -> list[np.ndarray]:
    return list(np.stack(table.column("image")).astype(np.float64) / 16.0)


def postprocess(table: Table) -> list[tuple[int, float]]:
    probabilities = np.stack(table.column("probabilities"))
    labels, confidences = probabilities.argmax(axis=1), probabilities.max(axis=1)
    return list(zip(labels.tolist(), confidences.tolist(), strict=True))


def present(table: Table) -> list[str]:
    return [f"{label} ({confidence:.0%})" for label, confidence in table.rows]


def build() -> Flow:
    flow = Flow("chain", {"image": np.ndarray})
    x = flow.map(preprocess, names=["x"], batching=True)
    scored = x.map(Model("digits-logreg", {"probabilities": np.ndarray}, inputs={"input-0": "x"}))
    labelled = scored.map(postprocess, names=["label", "confidence"], batching=True)
    labelled.map(present, names=["answer"], batching=True)
    return flow


flow = build()
