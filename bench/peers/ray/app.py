"""Ray Serve: one deployment that answers the Open Inference Protocol JSON body at
``POST /v2/models/{name}/infer``, predicting inline or through ``@serve.batch``.

Starts a local Ray in this process and serves the application with HTTP on ``--port`` until
SIGINT/SIGTERM, as every Ray peer does (``ray_peer.py``, with ``bench/peers`` on PYTHONPATH).

    PYTHONPATH=bench/peers python app.py --model lr --path lr.joblib --port 8000 [--batch 32 --wait-ms 10]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import orjson
from ray import serve
from ray_peer import serve_until_stopped
from starlette.requests import Request
from starlette.responses import Response


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


def build(kind: str, path: str, batch: int, wait_ms: float, ongoing: int) -> Any:
    dtype = np.float32 if kind == "mlp" else np.float64
    datatype = "FP32" if kind == "mlp" else "FP64"
    output = "output-0" if kind == "mlp" else "probabilities"

    @serve.deployment(max_ongoing_requests=ongoing)
    class Model:
        def __init__(self) -> None:
            self.predict = load(kind, path)

        @serve.batch(max_batch_size=max(batch, 1), batch_wait_timeout_s=wait_ms / 1e3)
        async def batched(self, xs: list[np.ndarray]) -> list[np.ndarray]:
            y = self.predict(np.concatenate(xs))
            return np.split(y, np.cumsum([len(x) for x in xs])[:-1])

        async def __call__(self, request: Request) -> Response:
            if request.method == "GET":
                return Response(b"", status_code=200)
            tensor = orjson.loads(await request.body())["inputs"][0]
            x = np.asarray(tensor["data"], dtype=dtype).reshape(tensor["shape"])
            y = await self.batched(x) if batch else self.predict(x)
            answer = {
                "model_name": kind,
                "outputs": [{"name": output, "datatype": datatype, "shape": list(y.shape),
                             "data": y.ravel().tolist()}],
            }  # fmt: skip
            return Response(orjson.dumps(answer), media_type="application/json")

    return Model.bind()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["lr", "mlp"], required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--batch", type=int, default=0, help="@serve.batch max size; 0: off")
    parser.add_argument("--wait-ms", type=float, default=10.0)
    parser.add_argument("--ongoing", type=int, default=0, help="max_ongoing_requests; 0: default")
    parser.add_argument("--temp-dir", default=None)
    args = parser.parse_args()

    # Batching needs several requests in the replica at once: Ray's guide sets
    # max_ongoing_requests above max_batch_size. 0 keeps Ray's default (5).
    app = build(args.model, args.path, args.batch, args.wait_ms, args.ongoing or 5)
    serve_until_stopped(app, port=args.port, temp_dir=args.temp_dir)


if __name__ == "__main__":
    main()
