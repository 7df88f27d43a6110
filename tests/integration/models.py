"""Real models for the integration tests, trained on data that ships with scikit-learn.

Each builder writes one model folder and returns (rows, expected outputs) computed by the
framework itself, in this process, so the server's answers can be checked against them.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import joblib
import numpy as np
import orjson
import yaml
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

from headway.launcher import ServerProcess

Expected = tuple[np.ndarray, dict[str, np.ndarray]]


def _folder(root: Path, name: str, yaml: str) -> Path:
    version = root / name / "1"
    version.mkdir(parents=True)
    (root / name / "model.yaml").write_text(yaml)
    return version


@functools.cache
def _digits_logreg() -> LogisticRegression:
    """Fitted once per process: many tests serve this model, and none changes it."""
    x, y = load_digits(return_X_y=True)
    return LogisticRegression(max_iter=2000).fit(x[:1500], y[:1500])


def digits_logreg(root: Path, name: str = "digits-logreg", extra: str = "") -> Expected:
    x, _ = load_digits(return_X_y=True)
    model = _digits_logreg()
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


class Held:
    """Sleeps `seconds` per batch, as Sleeper; a batch that is not all zeros (not a warm-up
    run) first touches `started` in its folder and waits for `release` there (30 s at most):
    a long action that lasts until the test has seen what it waits for."""

    def load(self, path):
        self.seconds = float((path / "seconds.txt").read_text())
        self.started, self.release = path / "started", path / "release"

    def predict(self, batch):
        if batch.any():
            self.started.touch()
            give_up = time.monotonic() + 30.0
            while not self.release.exists() and time.monotonic() < give_up:
                time.sleep(0.01)
        time.sleep(self.seconds)
        return batch.sum(axis=1, keepdims=True)


class Picky:
    """Doubles its batch, and raises on a negative input: a model that fails on some rows."""

    def predict(self, batch):
        if (batch < 0).any():
            raise ValueError("negative input")
        return batch * 2


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


SCALED_FLOW = """
import numpy as np
from headway.flows import Flow, Model, Table


def scale(table: Table) -> list[np.ndarray]:
    return list(np.stack(table.column("x")).astype(np.float32) * 3)


flow = Flow("scaled", {"x": np.ndarray})
flow.map(scale, names=["y"], batching=True).map(
    Model("doubler", {"output-0": np.ndarray}, inputs={"input-0": "y"})
)
"""


def scaled_flow(folder: Path) -> str:
    """A two-operator flow over `doubler` (a map, then the model), written into `folder`;
    returns its spec for an app's `flow`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scaled.py").write_text(SCALED_FLOW)
    return f"{folder / 'scaled.py'}:flow"


def sleeper(root: Path, name: str, seconds: float, extra: str = "", entry: str = "Sleeper") -> Path:
    """A model that sleeps `seconds` per batch (`entry`: Sleeper, or Held); its version folder."""
    folder = python_model(root, name, entry, extra)
    (folder / "seconds.txt").write_text(str(seconds))
    return folder


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


# -- applications (tests/integration/test_apps.py) ------------------------------------------------

#: Digits rows [:DIGITS_TRAIN] train the application models; the rest are queries and feedback.
DIGITS_TRAIN = 900

APP_MODELS = '''
import time

import joblib
import numpy as np


class Flaky:
    """A trained digits classifier that answers wrongly, (label + 1) % 10, once the file
    `degraded` appears in its version folder."""

    def load(self, path):
        self.model = joblib.load(path / "model.joblib")
        self.marker = path / "degraded"

    def predict(self, batch):
        labels = self.model.predict(batch).astype(np.int64)
        return (labels + 1) % 10 if self.marker.exists() else labels


class SlowClassifier:
    """A trained digits classifier that sleeps `seconds.txt` per batch (read at each batch:
    a test sets it from what it measured)."""

    def load(self, path):
        self.model = joblib.load(path / "model.joblib")
        self.seconds = path / "seconds.txt"

    def predict(self, batch):
        time.sleep(float(self.seconds.read_text()))
        return self.model.predict(batch).astype(np.int64)
'''


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train rows, train labels, query rows, query labels) of scikit-learn's digits."""
    x, y = load_digits(return_X_y=True)
    return x[:DIGITS_TRAIN], y[:DIGITS_TRAIN], x[DIGITS_TRAIN:], y[DIGITS_TRAIN:]


