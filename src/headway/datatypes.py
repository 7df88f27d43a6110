"""Open Inference Protocol datatypes and their numpy equivalents."""

from __future__ import annotations

import math

import numpy as np

from headway.errors import InvalidInput

#: OIP datatype -> numpy dtype (little-endian, as the protocol's binary extension requires).
OIP_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(np.object_),
}

_NUMPY_TO_OIP: dict[str, str] = {
    dtype.str: name for name, dtype in OIP_TO_NUMPY.items() if name != "BYTES"
}


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype of an OIP datatype; InvalidInput names the unknown one."""
    try:
        return OIP_TO_NUMPY[datatype]
    except KeyError:
        known = ", ".join(OIP_TO_NUMPY)
        raise InvalidInput(f"unknown datatype {datatype!r}; expected one of {known}") from None


def oip_datatype(dtype: np.dtype) -> str:
    """The OIP datatype of a numpy dtype (strings and objects are BYTES)."""
    if dtype.kind in "OUS":
        return "BYTES"
    name = _NUMPY_TO_OIP.get(dtype.newbyteorder("<").str if dtype.byteorder == ">" else dtype.str)
    if name is None:
        raise InvalidInput(f"numpy dtype {dtype} has no Open Inference Protocol datatype")
    return name


#: What numpy can index: an array's dimensions, zeros aside, times its item size, must fit.
_INDEXABLE = int(np.iinfo(np.intp).max)


def check_empty_shape(shape: tuple[int, ...], itemsize: int) -> None:
    """Raise InvalidInput for a shape that holds no elements (a zero dimension) but whose other
    dimensions multiply past what numpy can shape an array to. A shape that holds elements
    needs no such check: its count is compared with the data sent, which is far smaller."""
    extent = math.prod(d for d in shape if d) * max(itemsize, 1)
    if extent > _INDEXABLE:
        raise InvalidInput(
            f"shape {list(shape)} is too large: its nonzero dimensions multiply past what an "
            "array can hold"
        )


def encode_bytes_tensor(array: np.ndarray) -> bytes:
    """BYTES elements as the protocol lays them out: a 4-byte little-endian length, then bytes."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        raw = item if isinstance(item, bytes) else str(item).encode()
        parts.append(len(raw).to_bytes(4, "little"))
        parts.append(raw)
    return b"".join(parts)


def decode_bytes_tensor(buffer: bytes | memoryview, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of `encode_bytes_tensor`; InvalidInput when the layout is broken."""
    view = memoryview(buffer)
    items: list[bytes] = []
    offset = 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise InvalidInput("BYTES tensor: truncated length prefix")
        size = int.from_bytes(view[offset : offset + 4], "little")
        offset += 4
        if offset + size > len(view):
            raise InvalidInput("BYTES tensor: element runs past the end of its buffer")
        items.append(bytes(view[offset : offset + size]))
        offset += size
    array = np.empty(len(items), dtype=object)
    array[:] = items
    expected = math.prod(shape)  # exact: numpy's product would wrap around past 2**63
    if len(items) != expected:
        raise InvalidInput(
            f"BYTES tensor: shape {list(shape)} needs {expected} elements, got {len(items)}"
        )
    if not expected:
        check_empty_shape(shape, array.itemsize)
    return array.reshape(shape)
