"""BentoML: the digits cascade of `examples/flows/cascade.py` composed with `bentoml.depends`.

An ingress service answers `POST /apps/cascade/predict` (`{"input": row}`, the answer in the
shape Headway's flow app gives): the fast model's service answers; when its top probability is
below 0.85 the slow model's service is asked too, and the more confident answer wins. Both
model services batch (`batchable=True`, up to 32 rows, as Headway batches each stage); each
service runs in a process of its own (BentoML's composition), one worker each, no access log.
The models come from `BENCH_REPOSITORY` (the examples' repository).

    BENCH_REPOSITORY=REPO bentoml serve service:Cascade --host 127.0.0.1 --port 8000
"""

from __future__ import annotations

import os
from typing import Any

import bentoml
import joblib
import numpy as np

THRESHOLD = 0.85
REPOSITORY = os.environ.get("BENCH_REPOSITORY", "")
QUIET: Any = {"access": {"enabled": False}}
#: The ingress's client to a model service is by default replaced every 100 requests, and the
#: old one closed under the requests still in flight on it ("Server disconnected": BentoML
#: issue #5540, since 1.4.31); one client for the whole run instead.
KEEP_CLIENT: Any = {"max_requests": 1_000_000_000, "max_age": 86_400.0}
BATCH = {"batchable": True, "max_batch_size": 32, "max_latency_ms": 60_000}


def _load(name: str) -> Any:
    return joblib.load(f"{REPOSITORY}/{name}/1/model.joblib").predict_proba


@bentoml.service(workers=1, logging=QUIET, runner_connection=KEEP_CLIENT)
class Fast:
    def __init__(self) -> None:
        self.predict_proba = _load("digits-fast")

    @bentoml.api(**BATCH)
    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.predict_proba(x))


@bentoml.service(workers=1, logging=QUIET, runner_connection=KEEP_CLIENT)
class Slow:
    def __init__(self) -> None:
        self.predict_proba = _load("digits-slow")

    @bentoml.api(**BATCH)
    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.predict_proba(x))


@bentoml.service(workers=1, logging=QUIET, traffic={"timeout": 60})
class Cascade:
    fast = bentoml.depends(Fast)
    slow = bentoml.depends(Slow)

    @bentoml.api(route="/apps/cascade/predict")
    async def predict(self, input: list[float]) -> dict[str, Any]:  # `input`: the body's key
        x = np.asarray([input], dtype=np.float64)
        p = (await self.fast.to_async.predict(x))[0]
        label, confidence, model = int(np.argmax(p)), float(np.max(p)), "digits-fast"
        if confidence < THRESHOLD:
            q = (await self.slow.to_async.predict(x))[0]
            if float(np.max(q)) > confidence:
                label, confidence, model = int(np.argmax(q)), float(np.max(q)), "digits-slow"
        return {"output": [{"label": label, "confidence": confidence, "model": model}]}
