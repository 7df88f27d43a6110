"""The example flows' models and lookup values, trained in seconds on scikit-learn's digits.

    python examples/flows/models.py REPOSITORY    # writes the models, prints nothing else

Rows [:TRAIN] train; rows [TRAIN:] are the queries the tests and benchmarks send.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

TRAIN = 1200
USERS = 20
ITEMS_PER_CATEGORY = 12


def digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    return x.astype(np.float64), y


def queries() -> np.ndarray:
    """Held-out digit images (raw pixel values 0..16), the examples' inputs."""
    return digits()[0][TRAIN:]


def _save(root: Path, name: str, model: Any) -> None:
    folder = root / name / "1"
    folder.mkdir(parents=True, exist_ok=True)
    (root / name / "model.yaml").write_text("framework: sklearn\nmax_batch_size: 32\n")
    joblib.dump(model, folder / "model.joblib")


def build(root: Path) -> None:
    """digits-fast (a linear model), digits-slow (a 200-tree forest), both on raw pixels;
    digits-logreg and digits-forest on pixels scaled to [0, 1] (the ensemble's transform)."""
    x, y = digits()
    x, y = x[:TRAIN], y[:TRAIN]
    _save(root, "digits-fast", LogisticRegression(max_iter=3000).fit(x, y))
    _save(root, "digits-slow", RandomForestClassifier(200, random_state=0).fit(x, y))
    _save(root, "digits-logreg", LogisticRegression(max_iter=3000).fit(x / 16, y))
    _save(root, "digits-forest", RandomForestClassifier(30, random_state=0).fit(x / 16, y))


def lookups() -> dict[str, Any]:
    """The recommender's stored values: each user's features (a digit image they "drew") and
    each category's items with their scores."""
    rng = np.random.default_rng(0)
    x, _ = digits()
    values: dict[str, Any] = {f"user:{u}": (x[TRAIN + u] / 16).tolist() for u in range(USERS)}
    for category in range(10):
        items = [
            [category * 100 + i, round(float(rng.random()), 4)] for i in range(ITEMS_PER_CATEGORY)
        ]
        values[f"items:{category}"] = items
    return values


if __name__ == "__main__":
    build(Path(sys.argv[1]))
