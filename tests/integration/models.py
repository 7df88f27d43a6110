"""Real models for the integration tests, trained on data that ships with scikit-learn.

Each builder writes one model folder and returns (rows, expected outputs) computed by the
framework itself, in this process, so the server's answers can be checked against them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

Expected = tuple[np.ndarray, dict[str, np.ndarray]]


def _folder(root: Path, name: str, yaml: str) -> Path:
    version = root / name / "1"
    version.mkdir(parents=True)
    (root / name / "model.yaml").write_text(yaml)
    return version


def digits_logreg(root: Path, name: str = "digits-logreg", extra: str = "") -> Expected:
    x, y = load_digits(return_X_y=True)
    model = LogisticRegression(max_iter=2000).fit(x[:1500], y[:1500])
    joblib.dump(model, _folder(root, name, "framework: sklearn\n" + extra) / "model.joblib")
    rows = x[1500:1540]
    return rows, {"label": model.predict(rows), "probabilities": model.predict_proba(rows)}


def iris_forest(root: Path) -> Expected:
    x, y = load_iris(return_X_y=True)
    model = RandomForestClassifier(n_estimators=10, random_state=0).fit(x, y)
    joblib.dump(model, _folder(root, "iris-forest", "framework: sklearn\n") / "model.pkl")
    rows = x[::10]
    return rows, {"label": model.predict(rows), "probabilities": model.predict_proba(rows)}


def cancer_torch(root: Path) -> Expected:
    import torch

    x, _ = load_breast_cancer(return_X_y=True)
    x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(30, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    net.eval()
    scripted = torch.jit.script(net)
    yaml = "framework: torch\ninputs: [{name: input-0, datatype: FP32, shape: [-1, 30]}]\n"
    scripted.save(str(_folder(root, "cancer-torch", yaml) / "model.pt"))
    rows = x[:20]
    with torch.inference_mode():
        out = net(torch.from_numpy(rows)).numpy()
    return rows, {"output-0": out}


def wine_onnx(root: Path) -> Expected:
    from skl2onnx import to_onnx

    x, y = load_wine(return_X_y=True)
    x = x.astype(np.float32)
    model = LogisticRegression(max_iter=5000).fit(x, y)
    onx = to_onnx(model, x[:1], options={id(model): {"zipmap": False}}, target_opset=17)
    path = _folder(root, "wine-onnx", "framework: onnx\n") / "model.onnx"
    path.write_bytes(onx.SerializeToString())
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rows = x[::9]
    names = [o.name for o in session.get_outputs()]
    outs = session.run(None, {session.get_inputs()[0].name: rows})
    return rows, dict(zip(names, outs, strict=True))


def iris_xgboost(root: Path) -> Expected:
    import xgboost

    x, y = load_iris(return_X_y=True)
    booster = xgboost.train(
        {"objective": "multi:softprob", "num_class": 3, "max_depth": 2},
        xgboost.DMatrix(x, label=y),
        num_boost_round=5,
    )
    booster.save_model(str(_folder(root, "iris-xgboost", "framework: xgboost\n") / "model.json"))
    rows = x[::7]
    return rows, {"output-0": booster.predict(xgboost.DMatrix(rows))}


def wine_lightgbm(root: Path) -> Expected:
    import lightgbm

    x, y = load_wine(return_X_y=True)
    booster = lightgbm.train(
        {"objective": "multiclass", "num_class": 3, "verbose": -1, "num_leaves": 4},
        lightgbm.Dataset(x, label=y),
        num_boost_round=5,
    )
    booster.save_model(str(_folder(root, "wine-lightgbm", "framework: lightgbm\n") / "model.txt"))
    rows = x[::9]
    return rows, {"output-0": booster.predict(rows)}


PYTHON_MODELS = '''
import time
import numpy as np


class Doubler:
    def load(self, path):
        self.factor = 2.0

    def predict(self, batch):
        return batch * self.factor


class Sleeper:
    """Sleeps `seconds` per batch: a model whose latency is known."""

    def load(self, path):
        self.seconds = float((path / "seconds.txt").read_text())

    def predict(self, batch):
        time.sleep(self.seconds)
        return batch.sum(axis=1, keepdims=True)


class Broken:
    def load(self, path):
        raise RuntimeError("weights file is corrupt")

    def predict(self, batch):
        return batch
'''


def python_model(root: Path, name: str, entry: str, extra: str = "") -> Path:
    yaml = (
        f"framework: python\nentrypoint: models.py:{entry}\n"
        "inputs: [{name: input-0, datatype: FP32, shape: [-1, 4]}]\n" + extra
    )
    folder = _folder(root, name, yaml)
    (folder / "models.py").write_text(PYTHON_MODELS)
    return folder


def sleeper(root: Path, name: str, seconds: float, extra: str = "") -> None:
    folder = python_model(root, name, "Sleeper", extra)
    (folder / "seconds.txt").write_text(str(seconds))


BUILDERS: dict[str, Callable[[Path], Expected]] = {
    "digits-logreg": digits_logreg,
    "iris-forest": iris_forest,
    "cancer-torch": cancer_torch,
    "wine-onnx": wine_onnx,
    "iris-xgboost": iris_xgboost,
    "wine-lightgbm": wine_lightgbm,
}


def build(root: Path) -> dict[str, Any]:
    """The shared test repository; returns the in-process answers per framework model."""
    expected = {name: builder(root) for name, builder in BUILDERS.items()}
    python_model(root, "doubler", "Doubler")
    python_model(root, "broken", "Broken")
    sleeper(root, "slow", 0.2)
    digits_logreg(root, "digits-cached", extra="cache: true\n")
    return expected
