"""LightGBM: a native Booster (`*.txt`, `*.model`) or a pickled scikit-learn API model.

A Booster answers `output-0` (`predict`: probabilities or values, as its objective says; FP64).
A pickled `LGBMClassifier`/`LGBMRegressor` answers like any scikit-learn estimator (`label` and
`probabilities`, or `output-0`). Option `threads` (default 1).
"""

from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np

from headway.adapters.sklearn_adapter import SklearnAdapter


class LightGBMAdapter(SklearnAdapter):
    native = ("*.txt", "*.model")
    booster: lgb.Booster | None = None

    def load_native(self, path: Path) -> lgb.Booster:
        return lgb.Booster(model_file=str(path))

    def native_predict(self, x: np.ndarray) -> np.ndarray:
        assert self.booster is not None
        return np.asarray(self.booster.predict(x, num_threads=self.threads))

    def native_features(self) -> int:
        assert self.booster is not None
        return self.booster.num_feature()


ADAPTER = LightGBMAdapter
