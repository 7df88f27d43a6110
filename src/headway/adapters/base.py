"""The adapter contract: a framework's model as `predict(inputs) -> outputs` over numpy arrays.

An adapter runs inside a worker process. It is built from the model's wire config (see
`ModelConfig.to_wire`), loads its artifact from the version folder, may infer the model's
signature, and predicts a whole batch at once (the first dimension of every tensor is the batch).
A new framework is one small module in this package that defines `ADAPTER`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from headway.errors import ConfigError
from headway.repository import confined

DEFAULT_INPUT = "input-0"
DEFAULT_OUTPUT = "output-0"


class Adapter(ABC):
    """One loaded model version inside a worker.

    Most answer a batch in one call (`predict`). One that `streams` answers it in parts
    (`stream`, each part a batch of outputs); one that is `generative` keeps a state per
    sequence and advances every running sequence by one step per call (`start`, `step`,
    `stop`: docs/streams.md)."""

    #: Its answers come in parts (`stream`).
    streams = False
    #: It keeps per-sequence state (`start`, `step`, `stop`).
    generative = False

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.path = Path(config["path"])
        self.options: dict[str, Any] = dict(config.get("options") or {})

    @abstractmethod
    def load(self) -> None:
        """Load the artifact from `self.path`; raise with a message a user can act on."""

    @abstractmethod
    def predict(
        self, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Predict a batch. `outputs` names the outputs wanted (None: all of them)."""

    def stream(
        self, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """Predict a batch in parts, each part a batch of outputs; a model that answers at
        once gives one part."""
        yield self.predict(inputs, outputs)

    def start(self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]) -> Any:
        """A generative model's new sequence from its inputs (one row): its state."""
        raise ConfigError(f"model {self.config['name']!r} is not generative (no start/step)")

    def step(self, states: list[Any]) -> tuple[dict[str, np.ndarray], list[bool]]:
        """One step of every sequence in `states`: each one's part (row i of each output) and
        whether it has ended."""
        raise ConfigError(f"model {self.config['name']!r} is not generative (no start/step)")

    def stop(self, state: Any) -> None:
        """A sequence ended or was given up: release what its state holds."""
        return None

    def signature(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Inputs and outputs inferred from the artifact, as `{name, datatype, shape}` dicts.

        The repository's model.yaml wins where it declares them; an empty list means unknown.
        """
        return [], []

    def artifact(self, *patterns: str) -> Path:
        """The single file in the version folder matching the first pattern that matches."""
        for pattern in patterns:
            found = sorted(self.path.glob(pattern))
            if found:
                return confined(found[0], self.path.parent, f"model {self.config['name']!r}")
        raise ConfigError(
            f"model {self.config['name']!r} version {self.config['version']}: no artifact "
            f"matching {list(patterns)} in {self.path}"
        )

    def single_input(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The one input tensor of a single-input model, whatever its name."""
        if len(inputs) != 1:
            raise ConfigError(
                f"model {self.config['name']!r} takes one input tensor, got {sorted(inputs)}"
            )
        return next(iter(inputs.values()))


def wanted(outputs: Sequence[str] | None, name: str) -> bool:
    """Whether the caller asked for output `name` (None asks for all)."""
    return outputs is None or name in outputs
