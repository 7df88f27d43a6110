"""LitServe: a ``LitAPI`` at ``POST /v2/models/{model}/infer`` that takes the Open Inference
Protocol JSON body and answers an OIP JSON body, with or without LitServe's batching.

One API server process and one inference worker (``workers_per_device=1`` on CPU); requests
travel between them over LitServe's ZeroMQ queue (``fast_queue=True``, its documented option
for more than 100 requests/s).

    python app.py --model lr --path lr.joblib --port 8000 [--batch 32 --wait-ms 10]
"""

from __future__ import annotations

import argparse
from typing import Any

import litserve as ls
import numpy as np


def load(kind: str, path: str) -> Any:
    if kind == "lr":
        import joblib

        return joblib.load(path).predict_proba
    import torch

    torch.set_num_threads(1)
    module = torch.jit.load(path)

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(x)).numpy()

    return predict


class OIP(ls.LitAPI):
    def __init__(self, kind: str, path: str, **options: Any) -> None:
        super().__init__(api_path=f"/v2/models/{kind}/infer", **options)
        self.kind, self.path = kind, path
        self.dtype = np.float32 if kind == "mlp" else np.float64
        self.datatype = "FP32" if kind == "mlp" else "FP64"
        self.output = "output-0" if kind == "mlp" else "probabilities"
        self.counts: list[int] = []

    def setup(self, device: str) -> None:
        self.model = load(self.kind, self.path)

    # LitServe builds its endpoint from these two signatures: unannotated `request` and return
    # mean "parse the JSON body into a dict" and "answer JSON", its default (fastest) path.
    def decode_request(self, request, **kwargs: Any) -> np.ndarray:  # type: ignore[no-untyped-def]
        tensor = request["inputs"][0]
        return np.asarray(tensor["data"], dtype=self.dtype).reshape(tensor["shape"])

    def batch(self, inputs: list[np.ndarray]) -> np.ndarray:
        self.counts = [len(x) for x in inputs]  # one batch at a time per worker
        return np.concatenate(inputs)

    def predict(self, x: np.ndarray, **kwargs: Any) -> Any:
        return self.model(x)

    def unbatch(self, output: np.ndarray) -> list[np.ndarray]:
        return np.split(output, np.cumsum(self.counts)[:-1])

    def encode_response(self, output: np.ndarray, **kwargs: Any):  # type: ignore[no-untyped-def]
        return {
            "model_name": self.kind,
            "outputs": [{"name": self.output, "datatype": self.datatype,
                         "shape": list(output.shape), "data": output.ravel().tolist()}],
        }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["lr", "mlp"], required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--batch", type=int, default=0, help="max_batch_size; 0: no batching")
    parser.add_argument("--wait-ms", type=float, default=10.0)
    args = parser.parse_args()
    options: dict[str, Any] = {}
    if args.batch:
        options = {"max_batch_size": args.batch, "batch_timeout": args.wait_ms / 1e3}
    api = OIP(args.model, args.path, **options)
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1,
                          fast_queue=True)  # fmt: skip
    server.run(host="127.0.0.1", port=args.port, num_api_servers=1, log_level="warning",
               generate_client_file=False)  # fmt: skip


if __name__ == "__main__":
    main()
