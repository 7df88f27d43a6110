"""What the tests ask of a real server over HTTP, in the Open Inference Protocol's JSON: an
inference request's body, its answer's outputs, the repository index and a metric's samples.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import numpy as np
import orjson

from headway.datatypes import oip_datatype
from headway.launcher import ServerProcess

#: One row of four numbers: a request any model of four inputs (or one that ignores them) serves.
BODY = orjson.dumps(
    {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
)


def body(rows: np.ndarray, name: str = "input-0", **extra: Any) -> dict[str, Any]:
    """An inference request of one tensor, `rows`, with the request's other keys `extra`."""
    tensor = {
        "name": name,
        "shape": list(rows.shape),
        "datatype": oip_datatype(rows.dtype),
        "data": rows.reshape(-1).tolist(),
    }
    return {"inputs": [tensor], **extra}


def infer_json(
    url: str, model: str, rows: np.ndarray, name: str = "input-0", **extra: Any
) -> httpx.Response:
    content = orjson.dumps(body(rows, name, **extra))
    return httpx.post(f"{url}/v2/models/{model}/infer", content=content, timeout=30)


def outputs_of(response: httpx.Response) -> dict[str, np.ndarray]:
    assert response.status_code == 200, response.text
    return {
        o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in response.json()["outputs"]
    }


def index(server: ServerProcess) -> dict[str, dict[str, Any]]:
    """The repository index, by model name."""
    entries = httpx.post(f"{server.url}/v2/repository/index", timeout=10).json()
    return {entry["name"]: entry for entry in entries}


def metric(server: ServerProcess, name: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of a metric: its labels and value."""
    samples = []
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        match = re.match(rf"^{name}(?:{{(.*)}})? (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
            samples.append((labels, float(match.group(2))))
    return samples
