"""The Open Inference Protocol codec: JSON tensors, Triton's binary extension, clear errors."""

from __future__ import annotations

import re
from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.api.errors import http_status
from headway.api.grpc import codec, messages, status
from headway.api.limits import AnswerTooLarge
from headway.api.oip import InferRequest, decode_infer, encode_infer
from headway.datatypes import OIP_TO_NUMPY, encode_bytes_tensor, oip_datatype
from headway.errors import InvalidInput

NUMERIC_JSON = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
NUMERIC_JSON += ["FP32", "FP64"]


def body(*inputs: dict[str, Any], **extra: Any) -> bytes:
    return orjson.dumps({"inputs": list(inputs), **extra})


def binary_body(
    tensors: list[tuple[str, str, list[int], bytes]], **extra: Any
) -> tuple[bytes, int]:
    """A request as a binary-extension client writes it: JSON header, then raw tensor bytes."""
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": datatype,
                    "shape": shape,
                    "parameters": {"binary_data_size": len(raw)},
                }
                for name, datatype, shape, raw in tensors
            ],
            **extra,
        }
    )
    return header + b"".join(raw for *_, raw in tensors), len(header)


def objects(*items: bytes) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = list(items)
    return array


def invalid(raw: bytes, header_length: int | None = None) -> str:
    with pytest.raises(InvalidInput) as info:
        decode_infer(raw, header_length)
    return info.value.message


# -- JSON decode --------------------------------------------------------------------------------


