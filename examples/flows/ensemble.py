"""An ensemble: a transform (pixels scaled to [0, 1]), two models in parallel, a join on the
query id, and a vote (the class with the highest summed probability)."""

from __future__ import annotations

import numpy as np

from headway.flows import Flow, Model, Row


def scale(row: Row) -> np.ndarray:
    return np.asarray(row["image"], dtype=np.float64) / 16.0


def vote(row: Row) -> tuple[int, float]:
    total = row["logreg"] + row["forest"]
    return int(np.argmax(total)), float(np.max(total) / 2.0)


def build() -> Flow:
    flow = Flow("ensemble", {"image": np.ndarray})
    scaled = flow.map(scale, names=["x"])
    outputs = {"probabilities": np.ndarray}
    logreg = scaled.map(Model("digits-logreg", outputs), names=["logreg"])
    forest = scaled.map(Model("digits-forest", outputs), names=["forest"])
    logreg.join(forest).map(vote, names=["label", "confidence"])
    return flow


flow = build()
