"""The OpenAPI document of the HTTP API (served at /openapi.json, so it can be fuzzed): the
Open Inference Protocol's routes (`inference`), Triton's generate extension (`generate`),
OpenAI's completions (`completions`), the application API's (`apps`), and which routes need
the admin token. Streamed answers are `text/event-stream`, their events' JSON described
beside them (`events`)."""

from __future__ import annotations

from typing import Any

from headway.api.auth import is_admin
from headway.api.openapi.apps import APP_SCHEMAS, app_routes
from headway.api.openapi.completions import COMPLETION_SCHEMAS, completion_routes
from headway.api.openapi.generate import GENERATE_SCHEMAS, generate_routes, request_parameters
from headway.api.openapi.inference import TENSOR, model_routes
from headway.api.openapi.parts import ERROR, NAME, VERSION, json_body

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "Headway",
        "version": "0.1.0",
        "description": "Open Inference Protocol (KServe v2) REST, with Triton's binary "
        "tensor, model repository, schedule-policy, model-configuration, statistics and "
        "generate extensions; OpenAI's completions over text generators; answers in parts "
        "as server-sent events (text/event-stream).",
    },
    "paths": {
        "/v2": {
            "get": {
                "summary": "Server metadata",
                "responses": {"200": json_body({"type": "object"})},
            }
        },
        "/v2/health/live": {
            "get": {"summary": "Live", "responses": {"200": {"description": "live"}}}
        },
        "/v2/health/ready": {
            "get": {
                "summary": "Ready",
                "responses": {
                    "200": json_body(
                        {"type": "object", "properties": {"ready": {"type": "boolean"}}}
                    ),
                    "503": json_body(
                        {
                            "type": "object",
                            "required": ["ready", "starting", "error", "models"],
                            "properties": {
                                "ready": {"type": "boolean"},
                                "starting": {"type": "boolean"},
                                "error": {"type": "string"},
                                "models": {
                                    "type": "object",
                                    "additionalProperties": {"type": "string"},
                                },
                            },
                        },
                        "not ready: the models that are not, each with the reason",
                    ),
                },
            }
        },
        "/v2/models/stats": {
            "get": {
                "summary": "Every model's statistics (Triton)",
                "responses": {"200": json_body({"type": "object"})},
            }
        },
        **model_routes("/v2/models/{name}", [NAME]),
        **model_routes("/v2/models/{name}/versions/{version}", [NAME, VERSION]),
        **generate_routes("/v2/models/{name}", [NAME]),
        **generate_routes("/v2/models/{name}/versions/{version}", [NAME, VERSION]),
        "/v2/repository/index": {
            "post": {
                "summary": "Repository index",
                "responses": {"200": json_body({"type": "array"})},
            }
        },
        "/v2/repository/models/{name}/load": {
            "post": {
                "summary": "Load a model",
                "parameters": [NAME],
                "responses": {"200": {"description": "loaded"}, "400": ERROR, "404": ERROR},
            }
        },
        "/v2/repository/models/{name}/unload": {
            "post": {
                "summary": "Unload a model",
                "parameters": [NAME],
                "responses": {"200": {"description": "unloaded"}, "404": ERROR},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {"200": {"description": "text exposition"}},
            }
        },
        **app_routes(),
        **completion_routes(),
    },
    "components": {
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {"type": "string", "description": "what went wrong, for a person"},
                    "reason": {
                        "type": "string",
                        "description": "why, for a program, where the error has a reason: "
                        "the error's own (`headway.errors`: `invalid_input`, `not_found`, "
                        "`overloaded`, `deadline`, `sequences_full`, ...; `internal` for a bug), "
                        "by which headway.Client raises its class; an infer request refused "
                        "under overload before it was decoded: `late`, `backlog` or `shed`; a "
                        "model not ready (`/ready`): Triton's reason, in words",
                        "example": "deadline",
                    },
                },
            },
            "Tensor": TENSOR,
            # a JSON request's tensors carry their `data`; binary ones (`binary_data_size`)
            # travel with Inference-Header-Content-Length, which this description leaves out
            "InputTensor": {**TENSOR, "required": [*TENSOR["required"], "data"]},
            "ModelMetadata": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "versions": {"type": "array", "items": {"type": "string"}},
                    "platform": {"type": "string"},
                    "inputs": {"type": "array", "items": {"type": "object"}},
                    "outputs": {"type": "array", "items": {"type": "object"}},
                },
            },
            "InferRequest": {
                "type": "object",
                "required": ["inputs"],
                "properties": {
                    "id": {"type": "string"},
                    "parameters": request_parameters(),
                    "inputs": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"$ref": "#/components/schemas/InputTensor"},
                    },
                    "outputs": {"type": "array", "items": {"type": "object"}},
                },
            },
            **APP_SCHEMAS,
            **GENERATE_SCHEMAS,
            **COMPLETION_SCHEMAS,
            "InferResponse": {
                "type": "object",
                "properties": {
                    "model_name": {"type": "string"},
                    "model_version": {"type": "string"},
                    "id": {"type": "string"},
                    "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/Tensor"}},
                },
            },
        }
    },
}


def _mark_admin_routes(document: dict[str, Any]) -> None:
    """Admin routes (`api.auth.is_admin`, the one list) need the bearer token when the server
    has one: they say so, and that they may answer 401; and 403 and 415 to what a web page
    of another origin sends (`api.origins`)."""
    document["components"]["securitySchemes"] = {
        "adminToken": {"type": "http", "scheme": "bearer", "description": "--admin-token"}
    }
    for path, operations in document["paths"].items():
        parts = [p for p in path.split("/") if p]
        for method, operation in operations.items():
            if is_admin(method.upper(), parts):
                operation["security"] = [{"adminToken": []}, {}]  # {}: a server without one
                operation["responses"]["401"] = ERROR
                operation["responses"]["403"] = ERROR
                operation["responses"]["415"] = ERROR


_mark_admin_routes(OPENAPI)
