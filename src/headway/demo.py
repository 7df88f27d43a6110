"""A demo model repository: small real models trained in seconds on data that ships with
scikit-learn, one or more per framework, for the quickstart, demo traffic, benchmarks and tests
(`build_demo_repository`). Models whose framework is not installed are skipped.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from headway.adapters.base import DEFAULT_INPUT, DEFAULT_OUTPUT
from headway.errors import ConfigError

SAMPLE_ROWS = 64


@dataclass(frozen=True)
class DemoModel:
    """A demo model and held-out rows to query it with.

    `inputs` are rows the model never saw in training, in the dtype its model.yaml declares;
    `labels` their true classes. The predicted class is output `label_output`, or its argmax
    along axis 1 when `argmax` (native boosters answer probabilities only).
    """

    name: str
    framework: str
    inputs: np.ndarray
    labels: np.ndarray
    input_name: str = DEFAULT_INPUT
    label_output: str = "label"
    argmax: bool = False

    def request(self, rows: int | None = None) -> dict[str, np.ndarray]:
        """The inputs of a request for the first `rows` sample rows (all when None)."""
        return {self.input_name: self.inputs[:rows]}

    def predicted(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The classes that a response's outputs predict."""
        answer = np.asarray(outputs[self.label_output])
        return answer.argmax(axis=1) if self.argmax else answer

    def accuracy(self, outputs: Mapping[str, np.ndarray]) -> float:
        """The fraction of the sample rows that a response for all of them got right."""
        return float(np.mean(self.predicted(outputs) == self.labels))


def build_demo_repository(
    root: Path, *, progress: Callable[[str], None] | None = None
) -> dict[str, DemoModel]:
    """Train the demo models and write them under `root` as `<name>/model.yaml` + `<name>/1/`.

    Returns each model's name -> its `DemoModel` (sample rows and expected labels). Existing
    files of the same names are overwritten; anything else under `root` is left alone.
    """
    if importlib.util.find_spec("sklearn") is None:
        raise ConfigError("the demo needs scikit-learn: pip install 'headway[sklearn]'")
    root = Path(root)
    report = progress or (lambda message: None)
    built: dict[str, DemoModel] = {}
    for name, needs, build in _BUILDERS:
        missing = [package for package in needs if importlib.util.find_spec(package) is None]
        if missing:
            report(f"skipped {name}: {', '.join(missing)} not installed")
            continue
        started = time.perf_counter()
        model = build(root)
        built[model.name] = model
        report(f"built {model.name} ({model.framework}) in {time.perf_counter() - started:.1f}s")
    return built


def _split(data: tuple[Any, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    x, y = data
    rows = min(SAMPLE_ROWS, len(y) // 3)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=rows, stratify=y, random_state=0
    )
    return x_train, x_test, y_train, y_test


def _folder(root: Path, name: str, config: dict[str, Any]) -> Path:
    version = root / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (root / name / "model.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return version


def _input(name: str, datatype: str, features: int) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": [-1, features]}


def _digits_logreg(root: Path) -> DemoModel:
    import joblib
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x_train, x_test, y_train, y_test = _split(load_digits(return_X_y=True))
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    model.fit(x_train, y_train)
    folder = _folder(root, "digits-logreg", {"framework": "sklearn", "cache": True})
    joblib.dump(model, folder / "model.joblib")
    return DemoModel("digits-logreg", "sklearn", x_test, y_test)


def _iris_forest(root: Path) -> DemoModel:
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    x_train, x_test, y_train, y_test = _split(load_iris(return_X_y=True))
    model = RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0)
    model.fit(x_train, y_train)
    joblib.dump(model, _folder(root, "iris-forest", {"framework": "sklearn"}) / "model.joblib")
    return DemoModel("iris-forest", "sklearn", x_test, y_test)


def _breast_cancer_mlp(root: Path) -> DemoModel:
    import torch
    from sklearn.datasets import load_breast_cancer

    x_train, x_test, y_train, y_test = _split(load_breast_cancer(return_X_y=True))
    x = torch.tensor(x_train, dtype=torch.float32)
    y = torch.tensor(y_train, dtype=torch.int64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _mlp_class()(x.mean(dim=0), x.std(dim=0), classes=2)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(60):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model.logits(x), y).backward()
            optimizer.step()
    config = {
        "framework": "torch",
        "inputs": [_input(DEFAULT_INPUT, "FP32", 30)],
        "outputs": [
            {"name": "label", "datatype": "INT64", "shape": [-1]},
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, 2]},
        ],
    }
    folder = _folder(root, "breast-cancer-mlp", config)
    _script(model.eval()).save(str(folder / "model.pt"))
    return DemoModel("breast-cancer-mlp", "torch", x_test.astype(np.float32), y_test)


def _wine_onnx(root: Path) -> DemoModel:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x_train, x_test, y_train, y_test = _split(load_wine(return_X_y=True))
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    model.fit(x_train, y_train)
    graph = convert_sklearn(
        model,
        initial_types=[("features", FloatTensorType([None, 13]))],
        options={id(model): {"zipmap": False}},
    )
    config = {"framework": "onnx", "inputs": [_input("features", "FP32", 13)]}
    (_folder(root, "wine-onnx", config) / "model.onnx").write_bytes(graph.SerializeToString())
    return DemoModel("wine-onnx", "onnx", x_test.astype(np.float32), y_test, "features")


