"""The example flows (`examples/flows/`), imported by path, and their trained repository."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from headway.flows import Flow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "flows"
NAMES = ("cascade", "ensemble", "recommender", "heavy_tail", "chain", "selection")
APPS = {"cascade": "cascade", "ensemble": "ensemble", "recommender": "recommender",
        "heavy_tail": "heavy-tail", "chain": "chain", "selection": "selection"}  # fmt: skip


def module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"flows_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec.loader.exec_module(loaded)
    finally:
        sys.path.remove(str(EXAMPLES))
    return loaded


models = module("models")


def flow(name: str) -> Flow:
    found = module(name).flow
    assert isinstance(found, Flow)
    return found


def inputs(name: str, count: int) -> list[Any]:
    """Input rows for an example: digit images, user ids (some unknown) or numbers."""
    if name == "recommender":
        return [str(u) for u in range(count - 1)] + ["nobody"]
    if name == "heavy_tail":
        return [float(i) / 4 for i in range(count)]
    return [row for row in models.queries()[:count]]


def plain(value: Any) -> Any:
    """A JSON-like value, with arrays as lists (what the server answers)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def same(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-9 (a model may round a batch's rows differently from a single row)."""
    a, b = plain(a), plain(b)
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, int | float)
            and isinstance(b, int | float)
            and abs(a - b) <= 1e-9 * max(1.0, abs(a))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
