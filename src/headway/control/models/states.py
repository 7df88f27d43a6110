"""What the controller knows of each model it serves."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

from headway.repository import ModelConfig

LOADING, READY, UNAVAILABLE, UNLOADED = "LOADING", "READY", "UNAVAILABLE", "UNLOADED"
#: The smallest memory a model is assumed to take before it is measured.
MIN_MODEL_MB = 1.0


@dataclass
class ModelState:
    """A model as the controller serves it.

    `state` is READY when requests are accepted: its replicas are loaded, or (with a memory
    budget) it is loaded on demand. `workers` are where it is loaded now.
    """

    config: ModelConfig
    state: str = UNLOADED
    reason: str = ""
    workers: set[int] = field(default_factory=set)
    memory_mb: float = 0.0
    loading: set[int] = field(default_factory=set)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


def size_estimate(config: ModelConfig) -> float:
    """Memory (MB) to reserve before a model was ever measured: its declared `memory_mb`,
    else twice the size of its artifacts (deserialised objects outgrow their files)."""
    if config.memory_mb is not None:
        return max(MIN_MODEL_MB, config.memory_mb)
    total = 0
    for folder, _, files in os.walk(config.path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                continue
    return max(MIN_MODEL_MB, 2.0 * total / 2**20)