_CENTROID_PY = '''\
"""A nearest-centroid classifier in plain numpy: the demo of the `python` framework."""

import numpy as np


class NearestCentroid:
    inputs = [{"name": "input-0", "datatype": "FP64", "shape": [-1, 4]}]
    outputs = [{"name": "label", "datatype": "INT64", "shape": [-1]}]

    def load(self, path):
        self.centroids = np.load(path / "centroids.npy")

    def predict(self, batch):
        distances = ((batch[:, None, :] - self.centroids[None, :, :]) ** 2).sum(axis=2)
        return {"label": distances.argmin(axis=1).astype(np.int64)}
'''


def _iris_centroid(root: Path) -> DemoModel:
    from sklearn.datasets import load_iris

    x_train, x_test, y_train, y_test = _split(load_iris(return_X_y=True))
    centroids = np.stack([x_train[y_train == c].mean(axis=0) for c in np.unique(y_train)])
    config = {"framework": "python", "entrypoint": "model.py:NearestCentroid"}
    folder = _folder(root, "iris-centroid", config)
    (root / "iris-centroid" / "model.py").write_text(_CENTROID_PY)
    np.save(folder / "centroids.npy", centroids)
    return DemoModel("iris-centroid", "python", x_test, y_test)


def _iris_xgboost(root: Path) -> DemoModel:
    import xgboost as xgb
    from sklearn.datasets import load_iris

    x_train, x_test, y_train, y_test = _split(load_iris(return_X_y=True))
    model = xgb.XGBClassifier(n_estimators=20, max_depth=3, n_jobs=1, random_state=0)
    model.fit(x_train, y_train)
    config = {"framework": "xgboost", "inputs": [_input(DEFAULT_INPUT, "FP32", 4)]}
    model.get_booster().save_model(str(_folder(root, "iris-xgboost", config) / "model.json"))
    return DemoModel(
        "iris-xgboost",
        "xgboost",
        x_test.astype(np.float32),
        y_test,
        label_output=DEFAULT_OUTPUT,
        argmax=True,
    )


def _wine_lightgbm(root: Path) -> DemoModel:
    import lightgbm as lgb
    from sklearn.datasets import load_wine

    x_train, x_test, y_train, y_test = _split(load_wine(return_X_y=True))
    model = lgb.LGBMClassifier(
        n_estimators=30, num_leaves=8, min_child_samples=5, n_jobs=1, random_state=0, verbose=-1
    )
    model.fit(x_train, y_train)
    folder = _folder(root, "wine-lightgbm", {"framework": "lightgbm"})
    model.booster_.save_model(str(folder / "model.txt"))
    return DemoModel(
        "wine-lightgbm", "lightgbm", x_test, y_test, label_output=DEFAULT_OUTPUT, argmax=True
    )


def _mlp_class() -> type:
    import torch

    class MLP(torch.nn.Module):
        """Standardises its input (the training set's statistics) and classifies it."""

        def __init__(self, mean: torch.Tensor, std: torch.Tensor, classes: int) -> None:
            super().__init__()
            self.register_buffer("mean", mean)
            self.register_buffer("std", std.clamp_min(1e-6))
            self.net = torch.nn.Sequential(
                torch.nn.Linear(mean.numel(), 32), torch.nn.ReLU(), torch.nn.Linear(32, classes)
            )

        def logits(self, x: torch.Tensor) -> torch.Tensor:
            # mean and std are buffers, which torch types as Tensor | Module
            logits: torch.Tensor = self.net((x - self.mean) / self.std)  # type: ignore[operator]
            return logits

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            logits = self.logits(x)
            return {"label": logits.argmax(dim=1), "probabilities": logits.softmax(dim=1)}

    return MLP


def _script(model: Any) -> Any:
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated in 2.x
        return torch.jit.script(model)


#: The demo's text generator (`headway.textgen`), and the prompts its traffic sends.
GENERATOR = "tiny-gpt"
PROMPTS = (
    "Return the",
    "Create a",
    "The socket",
    "Read the",
    "This module",
    "Format the",
    "If the",
    "Set the",
)


def build_generator(root: Path, *, progress: Callable[[str], None] | None = None) -> str:
    """Write the demo's text generator under `root` (trained on the standard library's
    docstrings, or its weights from `root/.cache` when an earlier demo trained the same);
    returns its name. Needs torch."""
    from headway import textgen

    textgen.build(
        root,
        name=GENERATOR,
        cache=root / ".cache",
        generation={"max_sequences": 8, "max_parts": 48},
        extra={"ttft_ms": 2000, "tpot_ms": 250},
        progress=progress,
    )
    return GENERATOR


_BUILDERS: list[tuple[str, tuple[str, ...], Callable[[Path], DemoModel]]] = [
    ("digits-logreg", (), _digits_logreg),
    ("iris-forest", (), _iris_forest),
    ("iris-centroid", (), _iris_centroid),
    ("breast-cancer-mlp", ("torch",), _breast_cancer_mlp),
    ("wine-onnx", ("onnxruntime", "skl2onnx"), _wine_onnx),
    ("iris-xgboost", ("xgboost",), _iris_xgboost),
    ("wine-lightgbm", ("lightgbm",), _wine_lightgbm),
]
