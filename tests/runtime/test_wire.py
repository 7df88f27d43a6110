"""The worker wire format: a JSON header frame and one raw frame per tensor, no pickling."""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.runtime.wire import pack, unpack


def frames_as_bytes(frames: list) -> list[bytes]:
    """What the other end receives: every frame as bytes (as a FrameReader gives)."""
    return [frame.tobytes() if isinstance(frame, np.ndarray) else bytes(frame) for frame in frames]


def round_trip(header: dict, tensors: dict[str, np.ndarray]) -> tuple[dict, dict]:
    return unpack(frames_as_bytes(pack(header, tensors)))


def test_header_only() -> None:
    header, tensors = round_trip({"op": "ping", "id": 3}, {})
    assert header == {"op": "ping", "id": 3, "tensors": []}
    assert tensors == {}


def test_numeric_tensors_keep_dtype_shape_and_values() -> None:
    sent = {
        "f": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i": np.array([[-1], [2]], dtype=np.int64),
        "b": np.array([True, False, True]),
        "h": np.array([0.5], dtype=np.float16),
        "e": np.zeros((0, 4), dtype=np.uint8),
    }
    header, got = round_trip({"op": "infer"}, sent)
    assert list(got) == list(sent)
    for name, array in sent.items():
        assert got[name].dtype == array.dtype, name
        assert got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array)
    assert [spec[0] for spec in header["tensors"]] == list(sent)


def test_numeric_frames_are_the_arrays_bytes_with_no_copy_when_contiguous() -> None:
    array = np.arange(4, dtype="<i4")
    frames = pack({}, {"a": array})
    assert frames[1] is array or np.shares_memory(frames[1], array)
    assert orjson.loads(frames[0])["tensors"] == [["a", "<i4", [4]]]


def test_non_contiguous_arrays_travel_in_c_order() -> None:
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    for view in (base[:, ::2], base.T, base[::-1]):
        _, got = round_trip({}, {"v": view})
        assert got["v"].shape == view.shape
        np.testing.assert_array_equal(got["v"], view)


def test_big_endian_arrays_arrive_little_endian_with_equal_values() -> None:
    array = np.array([[1.5, -2.0], [3.0, 1e10]], dtype=">f8")
    header, got = round_trip({}, {"v": array})
    assert header["tensors"][0][1] == "<f8"
    assert got["v"].dtype == np.dtype("<f8")
    np.testing.assert_array_equal(got["v"], array)


def test_scalars_keep_their_shape() -> None:
    _, got = round_trip({}, {"s": np.array(2.5, dtype=np.float32)})
    assert got["s"].shape == ()
    assert got["s"].item() == 2.5


def test_bytes_tensors_are_length_prefixed() -> None:
    texts = np.empty((2, 2), dtype=object)
    texts[:] = [[b"a", b""], ["é".encode(), b"\x00\x01"]]
    frames = pack({}, {"t": texts})
    assert frames[1] == (
        b"\x01\x00\x00\x00a"
        + b"\x00\x00\x00\x00"
        + b"\x02\x00\x00\x00\xc3\xa9"
        + b"\x02\x00\x00\x00\x00\x01"
    )
    header, got = unpack(frames_as_bytes(frames))
    assert header["tensors"] == [["t", "BYTES", [2, 2]]]
    assert got["t"].dtype == object
    assert got["t"].tolist() == texts.tolist()


def test_numpy_strings_travel_as_bytes() -> None:
    _, got = round_trip({}, {"u": np.array(["ab", "é"]), "s": np.array([b"x", b"yz"])})
    assert got["u"].tolist() == [b"ab", "é".encode()]
    assert got["s"].tolist() == [b"x", b"yz"]


def test_frames_must_match_the_header() -> None:
    frames = frames_as_bytes(pack({}, {"a": np.zeros(2), "b": np.zeros(2)}))
    with pytest.raises(ValueError):
        unpack(frames[:-1])


NUMERIC = [
    np.dtype(d) for d in ("?", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f2", "f4", "f8")
]


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = draw(st.sampled_from(NUMERIC))
    if dtype.itemsize > 1 and draw(st.booleans()):
        dtype = dtype.newbyteorder(">")
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    array = draw(hnp.arrays(dtype, shape))
    if array.ndim and draw(st.booleans()):
        array = array[::-1]  # a negative-stride view
    return array


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5), arrays(), max_size=4))
def test_round_trip_property(sent: dict[str, np.ndarray]) -> None:
    _, got = round_trip({"op": "infer"}, sent)
    assert list(got) == list(sent)
    for name, array in sent.items():
        little = array.astype(array.dtype.newbyteorder("<"))
        assert got[name].shape == array.shape
        assert got[name].dtype == little.dtype
        assert got[name].tobytes() == little.tobytes()  # bit for bit, NaNs included
