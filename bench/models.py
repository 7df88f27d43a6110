"""The benchmark's models, trained once into ``bench/.work/models`` (gitignored).

- ``lr``: scikit-learn ``LogisticRegression`` on ``make_classification(n_samples=10_000,
  n_features=20, random_state=0)``, saved with joblib (``lr.joblib``). Every system answers
  ``predict_proba`` of it.
- ``mlp``: a PyTorch MLP, 20 -> 512 -> 512 -> 2 with ReLU and a softmax head, trained for a few
  epochs on the same data, saved as TorchScript (``mlp.pt``). Every system answers its output.
- ``wide``: the same recipe 20 -> 2048 -> 2048 -> 2 (``wide.pt``), the ``overload`` scenario's
  model: compute-bound (one thread, no serving: ~1,700 rows/s at batch 1, ~7,000 at 32, ~8,500 at
  64 on the suite's machine), so that a server's capacity on it is a few thousand requests/s and
  twice that stays well within what the load generator sends on schedule on the same cores.
  Every system serves it through its ``mlp`` code path (TorchScript, ``--path wide.pt``).

``ensure()`` trains what is missing and returns the paths; ``reference()`` loads them in this
process and gives the expected answers that each server's answers are checked against.
``in_process_limit()`` measures an MLP's best rows/s with no serving at all.

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
    "wide": "20-2048-2048-2 relu softmax, adam 1e-3, 3 epochs, bs 256, seed 0",
    "v": 2,
}


@dataclass(frozen=True)
class ModelPaths:
    lr: Path
    mlp: Path
    wide: Path  # the overload scenario's compute-bound MLP (served as each system's "mlp")
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


#: Hidden width of ``mlp`` and of ``wide``.
WIDTH = {"mlp": 512, "wide": 2048}


def _train_mlp(x: np.ndarray, y: np.ndarray, path: Path, width: int = 512) -> None:
    import torch
    from torch import nn

    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(
                nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                nn.Linear(width, 2),
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
    paths = ModelPaths(MODELS / "lr.joblib", MODELS / "mlp.pt", MODELS / "wide.pt",
                       MODELS / "rows.npy")  # fmt: skip
    stamp = MODELS / "recipe.json"
    done = json.loads(stamp.read_text()) if stamp.exists() else {}
    if done == RECIPE and all(p.exists() for p in (paths.lr, paths.mlp, paths.wide, paths.rows)):
        return paths
    x, y = dataset()
    # retrain only what changed (a new model must not change the ones measured before)
    if done.get("lr") != RECIPE["lr"] or not paths.lr.exists():
        _train_lr(x, y, paths.lr)
    for kind in ("mlp", "wide"):
        path = getattr(paths, kind)
        if done.get(kind) != RECIPE[kind] or not path.exists():
            _train_mlp(x, y, path, WIDTH[kind])
    np.save(paths.rows, x[:10])
    stamp.write_text(json.dumps(RECIPE))
    return paths


def reference(paths: ModelPaths) -> dict[str, np.ndarray]:
    """Expected answers for the check rows: LR ``predict_proba`` (FP64), the MLPs' output
    (FP32): keys ``lr``, ``mlp``, ``wide``."""
    import joblib
    import torch

    rows = np.load(paths.rows)
    lr = joblib.load(paths.lr)
    out = {"lr": lr.predict_proba(rows)}
    for kind in ("mlp", "wide"):
        module = torch.jit.load(str(getattr(paths, kind)))
        with torch.inference_mode():
            out[kind] = module(torch.from_numpy(rows.astype(np.float32))).numpy()
    return out


def in_process_limit(
    paths: ModelPaths,
    seconds: float = 0.5,
    threads: int = 1,
    kind: str = "mlp",
    sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
) -> dict[str, float | int]:
    """An MLP's (``kind``: ``mlp`` or ``wide``) rows/s at each batch size, in this process, no
    serving: best size and rate."""
    import torch

    torch.set_num_threads(threads)
    mlp = torch.jit.load(str(getattr(paths, kind)))
    rng = np.random.default_rng(SEED)
    rates: dict[int, float] = {}
    with torch.inference_mode():
        for size in sizes:
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
    print("mlp", in_process_limit(found))
    print("wide", in_process_limit(found, kind="wide", sizes=(1, 4, 16, 32, 64)))
