"""What the load generator sends: Open Inference Protocol request bodies, built once, up front.

Inputs come from the model's metadata (random data of each input's datatype and shape) or from
a file (a JSON request body, or a ``.npy`` array of rows); bodies are JSON or the binary tensor
extension. Several distinct bodies (``variants``) keep a prediction cache from answering every
request.
"""

from __future__ import annotations

import math
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from headway.datatypes import encode_bytes_tensor, numpy_dtype


class WorkloadError(Exception):
    """The workload cannot be built as asked; the message says what to fix."""


@dataclass(frozen=True)
class Tensor:
    """One input tensor of a request: OIP name, datatype, and its data (shape included)."""

    name: str
    datatype: str
    data: np.ndarray


@dataclass(frozen=True)
class Body:
    """An encoded request body; ``header_length`` is set for the binary extension."""

    payload: bytes
    header_length: int | None = None


@dataclass
class Request:
    """The inputs of one request plus any other top-level fields to send along."""

    inputs: list[Tensor]
    extra: dict[str, Any] = field(default_factory=dict)


def fetch_metadata(
    base_url: str,
    model: str,
    version: str | None,
    timeout: float = 5.0,
    *,
    headers: dict[str, str] | None = None,
    verify: ssl.SSLContext | bool = True,
) -> dict[str, Any]:
    """``GET /v2/models/{model}[/versions/{version}]``; WorkloadError says what went wrong.
    `headers` (a token) and `verify` (TLS) as the load's target's (`Target`)."""
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "")
    url = base_url.rstrip("/") + path
    try:
        # Like the load itself, never through a proxy from the environment.
        response = httpx.get(url, timeout=timeout, trust_env=False, headers=headers, verify=verify)
    except httpx.HTTPError as exc:
        raise WorkloadError(
            f"cannot reach {base_url} ({type(exc).__name__}: {exc}); is the server running, "
            "and is --url right?"
        ) from None
    if response.status_code == 401:
        raise WorkloadError(f"GET {path} returned 401: the server needs a token; give --token")
    if response.status_code == 404:
        raise WorkloadError(
            f"model {model!r} not found: GET {path} returned 404; check --model"
            + (" and --model-version" if version else "")
        )
    if response.status_code != 200:
        raise WorkloadError(
            f"GET {path} returned HTTP {response.status_code}: {response.text[:200]}"
        )
    try:
        metadata = response.json()
    except ValueError:
        raise WorkloadError(f"GET {path} did not return JSON model metadata") from None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("inputs"), list):
        raise WorkloadError(f"GET {path}: model metadata has no 'inputs' list")
    return metadata


def batch_shape(name: str, shape: list[int], batch: int | None) -> list[int]:
    """The concrete shape to send: a free first dimension becomes the batch, other free ones 1."""
    if not shape:
        if batch not in (None, 1):
            raise WorkloadError(f"input {name!r} is a scalar; it cannot be batched (drop --batch)")
        return []
    first = shape[0]
    if first == -1:
        first = batch or 1
    elif batch is not None and batch != first:
        raise WorkloadError(
            f"input {name!r} has a fixed first dimension {first}; --batch must be {first}"
        )
    return [first] + [1 if d == -1 else d for d in shape[1:]]


def random_tensor(name: str, datatype: str, shape: list[int], rng: np.random.Generator) -> Tensor:
    """Random data of an OIP datatype: normals for floats, small ints, coin flips, short bytes."""
    if datatype == "BF16":  # no numpy dtype: held as float32, truncated to 16 bits on the wire
        return Tensor(name, datatype, rng.standard_normal(shape).astype(np.float32))
    try:
        dtype = numpy_dtype(datatype)
    except Exception:
        raise WorkloadError(f"input {name!r}: unknown datatype {datatype!r}") from None
    if datatype == "BYTES":
        words = rng.integers(0, 1_000_000, size=shape)
        data = np.vectorize(lambda w: f"headway-{w}".encode(), otypes=[object])(words)
        return Tensor(name, datatype, np.asarray(data, dtype=object).reshape(shape))
    if datatype == "BOOL":
        return Tensor(name, datatype, rng.random(shape) < 0.5)
    if dtype.kind == "f":
        return Tensor(name, datatype, rng.standard_normal(shape).astype(dtype))
    return Tensor(name, datatype, rng.integers(0, 10, size=shape).astype(dtype))


def from_metadata(
    metadata: dict[str, Any], batch: int | None, variants: int, seed: int = 0
) -> list[Request]:
    """``variants`` requests of random data matching the model's declared inputs."""
    rng = np.random.default_rng(seed)
    specs = [
        (str(m["name"]), str(m["datatype"]), list(m.get("shape", [-1]))) for m in metadata["inputs"]
    ]
    if not specs:
        raise WorkloadError("the model declares no inputs; give --input-data")
    shapes = [batch_shape(name, shape, batch) for name, _, shape in specs]
    return [
        Request(
            [
                random_tensor(name, dt, shape, rng)
                for (name, dt, _), shape in zip(specs, shapes, strict=True)
            ]
        )
        for _ in range(variants)
    ]


