"""XGBoost: a native Booster (`*.json`, `*.ubj`, `*.model`) or a pickled scikit-learn API model.

A Booster answers `output-0` (`inplace_predict`: probabilities, margins or values, as its objective
says; FP32). A pickled `XGBClassifier`/`XGBRegressor` answers like any scikit-learn estimator
(`label` and `probabilities`, or `output-0`). Option `threads` (default 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xgboost as xgb

from headway.adapters.sklearn_adapter import SklearnAdapter


class XGBoostAdapter(SklearnAdapter):
    native = ("*.json", "*.ubj", "*.model")
    native_datatype = "FP32"
    booster: xgb.Booster | None = None

    def load_native(self, path: Path) -> xgb.Booster:
        booster = xgb.Booster(model_file=str(path))
        booster.set_param({"nthread": self.threads})
        return booster

    def native_predict(self, x: np.ndarray) -> np.ndarray:
        assert self.booster is not None
        return np.asarray(self.booster.inplace_predict(x))

    def native_features(self) -> int:
        assert self.booster is not None
        return self.booster.num_features()


ADAPTER = XGBoostAdapter
