"""The protocol's message classes, built from the committed `inference.binpb` (see `build`).

They live in a private descriptor pool, so a process that also imports another copy of the
protocol (tritonclient's, in the tests) has no clash over the `inference.*` names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SERVICE = "inference.GRPCInferenceService"

_POOL = descriptor_pool.DescriptorPool()
for _file in descriptor_pb2.FileDescriptorSet.FromString(
    (Path(__file__).parent / "inference.binpb").read_bytes()
).file:
    _POOL.Add(_file)


def _message(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"inference.{name}"))


def methods() -> dict[str, tuple[Any, Any]]:
    """Each RPC of the service by name, with its request and response classes."""
    service = _POOL.FindServiceByName(SERVICE)
    return {
        m.name: (
            message_factory.GetMessageClass(m.input_type),
            message_factory.GetMessageClass(m.output_type),
        )
        for m in service.methods
    }


InferParameter = _message("InferParameter")
ModelInferRequest = _message("ModelInferRequest")
ModelInferResponse = _message("ModelInferResponse")
ModelStreamInferResponse = _message("ModelStreamInferResponse")
ServerLiveResponse = _message("ServerLiveResponse")
ServerReadyResponse = _message("ServerReadyResponse")
ModelReadyResponse = _message("ModelReadyResponse")
ServerMetadataResponse = _message("ServerMetadataResponse")
ModelMetadataResponse = _message("ModelMetadataResponse")
ModelConfigResponse = _message("ModelConfigResponse")
ModelStatisticsResponse = _message("ModelStatisticsResponse")
RepositoryIndexResponse = _message("RepositoryIndexResponse")
RepositoryModelLoadResponse = _message("RepositoryModelLoadResponse")
RepositoryModelUnloadResponse = _message("RepositoryModelUnloadResponse")