def test_nested_and_flat_data_decode_alike() -> None:
    nested = decode_infer(
        body({"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [[1, 2, 3], [4, 5, 6]]})
    )
    flat = decode_infer(
        body({"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]})
    )
    for request in (nested, flat):
        array = request.inputs["x"]
        assert array.dtype == np.float32
        assert array.shape == (2, 3)
        assert array.tolist() == [[1, 2, 3], [4, 5, 6]]


@pytest.mark.parametrize("datatype", NUMERIC_JSON)
def test_every_json_numeric_datatype(datatype: str) -> None:
    dtype = OIP_TO_NUMPY[datatype]
    data = [True, False, True] if datatype == "BOOL" else [0, 1, 2]
    array = decode_infer(
        body({"name": "x", "datatype": datatype, "shape": [3], "data": data})
    ).inputs["x"]
    assert array.dtype == dtype
    assert array.tolist() == data
    assert oip_datatype(array.dtype) == datatype


@pytest.mark.parametrize(
    ("datatype", "value"),
    [
        ("UINT64", 2**64 - 1),
        ("INT64", -(2**63)),
        ("INT8", -128),
        ("UINT8", 255),
        ("FP64", 1.5e300),
    ],
)
def test_json_extremes_survive(datatype: str, value: float) -> None:
    array = decode_infer(
        body({"name": "x", "datatype": datatype, "shape": [1], "data": [value]})
    ).inputs["x"]
    assert array.tolist() == [value]


def test_json_floats_accept_integers() -> None:
    array = decode_infer(
        body({"name": "x", "datatype": "FP64", "shape": [2], "data": [1, 2.5]})
    ).inputs["x"]
    assert array.tolist() == [1.0, 2.5]


def test_json_bytes_are_utf8_encoded() -> None:
    array = decode_infer(
        body({"name": "s", "datatype": "BYTES", "shape": [2, 1], "data": [["abc"], ["dé"]]})
    ).inputs["s"]
    assert array.dtype == object
    assert array.shape == (2, 1)
    assert array.reshape(-1).tolist() == [b"abc", "dé".encode()]


def test_request_fields_are_kept() -> None:
    request = decode_infer(
        body(
            {"name": "x", "datatype": "INT32", "shape": [1], "data": [7]},
            id="req-1",
            parameters={"priority": 1, "timeout": 500},
            outputs=[{"name": "a", "parameters": {"binary_data": True}}, {"name": "b"}],
        )
    )
    assert request.id == "req-1"
    assert request.parameters == {"priority": 1, "timeout": 500}
    assert request.outputs == ["a", "b"]
    assert request.binary_outputs == {"a"}
    assert request.all_binary is False
    assert decode_infer(
        body(
            {"name": "x", "datatype": "INT32", "shape": [1], "data": [7]},
            parameters={"binary_data_output": True},
        )
    ).all_binary


def test_empty_tensor() -> None:
    array = decode_infer(
        body({"name": "x", "datatype": "INT32", "shape": [0, 3], "data": []})
    ).inputs["x"]
    assert array.shape == (0, 3)
    assert array.dtype == np.int32


# -- binary extension decode ---------------------------------------------------------------------


def test_binary_inputs_follow_the_header() -> None:
    x = np.arange(6, dtype="<f4").reshape(2, 3)
    y = np.array([1, -2], dtype="<i8")
    raw, header_length = binary_body(
        [("x", "FP32", [2, 3], x.tobytes()), ("y", "INT64", [2], y.tobytes())]
    )
    request = decode_infer(raw, header_length)
    assert request.inputs["x"].dtype == np.float32
    np.testing.assert_array_equal(request.inputs["x"], x)
    np.testing.assert_array_equal(request.inputs["y"], y)


def test_binary_bytes_are_length_prefixed() -> None:
    raw_strings = struct_prefixed([b"hello", b"", b"\x00\xff"])
    raw, header_length = binary_body(
        [("s", "BYTES", [3], raw_strings), ("n", "UINT8", [2], bytes([1, 2]))]
    )
    request = decode_infer(raw, header_length)
    assert request.inputs["s"].tolist() == [b"hello", b"", b"\x00\xff"]
    assert request.inputs["n"].tolist() == [1, 2]


def struct_prefixed(items: list[bytes]) -> bytes:
    return b"".join(len(item).to_bytes(4, "little") + item for item in items)


def test_binary_and_json_inputs_mix() -> None:
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "j", "datatype": "INT32", "shape": [1], "data": [5]},
                {
                    "name": "b",
                    "datatype": "FP16",
                    "shape": [2],
                    "parameters": {"binary_data_size": 4},
                },
            ]
        }
    )
    halves = np.array([0.5, -2.0], dtype="<f2")
    request = decode_infer(header + halves.tobytes(), len(header))
    assert request.inputs["j"].tolist() == [5]
    assert request.inputs["b"].dtype == np.float16
    assert request.inputs["b"].tolist() == [0.5, -2.0]


# -- decode errors -------------------------------------------------------------------------------


def test_malformed_json() -> None:
    assert invalid(b'{"inputs": [').startswith("request body is not valid JSON")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2], "request body must be a JSON object with an 'inputs' list"),
        ({}, "request needs a non-empty 'inputs' list"),
        ({"inputs": []}, "request needs a non-empty 'inputs' list"),
        (
            {"inputs": [{"datatype": "FP32"}]},
            "each input needs a 'name' string, a 'shape' and a 'datatype'",
        ),
        (
            {"inputs": [{"name": "x", "shape": [1], "data": [1]}]},
            "input 'x': 'datatype' is missing",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]},
            "input 'x': shape must be a list of non-negative integers, got None",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1], "data": [1]}]},
            "input 'x': shape must be a list of non-negative integers, got [-1]",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, True], "data": [1]}]},
            "input 'x': shape must be a list of non-negative integers, got [1, True]",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1.0], "data": [1]}]},
            "input 'x': shape must be a list of non-negative integers, got [1.0]",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]},
            "input 'x': needs 'data' or parameters.binary_data_size",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3]}]},
            "input 'x': shape [2, 2] needs 4 elements, got 3",
        ),
        (
            {"inputs": [{"name": "x", "datatype": "FP16", "shape": [1], "data": [1.0]}]},
            "input 'x': FP16 cannot travel as JSON; send it binary",
        ),
        (
            {
                "inputs": [
                    {"name": "x", "datatype": "FP32", "shape": [1], "data": [1]},
                    {"name": "x", "datatype": "FP32", "shape": [1], "data": [1]},
                ]
            },
            "input 'x' appears twice",
        ),
        (
            {
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
                "parameters": [1],
            },
            "'parameters' must be an object",
        ),
        (
            {
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
                "outputs": {"name": "y"},
            },
            "'outputs' must be a list of {name, parameters}",
        ),
    ],
)
def test_structural_errors(document: Any, message: str) -> None:
    assert invalid(orjson.dumps(document)) == message


