"""An MLServer runtime for the benchmark's TorchScript MLP (MLServer has no PyTorch runtime).

Decodes the request with MLServer's own numpy codec and encodes the answer as ``output-0``,
the way its built-in runtimes do; with ``max_batch_size`` set, MLServer's adaptive batcher
merges requests before ``predict`` sees them.
"""

from __future__ import annotations

import numpy as np
import torch
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, NumpyRequestCodec
from mlserver.types import InferenceRequest, InferenceResponse, RequestOutput
from mlserver.utils import get_model_uri


class TorchMLP(MLModel):
    async def load(self) -> bool:
        torch.set_num_threads(1)
        self._model = torch.jit.load(await get_model_uri(self._settings))
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = self.decode_request(payload, default_codec=NumpyRequestCodec)
        with torch.inference_mode():
            y = self._model(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy()
        output = self.encode(y, RequestOutput(name="output-0"), default_codec=NumpyCodec)
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=[output])
