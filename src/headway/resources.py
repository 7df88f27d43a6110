"""What a model's worker needs from the machine it runs on: `resources:` in model.yaml.

The Ray engine asks Ray for these when it places the model's workers (actors) on the nodes of a
cluster; the local engine runs on one machine and does not place anything. Kept free of Ray so
the repository reads it and tests check it without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headway.errors import ConfigError

_KEYS = {"cpus", "gpus", "memory_mb", "custom"}


@dataclass(frozen=True)
class Resources:
    """One worker's share of a node: CPUs, GPUs, memory and custom resources (Ray's names)."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_mb: float | None = None
    custom: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "cpus": self.cpus,
            "gpus": self.gpus,
            "memory_mb": self.memory_mb,
            "custom": dict(self.custom),
        }

    def demands(self) -> dict[str, float]:
        """The amounts asked for, under the names a Ray node reports its resources by."""
        wanted = {"CPU": self.cpus, "GPU": self.gpus, **self.custom}
        if self.memory_mb is not None:
            wanted["memory"] = self.memory_mb * 2**20
        return {name: amount for name, amount in wanted.items() if amount > 0}

    def describe(self) -> str:
        return ", ".join(f"{name} {amount:g}" for name, amount in sorted(self.demands().items()))


DEFAULT = Resources()


def parse_resources(raw: Any, where: str) -> Resources:
    """`resources: {cpus: 1, gpus: 0, memory_mb: 512, custom: {name: amount}}`, each optional."""
    if raw is None:
        return DEFAULT
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{where}: resources must be a mapping like {{cpus: 1, gpus: 0, memory_mb: 512, "
            f"custom: {{name: 1}}}}, got {raw!r}"
        )
    unknown = set(raw) - _KEYS
    if unknown:
        raise ConfigError(
            f"{where}: unknown resources {sorted(unknown)}; known: {sorted(_KEYS)} "
            "(put any other resource under 'custom')"
        )
    custom = raw.get("custom") or {}
    if not isinstance(custom, dict):
        raise ConfigError(f"{where}: resources.custom must map names to amounts, got {custom!r}")
    memory = raw.get("memory_mb")
    return Resources(
        cpus=_amount(raw.get("cpus", 1), "resources.cpus", where),
        gpus=_amount(raw.get("gpus", 0), "resources.gpus", where),
        memory_mb=None if memory is None else _amount(memory, "resources.memory_mb", where),
        custom={str(k): _amount(v, f"resources.custom.{k}", where) for k, v in custom.items()},
    )


def _amount(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where}: {key} must be a non-negative number, got {value!r}")
    return float(value)


def unmet(resources: Resources, nodes: Iterable[Mapping[str, float]]) -> str | None:
    """Why no node of a cluster can ever host a worker needing `resources` (each node given
    by its total resources), or None when one can. Capacity in use does not count: a worker
    waits for it to free up."""
    wanted = resources.demands()
    nodes = list(nodes)
    for node in nodes:
        if all(node.get(name, 0.0) >= amount for name, amount in wanted.items()):
            return None
    short = sorted(
        name
        for name, amount in wanted.items()
        if not any(n.get(name, 0.0) >= amount for n in nodes)
    )
    missing = ", ".join(f"{name} {wanted[name]:g}" for name in short) or resources.describe()
    return (
        f"it needs {missing} and no node of the cluster ({len(nodes)} alive) has that much; "
        "add a node that has it, or lower 'resources' in its model.yaml"
    )


def local_gpus(root: str = "/") -> int:
    """How many NVIDIA GPUs this machine shows (its driver lists one folder per GPU under
    /proc/driver/nvidia/gpus); 0 without the driver. Read from the file system, so that a
    server that plans nothing on a GPU imports no framework to ask."""
    folder = Path(root, "proc/driver/nvidia/gpus")
    try:
        return sum(1 for entry in folder.iterdir() if entry.is_dir())
    except OSError:
        return 0
