"""Cloudflow's recommender: a dynamic lookup of the user's features, a model that picks a
category from them, a dynamic lookup of that category's items, and the top 5 by score.

The values are put with `PUT /lookups/{key}` (see `models.lookups()`): `user:<id>` holds a
user's features, `items:<category>` a list of `[item, score]`."""

from __future__ import annotations

import numpy as np

from headway.flows import Flow, Model, Row

TOP = 5


def user_key(row: Row) -> tuple[str, str]:
    return row["user"], f"user:{row['user']}"


def features(row: Row) -> tuple[str, np.ndarray]:
    return row["user"], np.asarray(row["features"] or np.zeros(64), dtype=np.float64)


def category(row: Row) -> tuple[str, int, str]:
    chosen = int(np.argmax(row["probabilities"]))
    return row["user"], chosen, f"items:{chosen}"


def top(row: Row) -> tuple[str, int, np.ndarray]:
    items = sorted(row["items"] or [], key=lambda item: (-item[1], item[0]))[:TOP]
    return row["user"], row["category"], np.asarray([int(i) for i, _ in items], dtype=np.int64)


def build() -> Flow:
    flow = Flow("recommender", {"user": str})
    looked = flow.map(user_key, names=["user", "key"]).lookup("key", dynamic=True, name="features")
    x = looked.map(features, names=["user", "x"])
    scored = x.map(Model("digits-logreg", {"probabilities": np.ndarray}, inputs={"input-0": "x"}))
    picked = scored.map(category, names=["user", "category", "key"])  # a map gives only these
    picked.lookup("key", dynamic=True, name="items").map(top, names=["user", "category", "items"])
    return flow


flow = build()
