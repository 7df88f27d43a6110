"""Real models trained here on data that ships with scikit-learn, as ensemble members.

Every experiment of `clipper.py` draws its members from these pools. A pool is a recipe: given
a seed and a training split, it fits its members and returns each member's predicted class for
every row it will be asked about, so that the serving experiments look answers up instead of
calling scikit-learn per query (the answers are the models' own; only the calls are stubbed).

- `mixed`: five families on all the features (logistic regression, k-nearest neighbours,
  Gaussian naive Bayes, a depth-limited tree, an RBF support vector machine): the usual
  situation, one or two strong members and weaker ones whose errors overlap theirs.
- `subspace`: the same five families, each on its own random 40% of the features (random
  subspaces): weaker members that see different things and so err on different rows.
- `bagged`: five depth-limited trees, each on its own bootstrap sample of the training rows:
  members of one family that differ only in their data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

DATASETS = ("digits", "breast_cancer", "wine", "iris")
POOLS = ("mixed", "subspace", "bagged")
FAMILIES = ("logreg", "knn", "bayes", "tree", "svm")


def dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn import datasets

    loaders: dict[str, Callable[..., Any]] = {
        "digits": datasets.load_digits,
        "breast_cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
        "iris": datasets.load_iris,
    }
    x, y = loaders[name](return_X_y=True)
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64)


def family(name: str, seed: int) -> Any:
    """An unfitted estimator of one family; scaled inputs where the family needs them."""
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC
    from sklearn.tree import DecisionTreeClassifier

    if name == "logreg":
        from sklearn.linear_model import LogisticRegression

        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    if name == "knn":
        return make_pipeline(StandardScaler(), KNeighborsClassifier(5))
    if name == "bayes":
        return GaussianNB()
    if name == "tree":
        return DecisionTreeClassifier(max_depth=6, random_state=seed)
    if name == "svm":
        return make_pipeline(StandardScaler(), SVC(C=1.0, gamma="scale"))
    raise ValueError(name)


@dataclass(frozen=True)
class Member:
    """One fitted model: its name and the columns it reads."""

    name: str
    model: Any
    columns: np.ndarray

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.predict(x[:, self.columns]), dtype=np.int64)


def pool(kind: str, x: np.ndarray, y: np.ndarray, seed: int, size: int = 5) -> list[Member]:
    """`size` members of pool `kind` fitted on (x, y); the seed picks subsets and samples."""
    rng = np.random.default_rng(seed)
    every = np.arange(x.shape[1])
    members = []
    for i in range(size):
        name = FAMILIES[i % len(FAMILIES)]
        rows = np.arange(len(y))
        columns = every
        if kind == "subspace":
            count = max(2, round(0.4 * x.shape[1]))
            columns = np.sort(rng.choice(every, size=count, replace=False))
        elif kind == "bagged":
            name = "tree"
            rows = rng.choice(rows, size=len(rows), replace=True)
        elif kind != "mixed":
            raise ValueError(f"unknown pool {kind!r}; pools are {POOLS}")
        model = family(name, seed * 100 + i).fit(x[rows][:, columns], y[rows])
        members.append(Member(f"{kind}-{i}-{name}", model, columns))
    return members


def split(y: np.ndarray, train: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (training rows, the rest) indices."""
    from sklearn.model_selection import train_test_split

    rows = np.arange(len(y))
    fit, rest = train_test_split(rows, train_size=train, stratify=y, random_state=seed)
    return np.asarray(fit), np.asarray(rest)
