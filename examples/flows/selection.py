"""Model selection inside a flow: pixels scaled to [0, 1], then Exp4 over two models (a
weighted vote that learns from feedback: `POST /apps/selection/feedback {"query_id": ...,
"label": 3}`), then the answer formatted."""

from __future__ import annotations

import numpy as np

from headway.flows import Flow, Row


def scale(row: Row) -> np.ndarray:
    return np.asarray(row["image"], dtype=np.float64) / 16.0


def present(row: Row) -> tuple[int, float]:
    return int(row["output"]), round(float(row["confidence"]), 6)


def build() -> Flow:
    flow = Flow("selection", {"image": np.ndarray})
    scaled = flow.map(scale, names=["x"])
    chosen = scaled.select(["digits-logreg", "digits-forest"], policy="exp4", eta=0.5)
    chosen.map(present, names=["label", "confidence"])
    return flow


flow = build()
