"""Plain Python: `entrypoint: file.py:ClassName` (or `file.py:function`)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from headway.adapters.base import DEFAULT_OUTPUT, Adapter, wanted
from headway.errors import ConfigError
from headway.importing import import_file
from headway.repository import TensorSpec, entry_files


class PythonAdapter(Adapter):
    """A user's class or function, imported from the model's folder.

    The file is looked up in the version folder, then in the model folder, and imported by path as
    a module of its own. Its folder is on `sys.path` while it imports, so it may import files beside
    it (these are cached process-wide by their plain name, as any import is: name them distinctly).
    A class is instantiated with no arguments and, if it has `load`, loaded with the version folder.
    `predict(batch)` receives the array itself when the model has one input tensor, else the dict of
    arrays, and returns an array (output `output-0`) or a dict of name -> array. Attributes `inputs`
    and `outputs` on the class or function (lists of `{name, datatype, shape}`) give the signature.

    A `predict` that is a generator streams: each value it yields is one part of the batch's
    answer (an array or a dict, as a return value would be). A class with `start(inputs,
    parameters)` and `step(states)` (and optionally `stop(state)`) is generative, when its
    model.yaml says `generative:` (docs/streams.md)."""

    def load(self) -> None:
        entry = str(self.config.get("entrypoint") or "")
        where = f"model {self.config['name']!r} entrypoint {entry!r}"
        target = self._import(entry, where)
        try:
            self.model = target() if isinstance(target, type) else target
            if not inspect.isroutine(self.model) and callable(getattr(self.model, "load", None)):
                self.model.load(self.path)
        except Exception as exc:
            raise ConfigError(f"{where}: loading failed: {exc!r}") from exc
        self._inputs = self.config.get("inputs") or self.signature()[0]
        if self.config.get("generative") is not None:
            for method in ("start", "step"):
                if not callable(getattr(self.model, method, None)):
                    raise ConfigError(
                        f"{where}: a generative model needs start(inputs, parameters) and "
                        f"step(states) methods; it has no {method}"
                    )
            self.generative = True
            self._stop = getattr(self.model, "stop", None)
            return
        self._predict = getattr(self.model, "predict", self.model)
        if not callable(self._predict):
            raise ConfigError(f"{where}: needs a predict(batch) method or function")
        self.streams = inspect.isgeneratorfunction(self._predict)

    def _import(self, entry: str, where: str) -> Any:
        file_name, _, attr = entry.rpartition(":")
        if not file_name.endswith(".py") or not attr:
            raise ConfigError(f"{where}: must look like 'file.py:ClassName'")
        # Checked again here, where the file is opened: the folder may have changed since.
        candidates = entry_files(self.path, entry, where)
        file = next((p for p in candidates if p.is_file()), None)
        if file is None:
            raise ConfigError(
                f"{where}: {file_name} is in neither {self.path} nor {self.path.parent}"
            )
        label = f"{self.config['name']}_{self.config['version']}"
        module = import_file(file, "headway_model", label, where, keep=True)
        if not hasattr(module, attr):
            raise ConfigError(f"{where}: {file} defines no {attr!r}")
        return getattr(module, attr)

    def _argument(self, inputs: dict[str, np.ndarray]) -> Any:
        """What the user's code is given: the array of a single-input model, else the dict."""
        single = len(self._inputs) == 1 if self._inputs else len(inputs) == 1
        return self.single_input(inputs) if single else dict(inputs)

    def predict(
        self, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        return _outputs(self._predict(self._argument(inputs)), outputs)

    def stream(
        self, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        if not self.streams:
            yield self.predict(inputs, outputs)
            return
        for part in self._predict(self._argument(inputs)):
            yield _outputs(part, outputs)

    def start(self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]) -> Any:
        return self.model.start(self._argument(inputs), parameters)

    def step(self, states: list[Any]) -> tuple[dict[str, np.ndarray], list[bool]]:
        answer = self.model.step(states)
        if not (isinstance(answer, tuple) and len(answer) == 2):
            raise TypeError(
                "step(states) must return (outputs, finished): each sequence's part, and "
                f"whether it ended; got {type(answer).__name__}"
            )
        result, finished = answer
        return _outputs(result, None), [bool(f) for f in finished]

    def stop(self, state: Any) -> None:
        if self._stop is not None:
            self._stop(state)

    def signature(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        where = f"model {self.config['name']!r} entrypoint {self.config.get('entrypoint')!r}"
        declared = (getattr(self.model, attr, None) or [] for attr in ("inputs", "outputs"))
        inputs, outputs = ([TensorSpec.parse(t, where).to_json() for t in ts] for ts in declared)
        return inputs, outputs


def _outputs(result: Any, outputs: Sequence[str] | None) -> dict[str, np.ndarray]:
    """A user's return value (an array, or a dict of them) as named outputs, those wanted."""
    if not isinstance(result, dict):
        result = {DEFAULT_OUTPUT: result}
    return {str(k): np.asarray(v) for k, v in result.items() if wanted(outputs, str(k))}


ADAPTER = PythonAdapter
