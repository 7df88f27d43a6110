"""ONNX Runtime: an `*.onnx` file run by an InferenceSession.

The signature is the graph's own (symbolic or unknown dimensions become -1); inputs are fed by
name (a single-input model takes its one tensor whatever the client called it) and cast to the
dtype the graph expects; only the outputs asked for are computed. Tensor outputs only: convert
scikit-learn classifiers with `options={id(model): {"zipmap": False}}`.
Options: `threads` (default 1, intra-op threads), `providers` (default CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from headway.adapters.base import Adapter, wanted
from headway.datatypes import numpy_dtype
from headway.errors import ConfigError, InvalidInput

_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_TYPES = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
} | {f"tensor({t})": t.upper() for t in _INTEGERS}


class OnnxAdapter(Adapter):
    def load(self) -> None:
        path = self.artifact("*.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(self.options.get("threads", 1))
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        providers = list(self.options.get("providers", ["CPUExecutionProvider"]))
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:
            raise ConfigError(f"model {self.config['name']!r}: cannot load {path}: {exc}") from exc
        unknown = [i for i in self.session.get_inputs() if i.type not in _TYPES]
        if unknown:
            raise ConfigError(
                f"model {self.config['name']!r}: {path} input {unknown[0].name!r} has type "
                f"{unknown[0].type}, which has no Open Inference Protocol datatype"
            )
        self.inputs = [(i.name, numpy_dtype(_TYPES[i.type])) for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs() if o.type in _TYPES]

    def predict(
        self, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        feed: dict[str, np.ndarray] = {}
        for name, dtype in self.inputs:
            if name in inputs:
                array = inputs[name]
            elif len(self.inputs) == 1 and len(inputs) == 1:
                array = next(iter(inputs.values()))
            else:
                raise InvalidInput(
                    f"model {self.config['name']!r} needs input {name!r}; got {sorted(inputs)}"
                )
            feed[name] = array if array.dtype == dtype else array.astype(dtype)
        names = [name for name in self.outputs if wanted(outputs, name)]
        if not names:
            return {}
        return dict(zip(names, self.session.run(names, feed), strict=True))

    def signature(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        def spec(arg: Any) -> dict[str, Any]:
            shape = [d if isinstance(d, int) else -1 for d in arg.shape]
            return {"name": arg.name, "datatype": _TYPES[arg.type], "shape": shape}

        outputs = [o for o in self.session.get_outputs() if o.type in _TYPES]
        return [spec(i) for i in self.session.get_inputs()], [spec(o) for o in outputs]


ADAPTER = OnnxAdapter