def test_unknown_datatype_names_the_input() -> None:
    message = invalid(body({"name": "x", "datatype": "FP8", "shape": [1], "data": [1]}))
    assert message.startswith("input 'x': unknown datatype 'FP8'; expected one of BOOL, ")


@pytest.mark.parametrize(
    ("datatype", "data"),
    [
        ("FP32", ["1.5"]),  # a string is not a number
        ("FP32", [None]),  # null is not a number (it must not become NaN)
        ("FP64", [True]),
        ("INT32", [1.5]),  # must not be truncated to 1
        ("INT64", ["7"]),
        ("UINT8", [300]),  # out of range
        ("UINT8", [-1]),
        ("INT8", [128]),
        ("BOOL", [1]),  # BOOL is true/false
        ("FP32", [[1, 2], [3]]),  # ragged
        ("FP32", [1e300]),  # out of FP32's range
    ],
)
def test_json_data_of_the_wrong_kind_is_refused(datatype: str, data: Any) -> None:
    message = invalid(body({"name": "x", "datatype": datatype, "shape": [len(data)], "data": data}))
    assert message.startswith(f"input 'x': data is not valid {datatype}: "), message


@pytest.mark.parametrize(
    ("datatype", "data", "why"),
    [
        ("FP32", '["1.5"]', "got strings or nulls"),
        ("FP32", "[null]", "got strings or nulls"),
        ("INT32", "[1.5]", "got fractional numbers"),
        ("INT64", "[18446744073709551616]", "got fractional numbers"),  # JSON makes it a float
        ("BOOL", "[1]", "got integers"),
        ("FP64", "[true]", "got booleans"),
        ("UINT8", "[256]", "values outside [0, 255]"),
    ],
)
def test_json_data_of_the_wrong_kind_says_why(datatype: str, data: str, why: str) -> None:
    raw = f'{{"inputs": [{{"name": "x", "datatype": "{datatype}", "shape": [1], "data": {data}}}]}}'
    assert invalid(raw.encode()) == f"input 'x': data is not valid {datatype}: {why}"


@pytest.mark.parametrize(("element", "kind"), [(3, "int"), (None, "NoneType"), ({}, "dict")])
def test_json_bytes_elements_must_be_strings(element: Any, kind: str) -> None:
    message = invalid(
        body({"name": "s", "datatype": "BYTES", "shape": [2], "data": ["a", element]})
    )
    assert message == f"input 's': BYTES data must be strings, got {kind}"


def test_binary_size_must_match_the_shape() -> None:
    raw, header_length = binary_body([("x", "FP32", [2, 2], bytes(12))])
    assert invalid(raw, header_length) == "input 'x': shape [2, 2] of FP32 needs 16 bytes, got 12"


def test_header_length_past_the_body() -> None:
    raw, _ = binary_body([("x", "FP32", [1], bytes(4))])
    assert invalid(raw, len(raw) + 1) == (
        f"Inference-Header-Content-Length {len(raw) + 1} is outside the body ({len(raw)} bytes)"
    )
    assert invalid(raw, -1).startswith("Inference-Header-Content-Length -1 is outside")


