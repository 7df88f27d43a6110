"""The Open Inference Protocol (KServe v2) REST codec, with Triton's binary tensor extension.

`decode_infer` turns a request body (JSON, or JSON header + raw tensor bytes) into numpy
arrays; `encode_infer` does the reverse for the answer. Every problem becomes an InvalidInput
whose message names the tensor and what is wrong with it.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import orjson

from headway.api.limits import answer_too_large
from headway.datatypes import (
    OIP_TO_NUMPY,
    check_empty_shape,
    decode_bytes_tensor,
    encode_bytes_tensor,
    numpy_dtype,
    oip_datatype,
)
from headway.errors import InvalidInput

#: `encode_infer`'s limit when none is given.
NO_LIMIT: int = sys.maxsize
_JSON_OPTS = orjson.OPT_SERIALIZE_NUMPY


class InferRequest:
    """A decoded inference request.

    A plain class, not a dataclass: one is made per request, and a dataclass's generated
    `__init__` is interpreted even where this module is compiled (`headway.speedups`)."""

    __slots__ = ("all_binary", "binary_outputs", "id", "inputs", "outputs", "parameters")

    def __init__(
        self,
        inputs: dict[str, np.ndarray],
        id: str | None = None,
        parameters: dict[str, Any] | None = None,
        outputs: list[str] | None = None,
        binary_outputs: set[str] | None = None,
        all_binary: bool = False,
    ) -> None:
        self.inputs = inputs
        self.id = id
        self.parameters: dict[str, Any] = {} if parameters is None else parameters
        self.outputs = outputs
        self.binary_outputs: set[str] = set() if binary_outputs is None else binary_outputs
        self.all_binary = all_binary


def _shape(raw: Any, name: str) -> tuple[int, ...]:
    if isinstance(raw, list):
        for d in raw:  # a loop, not all(...): this runs for every tensor of every request
            if not isinstance(d, int) or isinstance(d, bool) or d < 0:
                break
        else:
            return tuple(raw)
    raise InvalidInput(
        f"input {name!r}: shape must be a list of non-negative integers, got {raw!r}"
    )


#: The kinds of JSON numbers each kind of datatype accepts: no strings, nulls or bools for
#: numbers, no fractions for integers (numpy would silently make NaN, parse or truncate them).
_JSON_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}
_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "fractional numbers"}


def _json_tensor(
    name: str, datatype: str, shape: tuple[int, ...], data: Any, dtype: np.dtype
) -> np.ndarray:
    count = math.prod(shape)
    if datatype == "BYTES":
        flat = _flatten(data) if isinstance(data, list) else [data]
        wrong = [x for x in flat if not isinstance(x, str)]
        if wrong:
            raise InvalidInput(
                f"input {name!r}: BYTES data must be strings, got {type(wrong[0]).__name__}"
            )
        array = np.empty(len(flat), dtype=object)
        array[:] = [x.encode() for x in flat]
    else:
        if datatype in ("FP16", "BF16"):
            raise InvalidInput(f"input {name!r}: {datatype} cannot travel as JSON; send it binary")
        array = _json_numbers(name, datatype, data, dtype)
    if array.size != count:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} needs {count} elements, got {array.size}"
        )
    if not count:
        _check_empty(name, shape, dtype)
    return array.reshape(shape)


def _check_empty(name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """A shape that holds no elements can still be one no array can take (`datatypes`)."""
    try:
        check_empty_shape(shape, dtype.itemsize)
    except InvalidInput as exc:
        raise InvalidInput(f"input {name!r}: {exc.message}") from None


def _json_numbers(name: str, datatype: str, data: Any, dtype: np.dtype) -> np.ndarray:
    try:
        parsed = np.asarray(data)
        if parsed.dtype is dtype:  # JSON floats as FP64, integers as INT64: nothing to check
            return parsed
        if parsed.size and parsed.dtype.kind not in _JSON_KINDS[dtype.kind]:
            raise ValueError(f"got {_KIND_NAMES.get(parsed.dtype.kind, 'strings or nulls')}")
        if dtype.kind in "iu" and parsed.size:
            info = np.iinfo(dtype)
            if parsed.min() < info.min or parsed.max() > info.max:
                raise ValueError(f"values outside [{info.min}, {info.max}]")
        if parsed.dtype == dtype:
            return parsed  # nothing to convert (the common FP64 case): no errstate context
        with np.errstate(over="raise", invalid="raise"):
            return parsed.astype(dtype, copy=False)
    except (ValueError, TypeError, OverflowError, FloatingPointError) as exc:
        raise InvalidInput(f"input {name!r}: data is not valid {datatype}: {exc}") from None


def _flatten(data: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in data:
        if isinstance(item, list):
            out.extend(_flatten(item))
        else:
            out.append(item)
    return out


def infer_head(body: bytes, header_length: int | None = None) -> dict[str, Any]:
    """An infer request's JSON document, its tensors not yet decoded: enough to read its
    `parameters` (its deadline) before paying for `decode_infer`."""
    if header_length is not None and not 0 <= header_length <= len(body):
        raise InvalidInput(
            f"Inference-Header-Content-Length {header_length} is outside the body "
            f"({len(body)} bytes)"
        )
    head = body if header_length is None else body[:header_length]
    try:
        document = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidInput("request body must be a JSON object with an 'inputs' list")
    parameters = document.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidInput("'parameters' must be an object")
    return document


def decode_infer(
    body: bytes, header_length: int | None = None, document: dict[str, Any] | None = None
) -> InferRequest:
    """Decode an infer request body; `header_length` is Inference-Header-Content-Length;
    `document`, if given, is the body's `infer_head`, already parsed."""
    if document is None:
        document = infer_head(body, header_length)
    raw_inputs = document.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise InvalidInput("request needs a non-empty 'inputs' list")
    parameters = document.get("parameters") or {}
    offset = header_length if header_length is not None else len(body)
    inputs: dict[str, np.ndarray] = {}
    for raw in raw_inputs:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise InvalidInput("each input needs a 'name' string, a 'shape' and a 'datatype'")
        name = raw["name"]
        if name in inputs:
            raise InvalidInput(f"input {name!r} appears twice")
        datatype = raw.get("datatype")
        if not isinstance(datatype, str):
            raise InvalidInput(f"input {name!r}: 'datatype' is missing")
        try:
            dtype = numpy_dtype(datatype)
        except InvalidInput as exc:
            raise InvalidInput(f"input {name!r}: {exc.message}") from None
        shape = _shape(raw.get("shape"), name)
        params = raw.get("parameters")
        size = params.get("binary_data_size") if params and isinstance(params, dict) else None
        if size is not None:
            if header_length is None:
                raise InvalidInput(
                    f"input {name!r}: binary_data_size needs the Inference-Header-Content-Length header"
                )
            if (
                not isinstance(size, int)
                or isinstance(size, bool)
                or size < 0
                or offset + size > len(body)
            ):
                raise InvalidInput(f"input {name!r}: binary_data_size {size!r} runs past the body")
            buffer = memoryview(body)[offset : offset + size]
            offset += size
            if datatype == "BYTES":
                try:
                    inputs[name] = decode_bytes_tensor(buffer, shape)
                except InvalidInput as exc:
                    raise InvalidInput(f"input {name!r}: {exc.message}") from None
            else:
                expected = math.prod(shape) * dtype.itemsize
                if size != expected:
                    raise InvalidInput(
                        f"input {name!r}: shape {list(shape)} of {datatype} needs {expected} bytes, "
                        f"got {size}"
                    )
                if not expected:
                    _check_empty(name, shape, dtype)
                inputs[name] = np.frombuffer(buffer, dtype=dtype).reshape(shape)
        elif "data" in raw:
            inputs[name] = _json_tensor(name, datatype, shape, raw["data"], dtype)
        else:
            raise InvalidInput(f"input {name!r}: needs 'data' or parameters.binary_data_size")
    if header_length is not None and header_length > 0 and offset != len(body):
        raise InvalidInput(f"{len(body) - offset} bytes after the last binary input are unclaimed")
    request = InferRequest(inputs, parameters=parameters)
    if "id" in document:
        request_id = document["id"]
        if not isinstance(request_id, str):
            raise InvalidInput(f"'id' must be a string, got {request_id!r}")
        request.id = request_id
    request.all_binary = bool(parameters.get("binary_data_output", False))
    raw_outputs = document.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise InvalidInput("'outputs' must be a list of {name, parameters}")
        request.outputs = []
        for raw in raw_outputs:
            if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
                raise InvalidInput("each requested output needs a 'name'")
            request.outputs.append(raw["name"])
            params = raw.get("parameters") or {}
            if isinstance(params, dict) and params.get("binary_data"):
                request.binary_outputs.add(raw["name"])
        if len(request.outputs) > 1:
            check_distinct(request.outputs)
    return request


