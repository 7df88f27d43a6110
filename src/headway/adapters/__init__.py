"""Adapters: one small module per framework, imported only when a worker needs it."""

from __future__ import annotations

import importlib

from headway.adapters.base import Adapter
from headway.errors import ConfigError

_EXTRAS = {
    "sklearn": "sklearn",
    "torch": "torch",
    "onnx": "onnx",
    "xgboost": "xgboost",
    "lightgbm": "lightgbm",
}


def adapter_class(framework: str) -> type[Adapter]:
    """The adapter class for a framework; a clear error when its extra is not installed."""
    try:
        module = importlib.import_module(f"headway.adapters.{framework}_adapter")
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get(framework)
        hint = f"; install it with: pip install 'headway[{extra}]'" if extra else ""
        raise ConfigError(f"framework {framework!r} is not available ({exc}){hint}") from None
    adapter: type[Adapter] = module.ADAPTER
    return adapter


__all__ = ["Adapter", "adapter_class"]
