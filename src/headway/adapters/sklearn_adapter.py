"""scikit-learn: a fitted estimator or pipeline, pickled (`*.joblib`, `*.pkl`, `*.pickle`).

Classifiers answer `label` and, where they have `predict_proba`, `probabilities`; other
estimators `output-0` (`SklearnAdapter`). XGBoost and LightGBM subclass this adapter.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import joblib
import numpy as np

from headway.adapters.base import DEFAULT_INPUT, DEFAULT_OUTPUT, Adapter, wanted
from headway.datatypes import oip_datatype
from headway.errors import ConfigError

if TYPE_CHECKING:
    from headway.adapters.sklearn_linear import LinearShortcut

PICKLES = ("*.joblib", "*.pkl", "*.pickle")
LABEL = "label"
PROBABILITIES = "probabilities"


class SklearnAdapter(Adapter):
    """A scikit-learn (API) estimator; subclasses may load a framework's native booster instead.

    Classifiers (estimators with `classes_`) answer `label` (`predict`, the predicted classes;
    integer classes as INT64) and, where they have `predict_proba`, `probabilities` (FP64, one
    column per class; both from one `predict_proba` where its argmax is `predict`). Other
    estimators answer `output-0` (`predict`). Only the outputs asked for are computed, each once
    per batch. Native boosters (`native` patterns) answer `output-0`. Option `threads` (default 1)
    sets the estimator's `n_jobs` where it has one, so one action uses a predictable number of
    cores."""

    native: tuple[str, ...] = ()  # glob patterns of the framework's own format (subclasses)
    native_datatype = "FP64"  # the input datatype a native booster computes in
    model: Any = None
    booster: Any = None
    #: The estimator's answers without scikit-learn's per-call input checks, where exact.
    shortcut: LinearShortcut | None = None

    @property
    def threads(self) -> int:
        return int(self.options.get("threads", 1))

    @property
    def input_name(self) -> str:
        declared = self.config.get("inputs") or []
        return str(declared[0]["name"]) if declared else DEFAULT_INPUT

    def load(self) -> None:
        path = self.artifact(*self.native, *PICKLES)
        try:
            if path.suffix in {p.lstrip("*") for p in PICKLES}:
                self.model = joblib.load(path)
            else:
                self.booster = self.load_native(path)
        except Exception as exc:
            raise ConfigError(f"model {self.config['name']!r}: cannot load {path}: {exc}") from exc
        if self.booster is None:
            if not callable(getattr(self.model, "predict", None)):
                kind = type(self.model).__name__
                raise ConfigError(
                    f"model {self.config['name']!r}: {path} holds a {kind}, which has no predict()"
                )
            get_params = getattr(self.model, "get_params", None)
            if get_params is not None and "n_jobs" in get_params(deep=False):
                self.model.set_params(n_jobs=self.threads)
            if type(self.model).__module__.startswith("sklearn.linear_model"):
                from headway.adapters.sklearn_linear import linear_shortcut

                self.shortcut = linear_shortcut(self.model)

    def load_native(self, path: Path) -> Any:
        raise NotImplementedError

    def native_predict(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def native_features(self) -> int:
        raise NotImplementedError

    def predict(
        self, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        x = self.single_input(inputs)
        result: dict[str, np.ndarray] = {}
        classes = getattr(self.model, "classes_", None)
        if self.booster is not None or classes is None:
            predict = self.native_predict if self.booster is not None else self.model.predict
            if wanted(outputs, DEFAULT_OUTPUT):
                result[DEFAULT_OUTPUT] = np.asarray(predict(x))
            return result
        model = self.model
        shortcut = self.shortcut
        if shortcut is not None and shortcut.serves(model, x):
            model = shortcut  # the same answers, without scikit-learn's input checks
        probabilities = None
        if wanted(outputs, PROBABILITIES) and hasattr(model, "predict_proba"):
            probabilities = np.asarray(model.predict_proba(x), dtype=np.float64)
        if wanted(outputs, LABEL):
            if probabilities is not None and self.labels_follow_probabilities:
                # One pass of the estimator's input checks instead of two.
                result[LABEL] = _labels(classes[probabilities.argmax(axis=1)])
            else:
                result[LABEL] = _labels(model.predict(x))
        if probabilities is not None:
            result[PROBABILITIES] = probabilities
        return result

    @property
    def labels_follow_probabilities(self) -> bool:
        """Whether `predict` is the class of highest probability, so one call gives both.

        True for scikit-learn's classifiers but those calibrated apart from their decision
        (libsvm's `probability=True`: Platt scaling may disagree with `predict`), and for
        single-output classifiers only.
        """
        cached: bool | None = getattr(self, "_labels_follow", None)
        if cached is None:
            final = _final_estimator(self.model)
            classes = getattr(self.model, "classes_", None)
            cached = (
                isinstance(classes, np.ndarray)
                and classes.ndim == 1
                and not hasattr(final, "probability")
            )
            self._labels_follow = cached
        return cached

    def signature(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if self.booster is not None:
            native = self.native_features()
            output = probe(DEFAULT_OUTPUT, self.native_predict, native, self.native_datatype)
            return [spec(self.input_name, self.native_datatype, [-1, native])], [output]
        n = getattr(self.model, "n_features_in_", None)
        inputs = [] if n is None else [spec(self.input_name, "FP64", [-1, int(n)])]
        classes = getattr(self.model, "classes_", None)
        if classes is None:
            return inputs, [probe(DEFAULT_OUTPUT, self.model.predict, n, "FP64")]
        outputs = [spec(LABEL, oip_datatype(_labels(np.asarray(classes)).dtype), [-1])]
        if hasattr(self.model, "predict_proba"):
            outputs.append(spec(PROBABILITIES, "FP64", [-1, len(classes)]))
        return inputs, outputs


def spec(name: str, datatype: str, shape: Sequence[int]) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": [int(d) for d in shape]}


def probe(
    name: str, predict: Callable[[np.ndarray], Any], n_features: int | None, datatype: str
) -> dict[str, Any]:
    """Output `name`'s spec, found by predicting one row of zeros (FP64 [-1] when that fails)."""
    if n_features is not None:
        dtype = np.float32 if datatype == "FP32" else np.float64
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = np.asarray(predict(np.zeros((1, int(n_features)), dtype=dtype)))
            return spec(name, oip_datatype(out.dtype), [-1, *out.shape[1:]])
        except Exception:
            pass
    return spec(name, "FP64", [-1])


def _final_estimator(model: Any) -> Any:
    """The estimator that decides a pipeline's answer (the model itself when not a pipeline)."""
    while hasattr(model, "steps"):
        model = model.steps[-1][1]
    return model


def _labels(values: Any) -> np.ndarray:
    labels = np.asarray(values)
    return labels.astype(np.int64, copy=False) if labels.dtype.kind in "iu" else labels


ADAPTER = SklearnAdapter
