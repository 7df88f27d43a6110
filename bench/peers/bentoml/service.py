"""BentoML: a ``@bentoml.service`` whose API lives at ``POST /v2/models/{model}/infer`` and takes
the Open Inference Protocol JSON body as its keyword arguments (``inputs``, ``outputs``).

The model comes from ``BENCH_MODEL`` (``lr`` or ``mlp``) and ``BENCH_MODEL_PATH``. One worker
process (``workers=1``), no access log (as every system here); a sync API, so BentoML runs it in its thread pool, as its docs advise
for blocking (CPU) work.

    BENCH_MODEL=lr BENCH_MODEL_PATH=lr.joblib bentoml serve service:OIP --port 8000
"""

from __future__ import annotations

import os
from typing import Any

import bentoml
import numpy as np

KIND = os.environ.get("BENCH_MODEL", "lr")
PATH = os.environ.get("BENCH_MODEL_PATH", "")


@bentoml.service(workers=1, traffic={"timeout": 60}, logging={"access": {"enabled": False}})
class OIP:
    def __init__(self) -> None:
        if KIND == "lr":
            import joblib

            self.predict = joblib.load(PATH).predict_proba
            self.dtype, self.datatype, self.output = np.float64, "FP64", "probabilities"
        else:
            import torch

            torch.set_num_threads(1)
            module = torch.jit.load(PATH)

            def predict(x: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return module(torch.from_numpy(x)).numpy()

            self.predict = predict
            self.dtype, self.datatype, self.output = np.float32, "FP32", "output-0"

    @bentoml.api(route=f"/v2/models/{KIND}/infer")
    def infer(
        self,
        inputs: list[dict[str, Any]],
        outputs: list[dict[str, Any]] | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        tensor = inputs[0]
        x = np.asarray(tensor["data"], dtype=self.dtype).reshape(tensor["shape"])
        y = self.predict(x)
        return {
            "model_name": KIND,
            "outputs": [{"name": self.output, "datatype": self.datatype,
                         "shape": list(y.shape), "data": y.ravel().tolist()}],
        }  # fmt: skip
