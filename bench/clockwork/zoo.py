"""A zoo of real models for the Clockwork experiments, built once into ``bench/.work/clockwork``.

``ensure(count)`` builds (or resumes building) a repository of ``count`` real models named as
``headway.traces`` names them (``m00000``, ...), every one taking one FP32 input of shape
``[-1, 32]`` so that one request body fits them all:

- 50% **PyTorch MLPs** (32 -> H -> H -> 4, ReLU), saved as TorchScript; H is chosen so that the
  weights take a size drawn log-uniformly from 0.5 to 20 MB (H from about 360 to 2300).
- 30% **scikit-learn random forests** with 5 to 120 trees (log-uniform) of depth 8 to 13:
  about 0.1 to 8 MB.
- 20% **scikit-learn logistic regressions** (a few kB).

Each is trained quickly (a few optimiser steps, or a small fit) on one of 16 generated
classification data sets (``make_classification``, 2,000 rows, 32 features, 4 classes).
``model.yaml`` declares the input, ``max_batch_size: 16`` (Clockwork's largest batch),
``slo_ms: 100`` and ``memory_mb``: the size of the model's weights as saved (TorchScript
parameters, pickled trees), measured here when the model is written. Each model folder also
holds ``zoo.json`` (family, parameters, size), and the repository root ``zoo.json`` all of them.

``profile(root, names)`` measures models in this process through Headway's own adapters (the
code a worker runs): LOAD (median of 3, from disk, page cache warm) and INFER at batch sizes 1,
2, 4, 8, 16 (median of 15, after one unmeasured call per size). ``gc_seconds()`` measures what a
worker adds to every LOAD that evicts: a full ``gc.collect()``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent.parent
WORK = BENCH / ".work" / "clockwork"
FEATURES = 32
CLASSES = 4
DATASETS = 16
BATCHES = (1, 2, 4, 8, 16)
#: Bump to rebuild: what a model is made of changed.
RECIPE = 1
YAML = (
    "framework: {framework}\n"
    "inputs: [{{name: input-0, datatype: FP32, shape: [-1, {features}]}}]\n"
    "max_batch_size: 16\nslo_ms: 100\nmemory_mb: {memory:.4f}\n"
)


def repository(count: int) -> Path:
    return WORK / f"zoo-{count}-r{RECIPE}"


def datasets() -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.datasets import make_classification

    out = []
    for seed in range(DATASETS):
        x, y = make_classification(
            n_samples=2000, n_features=FEATURES, n_informative=16, n_classes=CLASSES,
            random_state=seed,
        )  # fmt: skip
        out.append((x.astype(np.float32), y.astype(np.int64)))
    return out


def plan(index: int) -> dict[str, Any]:
    """What model `index` is: a pure function of the index."""
    rng = np.random.default_rng([RECIPE, index])
    kind = rng.random()
    if kind < 0.5:
        target_mb = math.exp(rng.uniform(math.log(0.5), math.log(20.0)))
        # parameters: 32H + H + H*H + H + 4H + 4 (float32)
        hidden = int((-38 + math.sqrt(38**2 + 4 * target_mb * 2**20 / 4)) / 2)
        return {"family": "mlp", "hidden": hidden, "data": int(rng.integers(DATASETS))}
    if kind < 0.8:
        trees = round(math.exp(rng.uniform(math.log(5), math.log(120))))
        depth = int(rng.integers(8, 14))
        return {
            "family": "forest",
            "trees": trees,
            "depth": depth,
            "data": int(rng.integers(DATASETS)),
        }
    return {
        "family": "logreg",
        "C": float(10 ** rng.uniform(-2, 1)),
        "data": int(rng.integers(DATASETS)),
    }


def build_one(folder: Path, spec: dict[str, Any], data: tuple[np.ndarray, np.ndarray]) -> float:
    """Train and save one model into `folder/1/`; returns its size in MB."""
    import joblib

    x, y = data
    version = folder / "1"
    version.mkdir(parents=True, exist_ok=True)
    if spec["family"] == "mlp":
        import torch

        torch.manual_seed(spec["data"] * 7919 + spec["hidden"])
        h = spec["hidden"]
        net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, h), torch.nn.ReLU(), torch.nn.Linear(h, h), torch.nn.ReLU(),
            torch.nn.Linear(h, CLASSES),
        )  # fmt: skip
        optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        for step in range(5):
            rows = slice(step * 128, (step + 1) * 128)
            loss = torch.nn.functional.cross_entropy(net(xt[rows]), yt[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        net.eval()
        path = version / "model.pt"
        torch.jit.script(net).save(str(path))
        return sum(p.numel() * p.element_size() for p in net.parameters()) / 2**20
    if spec["family"] == "forest":
        from sklearn.ensemble import RandomForestClassifier

        model: Any = RandomForestClassifier(
            n_estimators=spec["trees"], max_depth=spec["depth"], random_state=spec["data"], n_jobs=1
        ).fit(x, y)
    else:
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=spec["C"], max_iter=300).fit(x, y)
    path = version / "model.joblib"
    joblib.dump(model, path)
    return path.stat().st_size / 2**20


def ensure(count: int, log: Any = print) -> Path:
    """The repository of `count` models, building whatever is missing (resumable)."""
    root = repository(count)
    catalogue = root / "zoo.json"
    if catalogue.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    data: list[tuple[np.ndarray, np.ndarray]] | None = None
    started = time.perf_counter()
    entries = {}
    for index in range(count):
        folder = root / f"m{index:05d}"
        info = folder / "zoo.json"
        if info.exists():
            entries[folder.name] = json.loads(info.read_text())
            continue
        data = data or datasets()
        spec = plan(index)
        size = build_one(folder, spec, data[spec["data"]])
        framework = "torch" if spec["family"] == "mlp" else "sklearn"
        (folder / "model.yaml").write_text(
            YAML.format(framework=framework, features=FEATURES, memory=max(size, 0.001))
        )
        entries[folder.name] = {**spec, "size_mb": size}
        info.write_text(json.dumps(entries[folder.name]))
        if index % 50 == 49:
            log(f"  built {index + 1}/{count} models ({time.perf_counter() - started:.0f} s)")
    catalogue.write_text(json.dumps(entries, indent=0))
    return root


def catalogue(root: Path) -> dict[str, dict[str, Any]]:
    return json.loads((root / "zoo.json").read_text())  # type: ignore[no-any-return]


def profile(root: Path, names: list[str], repeats: int = 15) -> dict[str, dict[str, Any]]:
    """Per model: LOAD seconds and median INFER seconds per batch size, measured in-process
    through Headway's adapters (one thread, as a worker runs them)."""
    import gc

    from headway.adapters import adapter_class
    from headway.repository import Repository

    repo = Repository.scan(root, lazy=True)
    rng = np.random.default_rng(0)
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        config = repo.get(name)
        loads = []
        for _ in range(3):  # the median of three loads (the first is not special: nothing is
            gc.collect()  # cached in this process but the file, as in a long-running worker)
            started = time.perf_counter()
            adapter = adapter_class(config.framework)(config.to_wire())
            adapter.load()
            loads.append(time.perf_counter() - started)
        load = float(np.median(loads))
        durations = {}
        for rows in BATCHES:
            batch = {"input-0": rng.standard_normal((rows, FEATURES)).astype(np.float32)}
            adapter.predict(batch)  # the first call of a batch size is not a measurement
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                adapter.predict(batch)
                times.append(time.perf_counter() - t0)
            durations[rows] = float(np.median(times))
        out[name] = {"load_s": load, "infer_s": durations, "size_mb": config.memory_mb}
        del adapter
    return out


def gc_seconds(repeats: int = 5) -> float:
    """The median time of a full gc.collect() in this process (call it after `profile`, with
    the frameworks imported as a worker has them)."""
    import gc

    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        gc.collect()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


if __name__ == "__main__":
    import sys

    built = ensure(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
    sizes = [e["size_mb"] for e in catalogue(built).values()]
    print(f"{built}: {len(sizes)} models, {sum(sizes):.0f} MB in all, "
          f"median {np.median(sizes):.2f} MB, max {max(sizes):.1f} MB")  # fmt: skip