def check_distinct(outputs: list[str]) -> None:
    """Each output is asked for once: a name asked again would be rendered again, an answer
    many times the size of its model's outputs (REST and gRPC)."""
    seen: set[str] = set()
    for name in outputs:
        if name in seen:
            raise InvalidInput(f"output {name!r} is asked for twice; ask for each output once")
        seen.add(name)


def decode_raw_single(body: bytes, name: str, datatype: str, shape: list[int]) -> InferRequest:
    """Inference-Header-Content-Length: 0: the whole body is the single input's bytes."""
    dtype = numpy_dtype(datatype)
    if datatype == "BYTES" or len(body) % dtype.itemsize:
        raise InvalidInput(f"raw body of {len(body)} bytes is not a whole number of {datatype}")
    array = np.frombuffer(body, dtype=dtype)
    inner = list(shape[1:])
    per_row = math.prod(d for d in inner if d > 0) if inner else 1
    if -1 in inner or array.size % per_row:
        raise InvalidInput("a raw body needs a model input whose shape is fixed but for the batch")
    return InferRequest({name: array.reshape([-1, *inner])})


def encode_infer(
    model: str,
    version: int,
    outputs: dict[str, np.ndarray],
    request: InferRequest,
    limit: int = NO_LIMIT,
) -> tuple[bytes, int | None]:
    """The response body and, when any output is binary, the JSON header's length; an
    AnswerTooLarge past `limit` bytes (`--max-answer-mb`)."""
    names = request.outputs if request.outputs is not None else list(outputs)
    if not (request.all_binary or request.binary_outputs):
        fast = _encode_json(model, version, outputs, names, request.id)
        if fast is not None:
            if len(fast) > limit:
                raise answer_too_large(len(fast), limit)
            return fast, None
    described: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    size = 0  # of the binary outputs so far
    for name in names:
        array = outputs.get(name)
        if array is None:
            raise InvalidInput(
                f"model {model!r} has no output {name!r}; it answered {sorted(outputs)}"
            )
        if array.dtype.byteorder == ">":  # the protocol's bytes (and orjson) are little-endian
            array = array.astype(array.dtype.newbyteorder("<"))
        datatype = oip_datatype(array.dtype)
        tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if request.all_binary or name in request.binary_outputs:
            raw = (
                encode_bytes_tensor(array)
                if datatype == "BYTES"
                else np.ascontiguousarray(array).tobytes()
            )
            tensor["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
            size += len(raw)
            if size > limit:  # before the rest is rendered
                raise answer_too_large(size, limit)
        elif datatype == "BYTES":
            tensor["data"] = [
                x.decode(errors="replace") if isinstance(x, bytes) else str(x)
                for x in array.reshape(-1)
            ]
        elif datatype == "FP16":
            tensor["data"] = array.reshape(-1).tolist()
        else:
            tensor["data"] = np.ascontiguousarray(array).reshape(-1)
        described.append(tensor)
    document: dict[str, Any] = {
        "model_name": model,
        "model_version": str(version),
        "outputs": described,
    }
    if request.id is not None:
        document["id"] = request.id
    head = orjson.dumps(document, option=_JSON_OPTS)
    if len(head) + size > limit:
        raise answer_too_large(len(head) + size, limit)
    if not blobs:
        return head, None
    return head + b"".join(blobs), len(head)


#: Bytes of answer documents that repeat from answer to answer, made once (`_encode_json`): a
#: model's document head by (model, version), an output's head by (name, datatype, shape).
_DOCUMENT_HEADS: dict[tuple[str, int], bytes] = {}
_OUTPUT_HEADS: dict[tuple[str, str, tuple[int, ...]], bytes] = {}
#: The datatypes whose data orjson writes as JSON numbers straight from the array, by dtype
#: (little-endian or native; FP16 travels as a list, BYTES as strings).
_JSON_DATATYPES: dict[np.dtype, str] = {
    dtype: name for name, dtype in OIP_TO_NUMPY.items() if name not in ("FP16", "BYTES")
}
#: How many of each are kept: the shapes follow the clients' row counts.
_HEADS_KEPT = 1024


def _encode_json(
    model: str,
    version: int,
    outputs: dict[str, np.ndarray],
    names: list[str],
    request_id: str | None,
) -> bytes | None:
    """`encode_infer`'s document for numeric outputs all sent as JSON, the same bytes, from
    heads made once and each output's data encoded by orjson straight from its array; None
    when an output needs the general path (BYTES, FP16, big-endian or missing)."""
    key = (model, version)
    head = _DOCUMENT_HEADS.get(key)
    if head is None:
        if len(_DOCUMENT_HEADS) >= _HEADS_KEPT:
            _DOCUMENT_HEADS.clear()
        head = _DOCUMENT_HEADS[key] = b'{"model_name":%s,"model_version":%s,"outputs":[' % (
            orjson.dumps(model),
            orjson.dumps(str(version)),
        )
    parts = [head]
    for name in names:
        array = outputs.get(name)
        if array is None:
            return None
        datatype = _JSON_DATATYPES.get(array.dtype)
        if datatype is None:
            return None
        output_key = (name, datatype, array.shape)
        output_head = _OUTPUT_HEADS.get(output_key)
        if output_head is None:
            if len(_OUTPUT_HEADS) >= _HEADS_KEPT:
                _OUTPUT_HEADS.clear()
            output_head = _OUTPUT_HEADS[output_key] = (
                b'{"name":%s,"datatype":%s,"shape":%s,"data":'
                % (
                    orjson.dumps(name),
                    orjson.dumps(datatype),
                    orjson.dumps(list(array.shape)),
                )
            )
        if len(parts) > 1:
            parts.append(b",")
        parts += (
            output_head,
            orjson.dumps(array.ravel(), option=_JSON_OPTS),  # C order, contiguous
            b"}",
        )
    if request_id is None:
        parts.append(b"]}")
    else:
        parts += (b'],"id":', orjson.dumps(request_id), b"}")
    return b"".join(parts)
