"""A fitted LogisticRegression's answers without scikit-learn's per-call input checks.

Every `predict_proba` and `predict` call validates its input first (dataframe detection,
array-API namespace, finiteness, feature count): on a batch of a few rows that is most of the
call's time, and `sklearn.config_context(assume_finite=True, skip_parameter_validation=True)`
skips only a small part of it (docs/decisions.md). The controller has already checked each
tensor's datatype and shape against the model's signature, so what is left to run is the
arithmetic: `X @ coef_.T + intercept_`, then the logistic function (two classes) or softmax
(more), as scikit-learn computes them.

Used only for a plain `LogisticRegression` (not a subclass, not a pipeline) whose answers on a
probe batch at load equal scikit-learn's bit for bit, and per call only for finite float64 rows
of the model's width: anything else goes to scikit-learn, with its conversions and errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from sklearn.utils.extmath import softmax

#: Rows of the probe batch that must give scikit-learn's answers exactly.
PROBE_ROWS = 64


class LinearShortcut:
    """`predict_proba` and `predict` of one fitted LogisticRegression, from its coefficients."""

    __slots__ = ("_binary", "_classes", "_coef_t", "_features", "_intercept", "model")

    def __init__(self, model: Any) -> None:
        self.model = model
        coef = np.asarray(model.coef_)
        self._coef_t = coef.T if coef.ndim == 2 else coef
        self._intercept = np.asarray(model.intercept_)
        self._classes = np.asarray(model.classes_)
        self._binary = self._classes.shape[0] <= 2
        self._features = int(model.n_features_in_)

    def serves(self, model: Any, x: np.ndarray) -> bool:
        """Whether this answers for `model` on `x` as scikit-learn would (else ask it)."""
        return (
            model is self.model
            and x.ndim == 2
            and x.dtype == np.float64
            and x.shape[1] == self._features
            and x.shape[0] > 0
            and bool(np.isfinite(x).all())
        )

    def _scores(self, x: np.ndarray) -> np.ndarray:
        scores: np.ndarray = x @ self._coef_t + self._intercept
        return scores.reshape(-1) if scores.ndim > 1 and scores.shape[1] == 1 else scores

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        scores = self._scores(x)
        if self._binary:
            positive = expit(scores, out=scores)
            # scikit-learn's [1 - p, p] columns, written in place: np.stack would build them
            # again, which a lone row's batch, the usual one under light load, pays in full
            # (bench/RESULTS.md, "Small choices in the code, measured")
            answer = np.empty((positive.shape[0], 2))
            answer[:, 1] = positive
            np.subtract(1.0, positive, out=answer[:, 0])
            return answer
        return softmax(scores, copy=False)  # type: ignore[no-any-return]

    def predict(self, x: np.ndarray) -> np.ndarray:
        scores = self._scores(x)
        indices = (scores > 0).astype(np.intp) if scores.ndim == 1 else scores.argmax(axis=1)
        return self._classes.take(indices, axis=0)


def linear_shortcut(model: Any) -> LinearShortcut | None:
    """The shortcut for `model` if it is a plain LogisticRegression on which it gives exactly
    scikit-learn's answers (probabilities and labels) on a probe batch; None otherwise."""
    if type(model) is not LogisticRegression or not hasattr(model, "coef_"):
        return None
    try:
        shortcut = LinearShortcut(model)
        rng = np.random.default_rng(0)
        width = shortcut._features
        probe = np.vstack([np.zeros((1, width)), rng.normal(0.0, 3.0, (PROBE_ROWS - 1, width))])
        for rows in (probe[:1], probe):
            if not (
                np.array_equal(shortcut.predict_proba(rows), model.predict_proba(rows))
                and np.array_equal(shortcut.predict(rows), model.predict(rows))
            ):
                return None
    except Exception:  # an estimator unlike the one this was written for: ask scikit-learn
        return None
    return shortcut
