"""The Open Inference Protocol's routes of one model (metadata, readiness, configuration,
statistics, inference, whole or as server-sent events), for a model and for one of its
versions, and its tensor schema."""

from __future__ import annotations

from typing import Any

from headway.api.openapi.events import event_stream
from headway.api.openapi.parts import ERROR, json_body, schema_ref


def model_routes(prefix: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    ref = {"$ref": "#/components/schemas/ModelMetadata"}
    return {
        prefix: {
            "get": {
                "summary": "Model metadata",
                "parameters": params,
                "responses": {"200": json_body(ref), "404": ERROR},
            }
        },
        f"{prefix}/ready": {
            "get": {
                "summary": "Model ready",
                "parameters": params,
                "responses": {"200": {"description": "ready"}, "400": ERROR, "404": ERROR},
            }
        },
        f"{prefix}/config": {
            "get": {
                "summary": "Model configuration (Triton)",
                "parameters": params,
                "responses": {"200": json_body({"type": "object"}), "404": ERROR},
            }
        },
        f"{prefix}/stats": {
            "get": {
                "summary": "Model statistics (Triton)",
                "parameters": params,
                "responses": {"200": json_body({"type": "object"}), "404": ERROR},
            }
        },
        f"{prefix}/infer": {
            "post": {
                "summary": "Inference",
                "parameters": params,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/InferRequest"}
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The answer; with `Accept: text/event-stream`, the "
                        "answer of a model that answers in parts, one event per part",
                        "content": {
                            **json_body(schema_ref("InferResponse"))["content"],
                            **event_stream(
                                "`data: <InferResponse>` per part (its rows of each output); "
                                "`data: <StreamError>` last, for an error after the first part",
                                "InferResponse",
                                "StreamError",
                            ),
                        },
                    },
                    "400": ERROR,
                    "404": ERROR,
                    "413": ERROR,
                    "429": ERROR,
                    "500": ERROR,
                    "503": ERROR,
                },
            }
        },
    }


TENSOR = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {
            "type": "string",
            "enum": [
                "BOOL",
                "UINT8",
                "UINT16",
                "UINT32",
                "UINT64",
                "INT8",
                "INT16",
                "INT32",
                "INT64",
                "FP16",
                "FP32",
                "FP64",
                "BYTES",
            ],
        },
        "parameters": {"type": "object"},
        "data": {"type": "array", "items": {}},
    },
}
