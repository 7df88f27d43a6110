"""The bare baseline: one Starlette app on uvicorn (uvloop + httptools, as Headway uses).

``--model lr`` / ``--model mlp``: the handler decodes the Open Inference Protocol JSON body,
predicts inline on the event loop (no batching, no worker), and encodes an OIP JSON answer.
``--model noop``: the handler reads the body and answers a constant OIP body: the HTTP ceiling
of this stack on this machine.

    python app.py --model lr --path lr.joblib --port 8000
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

NOOP = orjson.dumps(
    {"model_name": "noop", "outputs": [
        {"name": "output-0", "datatype": "FP64", "shape": [1, 2], "data": [0.5, 0.5]}]}
)  # fmt: skip


def load(kind: str, path: str) -> Any:
    """A callable: rows (numpy) -> answer rows (numpy)."""
    if kind == "lr":
        import joblib

        model = joblib.load(path)
        return model.predict_proba
    if kind == "mlp":
        import torch

        torch.set_num_threads(1)
        module = torch.jit.load(path)

        def predict(x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return module(torch.from_numpy(x)).numpy()

        return predict
    return None


def build(kind: str, path: str) -> Starlette:
    predict = load(kind, path)
    dtype = np.float32 if kind == "mlp" else np.float64
    datatype = "FP32" if kind == "mlp" else "FP64"
    name = "output-0" if kind == "mlp" else "probabilities"

    async def infer(request: Request) -> Response:
        body = await request.body()
        if predict is None:
            return Response(NOOP, media_type="application/json")
        tensor = orjson.loads(body)["inputs"][0]
        x = np.asarray(tensor["data"], dtype=dtype).reshape(tensor["shape"])
        y = predict(x)
        answer = {
            "model_name": request.path_params["name"],
            "outputs": [{"name": name, "datatype": datatype, "shape": list(y.shape),
                         "data": y.ravel().tolist()}],
        }  # fmt: skip
        return Response(orjson.dumps(answer), media_type="application/json")

    async def ready(request: Request) -> Response:
        return Response(b"", status_code=200)

    return Starlette(routes=[
        Route("/v2/models/{name}/infer", infer, methods=["POST"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["lr", "mlp", "noop"], required=True)
    parser.add_argument("--path", default="")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        build(args.model, args.path), host="127.0.0.1", port=args.port, loop="uvloop",
        http="httptools", access_log=False, log_level="warning", timeout_keep_alive=30,
    )  # fmt: skip


if __name__ == "__main__":
    main()
