"""Cloudflow's image cascade on the digits: a fast model answers; rows it is unsure of (top
probability below 0.85) also go to a slower, more accurate model; a left join on the query id
brings the two answers together and the more confident one wins. Every operator batches (the
functions take the whole table), so each stage runs the rows of many queries in one action."""

from __future__ import annotations

import numpy as np

from headway.flows import Flow, Model, Row, Table

THRESHOLD = 0.85


def top(table: Table) -> list[tuple[np.ndarray, int, float]]:
    probabilities = np.stack(table.column("probabilities"))
    labels, confidences = probabilities.argmax(axis=1).tolist(), probabilities.max(axis=1).tolist()
    return list(zip(table.column("image"), labels, confidences, strict=True))


def unsure(row: Row) -> bool:
    return row["confidence"] < THRESHOLD


def top_slow(table: Table) -> list[tuple[int, float]]:
    probabilities = np.stack(table.column("probabilities"))
    labels, confidences = probabilities.argmax(axis=1).tolist(), probabilities.max(axis=1).tolist()
    return list(zip(labels, confidences, strict=True))


def pick(table: Table) -> list[tuple[int, float, str]]:
    out = []
    for row in table:
        slow = row["slow_confidence"]
        if slow is not None and slow > row["confidence"]:
            out.append((row["slow_label"], slow, "digits-slow"))
        else:
            out.append((row["label"], row["confidence"], "digits-fast"))
    return out


def build() -> Flow:
    flow = Flow("cascade", {"image": np.ndarray})
    probabilities = {"probabilities": np.ndarray}
    fast = flow.map(Model("digits-fast", probabilities, inputs={"input-0": "image"}))
    fast = fast.map(top, names=["image", "label", "confidence"], batching=True)
    slow = fast.filter(unsure).map(Model("digits-slow", probabilities, inputs={"input-0": "image"}))
    slow = slow.map(top_slow, names=["slow_label", "slow_confidence"], batching=True)
    fast.join(slow, how="left").map(pick, names=["label", "confidence", "model"], batching=True)
    return flow


flow = build()
