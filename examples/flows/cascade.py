"""Cloudflow's image cascade on the digits: a fast model answers; rows it is unsure of (top
probability below 0.85) also go to a slower, more accurate model; a left join on the query id
brings the two answers together and the more confident one wins."""

from __future__ import annotations

import numpy as np

from headway.flows import Flow, Model, Row

THRESHOLD = 0.85


def top(row: Row) -> tuple[np.ndarray, int, float]:
    probabilities = row["probabilities"]
    return row["image"], int(np.argmax(probabilities)), float(np.max(probabilities))


def unsure(row: Row) -> bool:
    return row["confidence"] < THRESHOLD


def top_slow(row: Row) -> tuple[int, float]:
    probabilities = row["probabilities"]
    return int(np.argmax(probabilities)), float(np.max(probabilities))


def pick(row: Row) -> tuple[int, float, str]:
    slow = row["slow_confidence"]
    if slow is not None and slow > row["confidence"]:
        return row["slow_label"], slow, "digits-slow"
    return row["label"], row["confidence"], "digits-fast"


def build() -> Flow:
    flow = Flow("cascade", {"image": np.ndarray})
    probabilities = {"probabilities": np.ndarray}
    fast = flow.map(Model("digits-fast", probabilities, inputs={"input-0": "image"}))
    fast = fast.map(top, names=["image", "label", "confidence"])
    slow = fast.filter(unsure).map(Model("digits-slow", probabilities, inputs={"input-0": "image"}))
    slow = slow.map(top_slow, names=["slow_label", "slow_confidence"])
    fast.join(slow, how="left").map(pick, names=["label", "confidence", "model"])
    return flow


flow = build()