def test_binary_size_past_the_body() -> None:
    raw, header_length = binary_body([("x", "FP32", [2], bytes(8))])
    assert invalid(raw[:-1], header_length) == "input 'x': binary_data_size 8 runs past the body"


def test_binary_size_must_be_an_integer() -> None:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "BOOL",
                    "shape": [1],
                    "parameters": {"binary_data_size": True},
                }
            ]
        }
    )
    assert invalid(header + b"\x01", len(header)) == (
        "input 'x': binary_data_size True runs past the body"
    )


def test_binary_data_needs_the_header_length() -> None:
    raw, _ = binary_body([("x", "FP32", [1], bytes(4))])
    assert invalid(raw[: raw.index(b"}]}") + 3]) == (
        "input 'x': binary_data_size needs the Inference-Header-Content-Length header"
    )


def test_unclaimed_trailing_bytes() -> None:
    raw, header_length = binary_body([("x", "FP32", [1], bytes(4))])
    assert (
        invalid(raw + b"??", header_length) == "2 bytes after the last binary input are unclaimed"
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x05\x00", "truncated length prefix"),
        (b"\x05\x00\x00\x00abc", "element runs past the end of its buffer"),
        (struct_prefixed([b"a"]), "shape [2] needs 2 elements, got 1"),
    ],
)
def test_broken_binary_bytes_name_the_input(raw: bytes, message: str) -> None:
    body_, header_length = binary_body([("s", "BYTES", [2], raw)])
    assert invalid(body_, header_length) == f"input 's': BYTES tensor: {message}"


# -- encode -------------------------------------------------------------------------------------


def parse_response(raw: bytes, header_length: int | None) -> dict[str, Any]:
    """The response as a client reads it: outputs by name, binary ones sliced from the tail."""
    head = raw if header_length is None else raw[:header_length]
    document = orjson.loads(head)
    offset = len(head)
    document["binary"] = {}
    for output in document["outputs"]:
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            document["binary"][output["name"]] = raw[offset : offset + size]
            offset += size
    assert offset == len(raw)
    return document


OUTPUTS = {
    "label": np.array([1, 0, 2], dtype=np.int64),
    "probabilities": np.array([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]], dtype=np.float32),
    "text": objects(b"a", b"bc", "é".encode()),
}


def test_encode_json() -> None:
    raw, header_length = encode_infer("m", 3, OUTPUTS, InferRequest({}, id="r7"))
    assert header_length is None
    document = orjson.loads(raw)
    assert document["model_name"] == "m"
    assert document["model_version"] == "3"
    assert document["id"] == "r7"
    by_name = {o["name"]: o for o in document["outputs"]}
    assert by_name["label"] == {
        "name": "label",
        "datatype": "INT64",
        "shape": [3],
        "data": [1, 0, 2],
    }
    assert by_name["probabilities"]["datatype"] == "FP32"
    assert by_name["probabilities"]["shape"] == [3, 2]
    assert by_name["probabilities"]["data"] == [0.25, 0.75, 1.0, 0.0, 0.5, 0.5]
    assert by_name["text"]["data"] == ["a", "bc", "é"]


def test_encode_fp16_and_bool_as_json() -> None:
    outputs = {
        "h": np.array([0.5, 2.0], dtype=np.float16),
        "b": np.array([True, False]),
    }
    document = orjson.loads(encode_infer("m", 1, outputs, InferRequest({}))[0])
    by_name = {o["name"]: o for o in document["outputs"]}
    assert by_name["h"]["datatype"] == "FP16"
    assert by_name["h"]["data"] == [0.5, 2.0]
    assert by_name["b"] == {"name": "b", "datatype": "BOOL", "shape": [2], "data": [True, False]}


