"""The benchmark's models, trained once into ``bench/.work/models`` (gitignored).

- ``lr``: scikit-learn ``LogisticRegression`` on ``make_classification(n_samples=10_000,
  n_features=20, random_state=0)``, saved with joblib (``lr.joblib``). Every system answers
  ``predict_proba`` of it.
- ``mlp``: a PyTorch MLP, 20 -> 512 -> 512 -> 2 with ReLU and a softmax head, trained for a few
  epochs on the same data, saved as TorchScript (``mlp.pt``). Every system answers its output.

``ensure()`` trains what is missing and returns the paths; ``reference()`` loads both in this
process and gives the expected answers that each server's answers are checked against.
``in_process_limit()`` measures the MLP's best rows/s with no serving at all.

Run directly (``python bench/models.py``) to (re)train and print the in-process limits.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
WORK = BENCH / ".work"
MODELS = WORK / "models"
FEATURES = 20
SEED = 0
#: What a model that needs a rebuild looks like changes: bump to retrain.
RECIPE = {
    "lr": "LogisticRegression(max_iter=1000), make_classification(10_000, 20, rs=0)",
    "mlp": "20-512-512-2 relu softmax, adam 1e-3, 3 epochs, bs 256, seed 0",
    "v": 1,
}


@dataclass(frozen=True)
class ModelPaths:
    lr: Path
    mlp: Path
    rows: Path  # .npy of rows the correctness check sends (FP64, 10 x 20)


def dataset() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=10_000, n_features=FEATURES, random_state=SEED)
    return x, y


def _train_lr(x: np.ndarray, y: np.ndarray, path: Path) -> None:
    import joblib
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(max_iter=1000).fit(x, y)
    joblib.dump(model, path)


def _train_mlp(x: np.ndarray, y: np.ndarray, path: Path) -> None:
    import torch
    from torch import nn

    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(
                nn.Linear(FEATURES, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                nn.Linear(512, 2),
            )  # fmt: skip

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.layers(x), dim=1)

    model = MLP()
    features = torch.from_numpy(x.astype(np.float32))
    labels = torch.from_numpy(y.astype(np.int64))
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.NLLLoss()
    for _ in range(3):
        order = torch.randperm(len(features))
        for start in range(0, len(features), 256):
            index = order[start : start + 256]
            optimiser.zero_grad()
            loss = loss_fn(torch.log(model(features[index]) + 1e-9), labels[index])
            loss.backward()
            optimiser.step()
    model.eval()
    torch.jit.save(torch.jit.script(model), str(path))


def ensure() -> ModelPaths:
    """Train and save the models unless the same recipe already did."""
    MODELS.mkdir(parents=True, exist_ok=True)
    paths = ModelPaths(MODELS / "lr.joblib", MODELS / "mlp.pt", MODELS / "rows.npy")
    stamp = MODELS / "recipe.json"
    fresh = stamp.exists() and json.loads(stamp.read_text()) == RECIPE
    if fresh and paths.lr.exists() and paths.mlp.exists() and paths.rows.exists():
        return paths
    x, y = dataset()
    _train_lr(x, y, paths.lr)
    _train_mlp(x, y, paths.mlp)
    np.save(paths.rows, x[:10])
    stamp.write_text(json.dumps(RECIPE))
    return paths


def reference(paths: ModelPaths) -> dict[str, np.ndarray]:
    """Expected answers for the check rows: LR ``predict_proba`` (FP64), MLP output (FP32)."""
    import joblib
    import torch

    rows = np.load(paths.rows)
    lr = joblib.load(paths.lr)
    mlp = torch.jit.load(str(paths.mlp))
    with torch.inference_mode():
        mlp_out = mlp(torch.from_numpy(rows.astype(np.float32))).numpy()
    return {"lr": lr.predict_proba(rows), "mlp": mlp_out}


def in_process_limit(
    paths: ModelPaths, seconds: float = 0.5, threads: int = 1
) -> dict[str, float | int]:
    """The MLP's rows/s at each batch size, in this process, no serving: best size and rate."""
    import torch

    torch.set_num_threads(threads)
    mlp = torch.jit.load(str(paths.mlp))
    rng = np.random.default_rng(SEED)
    rates: dict[int, float] = {}
    with torch.inference_mode():
        for size in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
            x = torch.from_numpy(rng.standard_normal((size, FEATURES)).astype(np.float32))
            for _ in range(3):
                mlp(x)
            calls, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds:
                mlp(x)
                calls += 1
            rates[size] = calls * size / elapsed
    best = max(rates, key=rates.__getitem__)
    out: dict[str, float | int] = {
        "best_batch": best,
        "rows_per_s": round(rates[best], 1),
        "threads": threads,
    }
    out.update({f"rows_per_s@{k}": round(v, 1) for k, v in rates.items()})
    return out


if __name__ == "__main__":
    found = ensure()
    print(found)
    print(in_process_limit(found))
