"""PyTorch: TorchScript (`torch.jit.save`) or a whole pickled module (`torch.save(model)`).

The artifact is `model.pt`, else the first `*.pt` / `*.pth`. A single-input model is called as
`model(x)`; a model with several inputs as `model(*xs)`, in the order model.yaml declares them,
else sorted by name. The model returns a tensor (`output-0`), a tuple or list of tensors
(`output-0`, `output-1`, ...) or a dict of them (its names). Options: `threads` (default 1,
`torch.set_num_threads`), `device` (default `cpu`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from headway.adapters.base import DEFAULT_INPUT, DEFAULT_OUTPUT, Adapter, wanted
from headway.datatypes import oip_datatype
from headway.errors import ConfigError


class TorchAdapter(Adapter):
    model: torch.nn.Module

    def load(self) -> None:
        torch.set_num_threads(int(self.options.get("threads", 1)))
        self.device = torch.device(self.options.get("device", "cpu"))
        path = self.artifact("model.pt", "*.pt", "*.pth")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated in 2.x
            try:
                model = torch.jit.load(str(path), map_location=self.device)
            except RuntimeError:  # not TorchScript: a pickled nn.Module
                try:
                    model = torch.load(path, map_location=self.device, weights_only=False)
                except Exception as exc:
                    raise ConfigError(
                        f"model {self.config['name']!r}: cannot load {path}: {exc}"
                    ) from exc
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(
                f"model {self.config['name']!r}: {path} holds a {type(model).__name__}, not a "
                "module; save TorchScript (torch.jit.save) or the whole module (torch.save(model))"
            )
        self.model = model.to(self.device).eval()

    def signature(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """A model whose model.yaml declares no inputs is probed once: when its first weight
        is a matrix (a Linear layer first), one row of zeros of that width and dtype runs
        through it, and the shapes and datatypes seen become its signature (reported in its
        metadata, checked on every request: a wrong datatype is a 400 naming it, not the
        model's traceback). A model the probe cannot run keeps an unknown signature."""
        if self.config.get("inputs"):
            return [], []  # model.yaml's declaration is the signature
        weight = next((p for p in self.model.parameters() if p.ndim == 2), None)
        if weight is None:
            return [], []
        probe = np.zeros((1, weight.shape[1]), dtype=weight.detach().cpu().numpy().dtype)
        try:
            outputs = self.predict({DEFAULT_INPUT: probe})
        except Exception:  # not a Linear-first model (an embedding, a convolution ...)
            return [], []
        return [_spec(DEFAULT_INPUT, probe)], [_spec(k, v) for k, v in outputs.items()]

    def predict(
        self, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        declared = [t["name"] for t in self.config.get("inputs") or []]
        names = declared if sorted(declared) == sorted(inputs) else sorted(inputs)
        tensors = [self._tensor(inputs[name]) for name in names]
        with torch.inference_mode():
            result = self.model(*tensors)
        if isinstance(result, dict):
            named = dict(result)
        elif isinstance(result, tuple | list):
            named = {f"output-{i}": value for i, value in enumerate(result)}
        else:
            named = {DEFAULT_OUTPUT: result}
        return {str(k): _numpy(v) for k, v in named.items() if wanted(outputs, str(k))}

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        if array.flags.writeable:
            return torch.from_numpy(array).to(self.device)
        with warnings.catch_warnings():  # a read-only request buffer; the model does not write it
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(array).to(self.device)


def _spec(name: str, array: np.ndarray) -> dict[str, Any]:
    """A tensor seen on the probe as a signature entry: any batch size, the rest as seen."""
    return {"name": name, "datatype": oip_datatype(array.dtype), "shape": [-1, *array.shape[1:]]}


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


ADAPTER = TorchAdapter
