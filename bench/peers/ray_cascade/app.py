"""Ray Serve: the digits cascade of `examples/flows/cascade.py` composed with deployment handles.

An ingress deployment answers `POST /apps/cascade/predict` (`{"input": row}`, the answer in the
shape Headway's flow app gives): the fast model's deployment answers; when its top probability
is below 0.85 the slow model's deployment is asked too, and the more confident answer wins.
Both model deployments batch with `@serve.batch` (as Headway batches each stage). Starts a
local Ray (half a CPU per deployment), prints `ready`, serves until SIGINT/SIGTERM, as every Ray
peer does (`ray_peer.py`, with `bench/peers` on PYTHONPATH).

    PYTHONPATH=bench/peers python app.py --repository REPO --port 8000
"""

from __future__ import annotations

import argparse
from typing import Any

import joblib
import numpy as np
import orjson
from ray import serve
from ray_peer import serve_until_stopped
from starlette.requests import Request
from starlette.responses import Response

THRESHOLD = 0.85
#: Three deployments on Ray's 2 CPUs (each asks for 1 by default, and the third never starts).
HALF_CPU = {"num_cpus": 0.5}


def model_deployment(name: str, path: str, batch: int, wait_ms: float) -> Any:
    @serve.deployment(name=name, max_ongoing_requests=2 * batch, ray_actor_options=HALF_CPU)
    class Model:
        def __init__(self) -> None:
            self.predict = joblib.load(path).predict_proba

        @serve.batch(max_batch_size=batch, batch_wait_timeout_s=wait_ms / 1e3)
        async def __call__(self, xs: list[np.ndarray]) -> list[np.ndarray]:
            return list(self.predict(np.stack(xs)))

    return Model


@serve.deployment(max_ongoing_requests=64, ray_actor_options=HALF_CPU)
class Cascade:
    def __init__(self, fast: Any, slow: Any) -> None:
        self.fast, self.slow = fast, slow

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET":
            return Response(b"", status_code=200)
        x = np.asarray(orjson.loads(await request.body())["input"], dtype=np.float64)
        p = await self.fast.remote(x)
        label, confidence, model = int(np.argmax(p)), float(np.max(p)), "digits-fast"
        if confidence < THRESHOLD:
            q = await self.slow.remote(x)
            if float(np.max(q)) > confidence:
                label, confidence, model = int(np.argmax(q)), float(np.max(q)), "digits-slow"
        answer = {"output": [{"label": label, "confidence": confidence, "model": model}]}
        return Response(orjson.dumps(answer), media_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repository", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--wait-ms", type=float, default=2.0)
    parser.add_argument("--temp-dir", default=None)
    args = parser.parse_args()
    fast = model_deployment("fast", f"{args.repository}/digits-fast/1/model.joblib",
                            args.batch, args.wait_ms)  # fmt: skip
    slow = model_deployment("slow", f"{args.repository}/digits-slow/1/model.joblib",
                            args.batch, args.wait_ms)  # fmt: skip
    app = Cascade.bind(fast.bind(), slow.bind())
    serve_until_stopped(
        app, port=args.port, temp_dir=args.temp_dir, name="cascade", route_prefix="/apps/cascade"
    )


if __name__ == "__main__":
    main()