def test_encode_all_binary() -> None:
    raw, header_length = encode_infer("m", 1, OUTPUTS, InferRequest({}, all_binary=True))
    assert header_length is not None
    response = parse_response(raw, header_length)
    assert all("data" not in o for o in response["outputs"])
    assert response["binary"]["label"] == OUTPUTS["label"].astype("<i8").tobytes()
    assert response["binary"]["probabilities"] == OUTPUTS["probabilities"].tobytes()
    assert response["binary"]["text"] == encode_bytes_tensor(OUTPUTS["text"])


def test_encode_binary_per_output_and_only_the_outputs_asked_for() -> None:
    request = InferRequest({}, outputs=["probabilities", "label"], binary_outputs={"probabilities"})
    raw, header_length = encode_infer("m", 1, OUTPUTS, request)
    response = parse_response(raw, header_length)
    assert [o["name"] for o in response["outputs"]] == ["probabilities", "label"]
    assert response["outputs"][1]["data"] == [1, 0, 2]
    assert set(response["binary"]) == {"probabilities"}
    assert response["outputs"][0]["parameters"] == {"binary_data_size": 24}


def test_encode_non_contiguous_output() -> None:
    wide = np.arange(12, dtype=np.int32).reshape(3, 4)
    outputs = {"v": wide[:, ::2]}
    document = orjson.loads(encode_infer("m", 1, outputs, InferRequest({}))[0])
    assert document["outputs"][0]["data"] == [0, 2, 4, 6, 8, 10]
    raw, header_length = encode_infer("m", 1, outputs, InferRequest({}, all_binary=True))
    assert (
        parse_response(raw, header_length)["binary"]["v"]
        == np.ascontiguousarray(wide[:, ::2]).tobytes()
    )


def test_encode_big_endian_output_as_little_endian() -> None:
    values = np.array([1.5, -2.0, 3.25], dtype=">f4")
    document = orjson.loads(encode_infer("m", 1, {"v": values}, InferRequest({}))[0])
    assert document["outputs"][0]["datatype"] == "FP32"
    assert document["outputs"][0]["data"] == [1.5, -2.0, 3.25]
    raw, header_length = encode_infer("m", 1, {"v": values}, InferRequest({}, all_binary=True))
    blob = parse_response(raw, header_length)["binary"]["v"]
    assert np.frombuffer(blob, dtype="<f4").tolist() == [1.5, -2.0, 3.25]


def test_encode_an_output_the_model_did_not_produce() -> None:
    with pytest.raises(InvalidInput) as info:
        encode_infer("m", 1, OUTPUTS, InferRequest({}, outputs=["label", "scores"]))
    assert info.value.message == (
        "model 'm' has no output 'scores'; it answered ['label', 'probabilities', 'text']"
    )


# -- round trips ---------------------------------------------------------------------------------


def as_request(raw: bytes, header_length: int | None) -> tuple[bytes, int | None]:
    """Turn an encoded response into a request with the same tensors (outputs -> inputs)."""
    head = raw if header_length is None else raw[:header_length]
    document = orjson.loads(head)
    header = orjson.dumps({"inputs": document["outputs"]})
    if header_length is None:
        return header, None
    return header + raw[header_length:], len(header)


def test_json_round_trip() -> None:
    outputs = {k: v for k, v in OUTPUTS.items()}
    raw, header_length = encode_infer("m", 1, outputs, InferRequest({}))
    decoded = decode_infer(*as_request(raw, header_length)).inputs
    for name, array in outputs.items():
        assert decoded[name].dtype == array.dtype
        assert decoded[name].shape == array.shape
        assert decoded[name].tolist() == array.tolist()


BINARY_DTYPES = [np.dtype(d) for n, d in OIP_TO_NUMPY.items() if n != "BYTES"]


@st.composite
def tensors(draw: st.DrawFn) -> np.ndarray:
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    if draw(st.booleans()) and draw(st.booleans()):
        items = draw(
            st.lists(
                st.binary(max_size=8), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))
            )
        )
        array = np.empty(len(items), dtype=object)
        array[:] = items
        return array.reshape(shape)
    dtype = draw(st.sampled_from(BINARY_DTYPES))
    if draw(st.booleans()) and dtype.itemsize > 1:
        dtype = dtype.newbyteorder(">")
    return draw(hnp.arrays(dtype, shape))


