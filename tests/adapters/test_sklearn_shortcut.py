"""A LogisticRegression answers without scikit-learn's per-call input checks, and identically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headway.adapters import adapter_class
from headway.adapters.sklearn_adapter import SklearnAdapter
from headway.adapters.sklearn_linear import linear_shortcut
from headway.repository import read_model

joblib = pytest.importorskip("joblib")
datasets = pytest.importorskip("sklearn.datasets")
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402


def served(root: Path, name: str, model: Any) -> SklearnAdapter:
    version = root / name / "1"
    version.mkdir(parents=True)
    (root / name / "model.yaml").write_text("framework: sklearn\n")
    joblib.dump(model, version / "model.joblib")
    config = read_model(root / name)
    adapter = adapter_class(config.framework)(config.to_wire())
    assert isinstance(adapter, SklearnAdapter)
    adapter.load()
    return adapter


def fitted(dataset: str, **params: Any) -> tuple[LogisticRegression, np.ndarray]:
    x, y = getattr(datasets, f"load_{dataset}")(return_X_y=True)
    x = StandardScaler().fit_transform(x)
    return LogisticRegression(max_iter=2000, **params).fit(x, y), x


@pytest.mark.parametrize("dataset", ["breast_cancer", "wine", "digits"])  # 2, 3 and 10 classes
def test_answers_are_scikit_learns_bit_for_bit(tmp_path: Path, dataset: str) -> None:
    model, x = fitted(dataset)
    adapter = served(tmp_path, dataset, model)
    assert adapter.shortcut is not None
    for rows in (x[:1], x[7:8], x[:5], x):
        out = adapter.predict({"input-0": rows})
        np.testing.assert_array_equal(out["probabilities"], model.predict_proba(rows))
        np.testing.assert_array_equal(out["label"], model.predict(rows))
        alone = adapter.predict({"input-0": rows}, ["label"])
        np.testing.assert_array_equal(alone["label"], model.predict(rows))
        assert alone["label"].dtype == out["label"].dtype == np.int64


def test_checked_input_skips_scikit_learns_checks(tmp_path: Path) -> None:
    model, x = fitted("breast_cancer")
    adapter = served(tmp_path, "cancer", model)
    calls: list[str] = []
    proba, predict = model.predict_proba, model.predict

    def counted_proba(rows: np.ndarray) -> np.ndarray:
        calls.append("predict_proba")
        return proba(rows)  # type: ignore[no-any-return]

    def counted_predict(rows: np.ndarray) -> np.ndarray:
        calls.append("predict")
        return predict(rows)  # type: ignore[no-any-return]

    adapter.model.predict_proba = counted_proba
    adapter.model.predict = counted_predict
    adapter.predict({"input-0": x[:3]})
    adapter.predict({"input-0": x[:3]}, ["label"])
    assert calls == []
    # what the controller's checks let through but the shortcut does not take: scikit-learn
    # converts FP32 and refuses NaN, with its own message
    adapter.predict({"input-0": x[:3].astype(np.float32)})
    assert calls == ["predict_proba"]
    with pytest.raises(ValueError, match="NaN"):
        adapter.predict({"input-0": np.full((1, x.shape[1]), np.nan)})


def test_only_a_plain_logistic_regression_that_agrees_takes_the_shortcut(tmp_path: Path) -> None:
    model, x = fitted("wine")

    class Subclass(LogisticRegression):
        pass

    assert linear_shortcut(Subclass(max_iter=2000).fit(x, model.predict(x))) is None
    assert linear_shortcut(make_pipeline(StandardScaler(), model)) is None
    assert linear_shortcut(LogisticRegression()) is None  # not fitted
    disagreeing = fitted("wine")[0]
    disagreeing.predict_proba = lambda rows: model.predict_proba(rows) + 1e-12  # type: ignore[method-assign]
    assert linear_shortcut(disagreeing) is None
    assert served(tmp_path, "wine", model).shortcut is not None
