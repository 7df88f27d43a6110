"""The committed compiled proto is current, its field numbers are the protocol's, and the codec
turns bad tensors into errors that name them."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import descriptor_pb2

from headway.api.grpc import build, messages
from headway.api.grpc.codec import decode_infer, encode_infer
from headway.api.oip import InferRequest
from headway.errors import InvalidInput


def test_the_committed_descriptor_is_the_compiled_proto() -> None:
    committed = descriptor_pb2.FileDescriptorSet.FromString(build.COMPILED.read_bytes())
    fresh = descriptor_pb2.FileDescriptorSet.FromString(build.compile_proto())
    assert committed == fresh, "run `python -m headway.api.grpc.build` after editing the proto"


def test_every_field_number_matches_tritonclients_copy_of_the_protocol() -> None:
    """tritonclient ships its own compiled protocol: each of our messages must agree with it
    field by field (number, name, type), and each of our RPCs must exist there."""
    from tritonclient.grpc import model_config_pb2, service_pb2

    theirs = {
        **{d.full_name: d for d in service_pb2.DESCRIPTOR.message_types_by_name.values()},
        **{d.full_name: d for d in model_config_pb2.DESCRIPTOR.message_types_by_name.values()},
    }

    def walk(descriptor):  # type: ignore[no-untyped-def]
        yield descriptor
        for nested in descriptor.nested_types:
            yield from walk(nested)

    def find(full_name: str):  # type: ignore[no-untyped-def]
        top, *rest = full_name.removeprefix("inference.").split(".")
        found = theirs[f"inference.{top}"]
        for part in rest:
            found = found.nested_types_by_name[part]
        return found

    compared = 0
    for ours_top in messages._POOL.FindFileByName("inference.proto").message_types_by_name.values():
        for ours in walk(ours_top):
            other = find(ours.full_name)
            for field in ours.fields:
                match = other.fields_by_number[field.number]
                assert (match.name, match.type) == (field.name, field.type), ours.full_name
                compared += 1
    assert compared > 100
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    for name, (request, response) in messages.methods().items():
        method = service.methods_by_name[name]
        assert method.input_type.name == request.DESCRIPTOR.name
        assert method.output_type.name == response.DESCRIPTOR.name


def _request(**tensor: object) -> object:
    request = messages.ModelInferRequest(model_name="m")
    request.inputs.add(**tensor)
    return request


def test_raw_and_typed_tensors_decode_and_answers_encode_raw() -> None:
    rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    raw = _request(name="x", datatype="FP32", shape=[2, 3])
    raw.raw_input_contents.append(rows.tobytes())  # type: ignore[attr-defined]
    np.testing.assert_array_equal(decode_infer(raw).inputs["x"], rows)
    typed = _request(name="x", datatype="INT16", shape=[3])
    typed.inputs[0].contents.int_contents.extend([1, -2, 3])  # type: ignore[attr-defined]
    decoded = decode_infer(typed).inputs["x"]
    assert decoded.dtype == np.int16 and decoded.tolist() == [1, -2, 3]
    words = np.array([b"a", b"bc"], dtype=object)
    response = encode_infer("m", 1, {"y": rows, "w": words}, InferRequest({}))
    assert [o.datatype for o in response.outputs] == ["FP32", "BYTES"]
    assert response.raw_output_contents[0] == rows.tobytes()
    assert response.raw_output_contents[1] == b"\x01\x00\x00\x00a\x02\x00\x00\x00bc"


@pytest.mark.parametrize(
    ("tensor", "raw", "message"),
    [
        (
            {"name": "x", "datatype": "FP32", "shape": [2]},
            [b"\0" * 4],
            r"'x'.*needs 8 bytes, got 4",
        ),
        ({"name": "x", "datatype": "FP32", "shape": [1]}, [b"", b""], r"2 entries for 1 inputs"),
        ({"name": "x", "datatype": "FP9", "shape": [1]}, [b""], r"'x'.*unknown datatype 'FP9'"),
        ({"name": "x", "datatype": "FP16", "shape": [1]}, [], r"'x'.*FP16 travels only in raw"),
        ({"name": "x", "datatype": "FP32", "shape": [2]}, [], r"'x'.*needs 2 elements"),
        ({"name": "x", "datatype": "BYTES", "shape": [1]}, [b"\x09\0\0\0a"], r"'x'.*past the end"),
    ],
)
def test_bad_tensors_are_invalid_input_naming_them(
    tensor: dict[str, object], raw: list[bytes], message: str
) -> None:
    request = _request(**tensor)
    request.raw_input_contents.extend(raw)  # type: ignore[attr-defined]
    with pytest.raises(InvalidInput, match=message):
        decode_infer(request)


def test_typed_integers_out_of_range_are_refused() -> None:
    request = _request(name="x", datatype="INT8", shape=[1])
    request.inputs[0].contents.int_contents.append(300)  # type: ignore[attr-defined]
    with pytest.raises(InvalidInput, match=r"'x'.*outside INT8"):
        decode_infer(request)
