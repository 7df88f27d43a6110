"""The worker wire format: a small JSON header frame, then one raw buffer frame per tensor.

No pickling: numeric tensors travel as their bytes (little-endian, C order) with dtype and
shape in the header; BYTES tensors use the Open Inference Protocol's length-prefixed layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from headway.datatypes import decode_bytes_tensor, encode_bytes_tensor

Frames = list[bytes | memoryview | np.ndarray]


#: Below this many bytes, zmq copies frames faster than it tracks zero-copy buffers.
ZERO_COPY_BYTES = 65536


def zero_copy(frames: Frames) -> bool:
    """Whether sending `frames` without copying is worth it (large tensors only)."""
    return sum(memoryview(f).nbytes for f in frames) >= ZERO_COPY_BYTES


def pack(header: dict[str, Any], tensors: dict[str, np.ndarray] | None = None) -> Frames:
    """Frames for a header and its tensors (the header gains a `tensors` list)."""
    frames: Frames = [b""]
    specs = []
    for name, array in (tensors or {}).items():
        if array.dtype.kind in "OUS":
            specs.append([name, "BYTES", list(array.shape)])
            frames.append(encode_bytes_tensor(array))
        else:
            # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
            contiguous = array if array.flags.c_contiguous else np.array(array, order="C")
            if contiguous.dtype.byteorder == ">":
                contiguous = contiguous.astype(contiguous.dtype.newbyteorder("<"))
            specs.append([name, contiguous.dtype.str, list(contiguous.shape)])
            frames.append(contiguous)
    header["tensors"] = specs
    frames[0] = orjson.dumps(header)
    return frames


def unpack(frames: Sequence[bytes]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and tensors of a message made by `pack` (numeric tensors are not copied)."""
    header: dict[str, Any] = orjson.loads(frames[0])
    tensors: dict[str, np.ndarray] = {}
    for (name, dtype, shape), buffer in zip(header.get("tensors", ()), frames[1:], strict=True):
        if dtype == "BYTES":
            tensors[name] = decode_bytes_tensor(buffer, tuple(shape))
        else:
            tensors[name] = np.frombuffer(buffer, dtype=np.dtype(dtype)).reshape(shape)
    return header, tensors