def little(array: np.ndarray) -> bytes:
    return array.astype(array.dtype.newbyteorder("<")).tobytes()


@settings(max_examples=150, deadline=None)
@given(st.lists(tensors(), min_size=1, max_size=4))
def test_binary_round_trip(arrays: list[np.ndarray]) -> None:
    outputs = {f"t{i}": array for i, array in enumerate(arrays)}
    raw, header_length = encode_infer("m", 1, outputs, InferRequest({}, all_binary=True))
    assert header_length is not None
    decoded = decode_infer(*as_request(raw, header_length)).inputs
    assert list(decoded) == list(outputs)
    for name, array in outputs.items():
        got = decoded[name]
        assert got.shape == array.shape
        assert oip_datatype(got.dtype) == oip_datatype(array.dtype)
        if array.dtype == object:
            assert got.reshape(-1).tolist() == array.reshape(-1).tolist()
        else:
            assert got.tobytes() == little(array)  # bit for bit, NaN payloads included


@pytest.mark.parametrize(
    "outputs",
    [
        {"probabilities": np.array([[0.25, 0.75]])},
        {"p": np.arange(6, dtype=np.float32).reshape(3, 2), "label": np.array([1, 0, 1])},
        {"flag": np.array([True, False])},
        {"column": np.arange(12.0).reshape(4, 3)[:, 1]},  # not contiguous
        {"u": np.arange(6, dtype=np.uint8).reshape(2, 3), "i": np.array([-(2**62)])},
        {"half": np.zeros(2, dtype=np.float16)},  # the general path: FP16 as a list
        {"big": np.arange(3, dtype=">i4")},  # the general path: swapped to little-endian
        {"text": np.array([b"a", b"b"], dtype=object)},  # the general path: BYTES
    ],
)
@pytest.mark.parametrize("request_id", [None, "r-1"])
def test_json_answers_are_the_document_each_time(
    outputs: dict[str, np.ndarray], request_id: str | None
) -> None:
    """The answer's bytes (made from heads kept between answers) are orjson's encoding of the
    protocol's document, the first time and again, and for each choice of outputs."""
    for wanted in (None, [next(iter(outputs))], list(outputs)[::-1]):
        names = wanted if wanted is not None else list(outputs)
        described = []
        for name in names:
            array = outputs[name].astype(outputs[name].dtype.newbyteorder("<"))
            data: Any = array.reshape(-1).tolist()
            if array.dtype.kind == "O":
                data = [x.decode() for x in data]
            described.append({"name": name, "datatype": oip_datatype(array.dtype),
                              "shape": list(array.shape), "data": data})  # fmt: skip
        document: dict[str, Any] = {"model_name": "m", "model_version": "3", "outputs": described}
        if request_id is not None:
            document["id"] = request_id
        request = InferRequest({}, id=request_id, outputs=wanted)
        for _ in range(2):
            body, header_length = encode_infer("m", 3, outputs, request)
            assert header_length is None
            assert body == orjson.dumps(document)


def test_json_answers_of_other_models_and_shapes_get_their_own_heads() -> None:
    request = InferRequest({}, outputs=["y"])
    one = encode_infer("a", 1, {"y": np.array([[1.5]])}, request)[0]
    two = encode_infer("b", 2, {"y": np.array([[1.5, 2.5]])}, request)[0]
    assert orjson.loads(one) == {"model_name": "a", "model_version": "1",
        "outputs": [{"name": "y", "datatype": "FP64", "shape": [1, 1], "data": [1.5]}]}  # fmt: skip
    assert orjson.loads(two)["outputs"][0]["shape"] == [1, 2]
    assert orjson.loads(two)["model_name"] == "b"
    with pytest.raises(InvalidInput, match="has no output 'z'"):
        encode_infer("a", 1, {"y": np.array([[1.5]])}, InferRequest({}, outputs=["z"]))


