"""ModelInferRequest -> numpy and numpy -> ModelInferResponse, by the protocol's rules.

A request's tensors arrive either as `raw_input_contents` (one entry per input, in order:
what tritonclient sends) or as each input's typed `contents`. Answers always travel as
`raw_output_contents`, as Triton answers and tritonclient's `as_numpy` reads them. Every
problem is an InvalidInput naming the tensor, as over REST (`api.oip`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from headway.api.grpc import messages
from headway.api.limits import answer_too_large
from headway.api.oip import InferRequest, check_distinct
from headway.datatypes import (
    check_empty_shape,
    decode_bytes_tensor,
    encode_bytes_tensor,
    numpy_dtype,
    oip_datatype,
)
from headway.errors import InvalidInput

#: The largest message protobuf serializes (2 GiB less a byte): no answer may be larger.
MAX_MESSAGE = 2**31 - 1

#: The typed `contents` list that carries each datatype (FP16 and BF16 travel raw only).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def parameters(entries: Any) -> dict[str, Any]:
    """A protocol parameter map as plain Python values."""
    out: dict[str, Any] = {}
    for key, value in entries.items():
        choice = value.WhichOneof("parameter_choice")
        if choice is not None:
            out[key] = getattr(value, choice)
    return out


def decode_infer(request: Any) -> InferRequest:
    """The decoded request; InvalidInput names what is wrong."""
    if not request.inputs:
        raise InvalidInput("request needs at least one input")
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidInput(
            f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs; "
            "send one per input, in the order of 'inputs'"
        )
    inputs: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        name = tensor.name
        if name in inputs:
            raise InvalidInput(f"input {name!r} appears twice")
        try:
            dtype = numpy_dtype(tensor.datatype)
        except InvalidInput as exc:
            raise InvalidInput(f"input {name!r}: {exc.message}") from None
        shape = tuple(tensor.shape)
        if any(d < 0 for d in shape):
            raise InvalidInput(f"input {name!r}: shape must be non-negative, got {list(shape)}")
        if raw:
            if tensor.HasField("contents"):
                raise InvalidInput(f"input {name!r}: send contents or raw_input_contents, not both")
            inputs[name] = _raw_tensor(name, tensor.datatype, dtype, shape, raw[i])
        else:
            inputs[name] = _typed_tensor(name, tensor.datatype, dtype, shape, tensor.contents)
    decoded = InferRequest(inputs, parameters=parameters(request.parameters))
    if request.id:
        decoded.id = request.id
    if request.outputs:
        decoded.outputs = [output.name for output in request.outputs]
        if len(decoded.outputs) > 1:
            check_distinct(decoded.outputs)
    return decoded


def _raw_tensor(
    name: str, datatype: str, dtype: np.dtype, shape: tuple[int, ...], buffer: bytes
) -> np.ndarray:
    if datatype == "BYTES":
        try:
            return decode_bytes_tensor(buffer, shape)
        except InvalidInput as exc:
            raise InvalidInput(f"input {name!r}: {exc.message}") from None
    expected = math.prod(shape) * dtype.itemsize
    if len(buffer) != expected:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} of {datatype} needs {expected} bytes, "
            f"got {len(buffer)}"
        )
    if not expected:
        _check_empty(name, shape, dtype)
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _check_empty(name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """A shape that holds no elements can still be one no array can take (`datatypes`)."""
    try:
        check_empty_shape(shape, dtype.itemsize)
    except InvalidInput as exc:
        raise InvalidInput(f"input {name!r}: {exc.message}") from None


def _typed_tensor(
    name: str, datatype: str, dtype: np.dtype, shape: tuple[int, ...], contents: Any
) -> np.ndarray:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidInput(f"input {name!r}: {datatype} travels only in raw_input_contents")
    values = getattr(contents, field)
    count = math.prod(shape)
    if len(values) != count:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} needs {count} elements in {field}, "
            f"got {len(values)}"
        )
    if not count:
        _check_empty(name, shape, dtype)
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    wide = np.asarray(values)
    if dtype.kind in "iu" and wide.size:
        info = np.iinfo(dtype)
        if wide.min() < info.min or wide.max() > info.max:
            raise InvalidInput(
                f"input {name!r}: values outside {datatype}'s [{info.min}, {info.max}]"
            )
    return wide.astype(dtype, copy=False).reshape(shape)


def encode_infer(
    model: str,
    version: int,
    outputs: dict[str, np.ndarray],
    request: InferRequest,
    limit: int = MAX_MESSAGE,
) -> Any:
    """The response, every output raw, in the order asked for (else the model's); an
    AnswerTooLarge once its tensors pass `limit` bytes (`--max-answer-mb`; never past what
    protobuf can serialize)."""
    limit = min(limit, MAX_MESSAGE)
    size = 0
    response = messages.ModelInferResponse(model_name=model, model_version=str(version))
    if request.id is not None:
        response.id = request.id
    names = request.outputs if request.outputs is not None else list(outputs)
    for name in names:
        array = outputs.get(name)
        if array is None:
            raise InvalidInput(
                f"model {model!r} has no output {name!r}; it answered {sorted(outputs)}"
            )
        datatype = oip_datatype(array.dtype)
        response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        if datatype == "BYTES":
            raw = encode_bytes_tensor(array)
        else:
            little = array.astype(array.dtype.newbyteorder("<"), copy=False)
            raw = np.ascontiguousarray(little).tobytes()
        size += len(raw)
        if size > limit:
            raise answer_too_large(size, limit)
        response.raw_output_contents.append(raw)
    return response