def digits_classifier(root: Path, name: str, estimator: Any, *, shift: int = 0) -> Any:
    """A scikit-learn model fitted on the digits, its labels shifted by `shift` (mod 10): a
    model that "speaks another dialect". Returns the fitted estimator."""
    x, y, _, _ = digits_split()
    model = estimator.fit(x, (y + shift) % 10)
    joblib.dump(model, _folder(root, name, "framework: sklearn\n") / "model.joblib")
    return model


def digits_python(
    root: Path, name: str, entry: str, estimator: Any, *, seconds: float = 0.0, extra: str = ""
) -> tuple[Any, Path]:
    """A python-framework model (`Flaky` or `SlowClassifier`) wrapping a classifier fitted on
    the digits; returns the estimator and the version folder (where `degraded` goes)."""
    x, y, _, _ = digits_split()
    model = estimator.fit(x, y)
    yaml = (
        f"framework: python\nentrypoint: app_models.py:{entry}\n"
        "inputs: [{name: input-0, datatype: FP64, shape: [-1, 64]}]\n" + extra
    )
    folder = _folder(root, name, yaml)
    (folder / "app_models.py").write_text(APP_MODELS)
    (folder / "seconds.txt").write_text(str(seconds))
    joblib.dump(model, folder / "model.joblib")
    return model, folder


class AppClient:
    """JSON over HTTP to one server's application API; one keep-alive client per thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()
        self._clients: list[httpx.Client] = []

    def call(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = httpx.Client(timeout=30)
            self._clients.append(client)
        content = None if body is None else orjson.dumps(body)
        response = client.request(method, self.url + path, content=content)
        assert response.status_code == status, f"{method} {path}: {response.text}"
        return response.json() if response.content else None

    def predict(self, app: str, row: np.ndarray, user: str | None = None) -> Any:
        body = {"input": row.tolist(), **({"user": user} if user else {})}
        return self.call("POST", f"/apps/{app}/predict", body)

    def feedback(self, app: str, query_id: str, label: int) -> Any:
        return self.call("POST", f"/apps/{app}/feedback", {"query_id": query_id, "label": label})

    def weights(self, app: str) -> dict[str, float]:
        models = self.call("GET", f"/apps/{app}")["statistics"]["models"]
        return {m["model"]: m["weight"] for m in models}

    def close(self) -> None:
        for client in self._clients:
            client.close()


def infer_body(row: np.ndarray) -> bytes:
    """The JSON of an inference request for one digits row (FP64, as the app models take it)."""
    return orjson.dumps({"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP64",
                                     "data": row.tolist()}]})  # fmt: skip


def warm_models(url: str, names: list[str], timeout: float = 30.0) -> None:
    """Wait until each model answers: on a busy machine a cold first run can inflate a model's
    latency estimate for a moment, and the scheduler turns requests away early (503) until then."""
    body = infer_body(digits_split()[2][0])
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            response = httpx.post(f"{url}/v2/models/{name}/infer", content=body, timeout=30)
            if response.status_code == 200:
                break
            assert time.monotonic() < deadline, f"{name} does not answer: {response.text}"
            time.sleep(0.1)


def serve_apps(
    root: Path, tmp: Path, apps: dict[str, Any], name: str, workers: int = 2
) -> ServerProcess:
    """`headway serve` with `apps` written to tmp/headway.yaml and its state in tmp/state.db."""
    (tmp / "headway.yaml").write_text(yaml.safe_dump({"apps": apps}))
    return ServerProcess(
        root, state=tmp / "state.db", workers=workers,
        extra=["--config", str(tmp / "headway.yaml")], log=tmp / f"{name}.log",
    )  # fmt: skip


def batches_run(url: str, model: str) -> float:
    """How many INFER actions of `model` ran, warm-up runs and probes included: the traffic's
    (Prometheus' headway_batch_size_count) and the measuring runs (headway_measuring_runs)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    total = 0.0
    for series in ("headway_batch_size_count", "headway_measuring_runs_total"):
        found = re.search(rf'^{series}\{{model="{model}"\}} (\S+)$', text, re.M)
        total += float(found.group(1)) if found else 0.0
    return total