def test_infer_requests_have_the_former_defaults_and_share_no_mutable_default() -> None:
    first, second = InferRequest({}), InferRequest({})
    assert first.id is None and first.outputs is None and first.all_binary is False
    assert first.parameters == {} and first.binary_outputs == set()
    first.binary_outputs.add("y")
    first.parameters["k"] = 1
    assert second.binary_outputs == set() and second.parameters == {}  # each its own
    given = InferRequest({}, "r", {"p": 2}, ["y"], {"y"}, True)
    assert (given.id, given.parameters, given.outputs) == ("r", {"p": 2}, ["y"])
    assert (given.binary_outputs, given.all_binary) == ({"y"}, True)


# -- what a request may ask of an answer, and shapes no array can take (REST and gRPC) ----------


def _grpc_request(shape: list[int], raw: bytes | None = b"", outputs: tuple[str, ...] = ()) -> Any:
    request = messages.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=shape)
    if raw is not None:
        request.raw_input_contents.append(raw)
    for name in outputs:
        request.outputs.add(name=name)
    return request


def test_an_output_asked_for_twice_is_refused_naming_it() -> None:
    x = {"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}
    outputs = [{"name": "y"}, {"name": "z"}, {"name": "y", "parameters": {"binary_data": True}}]
    assert "output 'y' is asked for twice" in invalid(body(x, outputs=outputs))
    assert decode_infer(body(x, outputs=outputs[:2])).outputs == ["y", "z"]
    with pytest.raises(InvalidInput, match="output 'y' is asked for twice"):
        codec.decode_infer(_grpc_request([1], b"\0" * 4, outputs=("y", "z", "y")))


@pytest.mark.parametrize(
    "shape",
    [[2**32, 2**32, 0], [2**62, 2, 0], [0, 2**63 - 1], [2**61, 0, 4]],
)
def test_a_shape_no_array_can_take_is_refused_naming_it(shape: list[int]) -> None:
    named = f"input 'x': shape {shape} is too large"
    for datatype in ("FP32", "BYTES"):
        x = {"name": "x", "datatype": datatype, "shape": shape, "data": []}
        assert named in invalid(body(x))
        raw, length = binary_body([("x", datatype, shape, b"")])
        assert named in invalid(raw, length)
    for grpc_request in (_grpc_request(shape), _grpc_request(shape, raw=None)):
        with pytest.raises(InvalidInput, match=re.escape(named)):
            codec.decode_infer(grpc_request)
    assert decode_infer(body({"name": "x", "datatype": "FP32", "shape": [2**40, 0], "data": []}))


def test_an_answer_over_the_limit_is_refused_naming_the_limit_and_its_flag() -> None:
    outputs = {"y": np.ones((100, 10), dtype=np.float32)}
    for request in (InferRequest({}), InferRequest({}, all_binary=True)):  # JSON, binary
        fits, _ = encode_infer("m", 1, outputs, request)
        assert encode_infer("m", 1, outputs, request, len(fits))[0] == fits
        with pytest.raises(
            AnswerTooLarge, match=r"exceeds the limit of \d+ bytes \(--max-answer-mb\)"
        ):
            encode_infer("m", 1, outputs, request, len(fits) - 1)
    assert (
        len(codec.encode_infer("m", 1, outputs, InferRequest({}), 4000).raw_output_contents[0])
        == 4000
    )
    with pytest.raises(AnswerTooLarge) as refused:
        codec.encode_infer("m", 1, outputs, InferRequest({}), 3999)
    assert status.grpc_status(refused.value).name == "RESOURCE_EXHAUSTED"
    assert http_status(refused.value) == 400  # 413 is a request's