def _tensor(name: str, datatype: str, data: Any, shape: list[int] | None) -> Tensor:
    try:
        dtype = np.dtype(np.float32) if datatype == "BF16" else numpy_dtype(datatype)
        if datatype == "BYTES":
            flat = [d.encode() if isinstance(d, str) else d for d in np.ravel(data).tolist()]
            array = np.empty(len(flat), dtype=object)
            array[:] = flat
        else:
            array = np.asarray(data, dtype=dtype)
        return Tensor(name, datatype, array.reshape(shape if shape is not None else array.shape))
    except Exception as exc:
        raise WorkloadError(f"input {name!r}: cannot read its data as {datatype}: {exc}") from None


def from_file(
    path: Path, metadata: dict[str, Any], batch: int | None, variants: int
) -> list[Request]:
    """Requests built from a JSON request body or a ``.npy`` array of rows."""
    declared = {str(m["name"]): m for m in metadata.get("inputs", [])}
    if path.suffix == ".npy":
        if len(declared) != 1:
            raise WorkloadError(
                f"a .npy input file needs a single-input model; it has {len(declared)}"
            )
        ((name, meta),) = declared.items()
        try:
            rows = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise WorkloadError(f"cannot read {path}: {exc}") from None
        if rows.ndim == 0:
            raise WorkloadError(f"{path} holds a scalar; it must hold rows (first axis)")
        source = Request([_tensor(name, str(meta["datatype"]), rows, None)])
        return _windows(source, batch or 1, variants)
    try:
        body = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise WorkloadError(f"cannot read {path} as JSON: {exc}") from None
    if not isinstance(body, dict) or "inputs" not in body:
        raise WorkloadError(f"{path} must hold a JSON object with an 'inputs' key")
    extra = {k: v for k, v in body.items() if k != "inputs"}
    raw = body["inputs"]
    tensors: list[Tensor] = []
    if isinstance(raw, dict):  # {"inputs": {name: data}}: datatypes from the metadata
        for name, data in raw.items():
            if name not in declared:
                raise WorkloadError(f"{path}: the model has no input {name!r}")
            tensors.append(_tensor(name, str(declared[name]["datatype"]), data, None))
    elif isinstance(raw, list):
        for item in raw:
            if not isinstance(item, dict) or not {"name", "datatype", "data"} <= item.keys():
                raise WorkloadError(f"{path}: each input needs 'name', 'datatype' and 'data'")
            tensors.append(
                _tensor(str(item["name"]), str(item["datatype"]), item["data"], item.get("shape"))
            )
    else:
        raise WorkloadError(f"{path}: 'inputs' must be a list of tensors or an object name->data")
    source = Request(tensors, extra)
    return [source] if batch is None else _windows(source, batch, variants)


def _windows(source: Request, batch: int, variants: int) -> list[Request]:
    """Successive windows of ``batch`` rows (wrapping around) of every input."""
    rows = {t.data.shape[0] if t.data.ndim else 0 for t in source.inputs}
    if len(rows) != 1 or 0 in rows:
        raise WorkloadError("to batch from a file, every input needs the same number of rows (>0)")
    (n,) = rows
    count = max(1, min(variants, math.ceil(n / batch)))
    out = []
    for v in range(count):
        index = np.arange(v * batch, (v + 1) * batch)
        inputs = [
            Tensor(t.name, t.datatype, np.take(t.data, index, axis=0, mode="wrap"))
            for t in source.inputs
        ]
        out.append(Request(inputs, source.extra))
    return out


def _json_data(tensor: Tensor) -> list[Any]:
    flat = tensor.data.reshape(-1)
    if tensor.datatype == "BYTES":
        return [x.decode(errors="replace") if isinstance(x, bytes) else str(x) for x in flat]
    return flat.tolist()


def _raw(tensor: Tensor) -> bytes:
    if tensor.datatype == "BYTES":
        return encode_bytes_tensor(tensor.data)
    if tensor.datatype == "BF16":
        bits = tensor.data.astype("<f4").view("<u4") >> 16
        return bits.astype("<u2").tobytes()
    if tensor.datatype == "BOOL":
        return tensor.data.astype(np.uint8).tobytes()
    return np.ascontiguousarray(tensor.data).tobytes()


def with_parameters(request: Request, **parameters: Any) -> Request:
    """`request` with `parameters` added to its OIP request parameters (e.g. slo_ms)."""
    merged = {**request.extra.get("parameters", {}), **parameters}
    return Request(request.inputs, {**request.extra, "parameters": merged})


def encode(request: Request, binary: bool = False) -> Body:
    """The request as an OIP JSON body, or as the binary tensor extension."""
    inputs: list[dict[str, Any]] = []
    raws: list[bytes] = []
    for t in request.inputs:
        item: dict[str, Any] = {"name": t.name, "shape": list(t.data.shape), "datatype": t.datatype}
        if binary:
            raw = _raw(t)
            raws.append(raw)
            item["parameters"] = {"binary_data_size": len(raw)}
        else:
            item["data"] = _json_data(t)
        inputs.append(item)
    header = orjson.dumps({"inputs": inputs, **request.extra})
    if not binary:
        return Body(header)
    return Body(header + b"".join(raws), header_length=len(header))
