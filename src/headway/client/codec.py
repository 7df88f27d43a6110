"""The client's half of the Open Inference Protocol over REST: numpy inputs to a request body
(binary tensors, Triton's extension, asking for binary outputs) and an answer back to numpy;
an error answer to the Headway error its status means."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from headway.datatypes import (
    decode_bytes_tensor,
    encode_bytes_tensor,
    numpy_dtype,
    oip_datatype,
)
from headway.errors import (
    HeadwayError,
    InvalidInput,
    ModelError,
    ModelNotFound,
    Overloaded,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    error_for_reason,
)

_HEADER = "inference-header-content-length"


@dataclass(frozen=True)
class Answer:
    """An inference's answer: which model version answered, and its outputs as numpy."""

    model: str
    version: str
    outputs: dict[str, np.ndarray]
    id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]


def encode_infer(
    inputs: Mapping[str, np.ndarray],
    *,
    outputs: Sequence[str] | None = None,
    parameters: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    binary_outputs: bool = True,
) -> tuple[bytes, dict[str, str]]:
    """The request body and its headers: every tensor binary, every output asked binary
    (unless not `binary_outputs`: an event stream carries JSON)."""
    described: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, value in inputs.items():
        array = np.asarray(value)
        datatype = oip_datatype(array.dtype)
        if datatype == "BYTES":
            raw = encode_bytes_tensor(array)
        else:
            raw = np.ascontiguousarray(array, dtype=numpy_dtype(datatype)).tobytes()
        described.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": len(raw)},
            }
        )
        blobs.append(raw)
    wanted = {**(parameters or {}), "binary_data_output": True} if binary_outputs else parameters
    document: dict[str, Any] = {"inputs": described, "parameters": wanted or {}}
    if outputs is not None:
        binary = {"parameters": {"binary_data": True}} if binary_outputs else {}
        document["outputs"] = [{"name": o, **binary} for o in outputs]
    if request_id is not None:
        document["id"] = request_id
    head = orjson.dumps(document)
    headers = {"content-type": "application/octet-stream", _HEADER: str(len(head))}
    return head + b"".join(blobs), headers


def decode_infer(body: bytes, headers: Mapping[str, str]) -> Answer:
    """An answer's outputs as numpy arrays, from JSON `data` or binary tensors."""
    length = headers.get(_HEADER)
    head = body if length is None else body[: int(length)]
    document = orjson.loads(head)
    offset = len(head)
    outputs: dict[str, np.ndarray] = {}
    for tensor in document.get("outputs", []):
        shape = tuple(tensor["shape"])
        datatype = tensor["datatype"]
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            raw = body[offset : offset + size]
            offset += size
            if datatype == "BYTES":
                outputs[tensor["name"]] = decode_bytes_tensor(raw, shape)
            else:
                outputs[tensor["name"]] = np.frombuffer(raw, numpy_dtype(datatype)).reshape(shape)
        elif datatype == "BYTES":
            outputs[tensor["name"]] = np.array(tensor["data"], dtype=object).reshape(shape)
        else:
            outputs[tensor["name"]] = np.asarray(tensor["data"], numpy_dtype(datatype)).reshape(
                shape
            )
    return Answer(
        model=document.get("model_name", ""),
        version=str(document.get("model_version", "")),
        outputs=outputs,
        id=document.get("id"),
        parameters=document.get("parameters") or {},
    )


_ERRORS: dict[int, type[HeadwayError]] = {
    400: InvalidInput,
    401: Unauthorized,
    404: ModelNotFound,
    413: PayloadTooLarge,
    429: Overloaded,
    500: ModelError,
    503: Unavailable,
}


def error_for(status: int, body: bytes) -> HeadwayError:
    """The Headway error an error answer means, with the server's message: the class its
    `reason` names, as a stream's last event's (`error_for_reason`); else, for a reason the
    client does not know or none, the class of its status."""
    reason = None
    try:
        document = orjson.loads(body)
        message = str(document["error"])
        reason = document.get("reason")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        message = body[:200].decode(errors="replace") or f"HTTP {status}"
    kind = _ERRORS.get(status)
    if kind is None:
        kind, message = HeadwayError, f"HTTP {status}: {message}"
    return error_for_reason(reason, message, kind)


#: What `event_of` gives for `data: [DONE]`, the end of an OpenAI-style stream.
DONE = b"[DONE]"


def event_of(line: str) -> bytes | None:
    """The `data:` of a server-sent event's line (None for any other line; `DONE` at the
    end); an event that reports an error (`{"error": ...}`) raises it, naming the cause."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip().encode()
    if data.startswith(b'{"error"'):
        raise stream_error(data)
    return DONE if data == DONE else data


def stream_error(data: bytes) -> HeadwayError:
    """The error an event reports (Headway's, Triton's or OpenAI's shape), as the class its
    `reason` (OpenAI's `code`) names; a plain HeadwayError where it names none."""
    document = orjson.loads(data)
    error = document.get("error")
    if isinstance(error, dict):
        message, reason = error.get("message"), error.get("code")
    else:
        message, reason = error, document.get("reason")
    return error_for_reason(reason, f"the stream ended in error: {message}")
