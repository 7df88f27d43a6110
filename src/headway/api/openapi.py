"""The OpenAPI document of the HTTP API (served at /openapi.json, so it can be fuzzed)."""

from __future__ import annotations

from typing import Any

from headway.api.auth import is_admin

_ERROR = {
    "description": "Error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _path(name: str, pattern: str) -> dict[str, Any]:
    """A path parameter: a string the server can route (no '/') and act on."""
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "pattern": pattern}}  # fmt: skip


#: A model's or an application's name, as the repository and `headway.yaml` allow it.
_NAMED = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
_NAME = _path("name", _NAMED)
_VERSION = _path("version", "^[0-9]+$")
_APP = _path("app", _NAMED)
_USER = _path("user", "^[^/]+$")
_KEY = _path("key", "^[^/]{1,512}$")


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _model_routes(prefix: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    ref = {"$ref": "#/components/schemas/ModelMetadata"}
    return {
        prefix: {
            "get": {
                "summary": "Model metadata",
                "parameters": params,
                "responses": {"200": _json(ref), "404": _ERROR},
            }
        },
        f"{prefix}/ready": {
            "get": {
                "summary": "Model ready",
                "parameters": params,
                "responses": {"200": {"description": "ready"}, "400": _ERROR, "404": _ERROR},
            }
        },
        f"{prefix}/config": {
            "get": {
                "summary": "Model configuration (Triton)",
                "parameters": params,
                "responses": {"200": _json({"type": "object"}), "404": _ERROR},
            }
        },
        f"{prefix}/stats": {
            "get": {
                "summary": "Model statistics (Triton)",
                "parameters": params,
                "responses": {"200": _json({"type": "object"}), "404": _ERROR},
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
                    "200": _json({"$ref": "#/components/schemas/InferResponse"}),
                    "400": _ERROR,
                    "404": _ERROR,
                    "413": _ERROR,
                    "429": _ERROR,
                    "500": _ERROR,
                    "503": _ERROR,
                },
            }
        },
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _app_routes() -> dict[str, Any]:
    """The application API (`api/apps.py`)."""
    app_json = _json(_ref("AppDescription"))
    return {
        "/apps": {
            "get": {"summary": "List applications", "responses": {"200": _json({"type": "object"})}}
        },
        "/apps/{app}": {
            "get": {
                "summary": "Application configuration and statistics",
                "parameters": [_APP],
                "responses": {"200": app_json, "404": _ERROR},
            },
            "put": {
                "summary": "Create or replace an application",
                "parameters": [_APP],
                "requestBody": _body(_ref("AppConfig")),
                "responses": {"200": app_json, "201": app_json, "400": _ERROR, "404": _ERROR},
            },
            "delete": {
                "summary": "Remove an application",
                "parameters": [_APP],
                "responses": {"200": _json({"type": "object"}), "404": _ERROR},
            },
        },
        "/apps/{app}/predict": {
            "post": {
                "summary": "Predict: one input row, or a list of rows",
                "parameters": [_APP],
                "requestBody": _body(_ref("AppPredictRequest")),
                "responses": {
                    "200": _json(
                        {"oneOf": [_ref("AppPrediction"), {"type": "object", "properties": {
                            "outputs": {"type": "array", "items": _ref("AppPrediction")}}}]}
                    ),
                    "400": _ERROR,
                    "404": _ERROR,
                    "413": _ERROR,
                },
            }
        },
        "/apps/{app}/feedback": {
            "post": {
                "summary": "Feedback: the true label of a query",
                "parameters": [_APP],
                "requestBody": _body(_ref("AppFeedback")),
                "responses": {"200": _json({"type": "object"}), "400": _ERROR, "404": _ERROR},
            }
        },
        "/apps/{app}/models": {
            "post": {
                "summary": "Link one more model (it starts at the mean weight)",
                "parameters": [_APP],
                "requestBody": _body(
                    {"type": "object", "required": ["model"],
                     "properties": {"model": {"type": "string"}}}
                ),
                "responses": {"200": app_json, "400": _ERROR, "404": _ERROR},
            }
        },
        "/apps/{app}/active": {
            "post": {
                "summary": "Fixed policy: set the active model (rollback) or a traffic split",
                "parameters": [_APP],
                "requestBody": _body(
                    {"type": "object", "properties": {
                        "model": {"type": "string"},
                        "split": {"type": "object", "additionalProperties": {"type": "number"}},
                    }}
                ),
                "responses": {"200": app_json, "400": _ERROR, "404": _ERROR},
            }
        },
        "/lookups/{key}": {
            "get": {
                "summary": "A value that flows look up",
                "parameters": [_KEY],
                "responses": {"200": _json(_ref("Lookup")), "404": _ERROR},
            },
            "put": {
                "summary": "Put a value that flows look up (kept in the store)",
                "parameters": [_KEY],
                "requestBody": _body(
                    {"type": "object", "required": ["value"], "additionalProperties": False,
                     "properties": {"value": {}}}
                ),
                "responses": {"200": _json(_ref("Lookup")), "400": _ERROR},
            },
            "delete": {
                "summary": "Remove a looked-up value",
                "parameters": [_KEY],
                "responses": {"200": _json({"type": "object"}), "404": _ERROR},
            },
        },
        "/apps/{app}/users/{user}": {
            "get": {
                "summary": "The selection weights that serve one user",
                "parameters": [_APP, _USER],
                "responses": {"200": _json({"type": "object"}), "404": _ERROR},
            }
        },
    }  # fmt: skip


#: A model as an application names it: `name` or `name@version`.
_MODEL_REF = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(@[1-9][0-9]{0,17})?$"

_APP_SCHEMAS: dict[str, Any] = {
    "AppConfig": {
        "description": "A selection application (`models`, a policy) or a flow application (`flow`)",
        "oneOf": [_ref("SelectionAppConfig"), _ref("FlowAppConfig")],
    },
    "FlowAppConfig": {
        "type": "object",
        "required": ["flow"],
        "additionalProperties": False,
        "properties": {
            "flow": {
                "type": "string",
                "pattern": "^.+\\.py:[A-Za-z_][A-Za-z0-9_]*$",
                "description": "path/to/file.py:object, the Python file and the Flow it defines",
            },
            "slo_ms": {
                "type": "number",
                "minimum": 0.001,
                "description": "the whole flow's deadline",
            },
            "default_output": {},
            "fusion": {"type": "boolean"},
            "compete": {"type": "boolean"},
            "compete_replicas": {"type": "integer", "minimum": 1, "maximum": 16},
            "batching": {"type": "boolean"},
        },
    },
    "SelectionAppConfig": {
        "type": "object",
        "required": ["models"],
        "properties": {
            "models": {
                "type": "array",
                "items": {"type": "string", "pattern": _MODEL_REF},
                "minItems": 1,
                "uniqueItems": True,
            },
            "policy": {"type": "string", "enum": ["fixed", "exp3", "exp4"]},
            "slo_ms": {"type": "number", "minimum": 0.001},
            "default_output": {},
            "confidence_threshold": {"type": "number", "minimum": 0, "maximum": 1},
            "personalize": {"type": "boolean"},
            "task": {"type": "string", "enum": ["classification", "regression"]},
            "scale": {"type": "number", "exclusiveMinimum": True, "minimum": 0},
            "eta": {"type": "number", "exclusiveMinimum": True, "minimum": 0},
            "min_weight": {
                "type": "number",
                "exclusiveMinimum": True,
                "minimum": 0,
                "exclusiveMaximum": True,
                "maximum": 1,
            },
            "tolerance": {"type": "number", "minimum": 0},
            "split": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {"type": "number", "minimum": 0},
            },
            "active": {"type": "string", "pattern": _MODEL_REF},
        },
    },
    "AppDescription": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "config": {"$ref": "#/components/schemas/AppConfig"},
            "statistics": {"type": "object"},
        },
    },
    "AppPredictRequest": {
        "type": "object",
        "properties": {"input": {}, "inputs": {"type": "array"}, "user": {"type": "string"}},
    },
    "AppPrediction": {
        "type": "object",
        "properties": {
            "query_id": {"type": "string"},
            "output": {},
            "default": {"type": "boolean"},
            "default_explanation": {"type": "string"},
            "confidence": {"type": "number"},
            "models": {"type": "array", "items": {"type": "string"}},
            "missing": {"type": "array", "items": {"type": "string"}},
        },
    },
    "Lookup": {
        "type": "object",
        "required": ["key", "value"],
        "properties": {"key": {"type": "string"}, "value": {}},
    },
    "AppFeedback": {
        "type": "object",
        "required": ["label"],
        "properties": {
            "query_id": {"type": "string"},
            "input": {},
            "label": {},
            "user": {"type": "string"},
        },
    },
}


_TENSOR = {
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

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "Headway",
        "version": "0.1.0",
        "description": "Open Inference Protocol (KServe v2) REST, with Triton's binary "
        "tensor, model repository, schedule-policy, model-configuration and statistics "
        "extensions.",
    },
    "paths": {
        "/v2": {
            "get": {"summary": "Server metadata", "responses": {"200": _json({"type": "object"})}}
        },
        "/v2/health/live": {
            "get": {"summary": "Live", "responses": {"200": {"description": "live"}}}
        },
        "/v2/health/ready": {
            "get": {
                "summary": "Ready",
                "responses": {
                    "200": _json({"type": "object", "properties": {"ready": {"type": "boolean"}}}),
                    "503": _json(
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
                "responses": {"200": _json({"type": "object"})},
            }
        },
        **_model_routes("/v2/models/{name}", [_NAME]),
        **_model_routes("/v2/models/{name}/versions/{version}", [_NAME, _VERSION]),
        "/v2/repository/index": {
            "post": {"summary": "Repository index", "responses": {"200": _json({"type": "array"})}}
        },
        "/v2/repository/models/{name}/load": {
            "post": {
                "summary": "Load a model",
                "parameters": [_NAME],
                "responses": {"200": {"description": "loaded"}, "400": _ERROR, "404": _ERROR},
            }
        },
        "/v2/repository/models/{name}/unload": {
            "post": {
                "summary": "Unload a model",
                "parameters": [_NAME],
                "responses": {"200": {"description": "unloaded"}, "404": _ERROR},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {"200": {"description": "text exposition"}},
            }
        },
        **_app_routes(),
    },
    "components": {
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {"type": "string"},
                    # why: a model not ready, or an infer request refused under overload
                    # before it was decoded (`late`, `backlog`, `shed`)
                    "reason": {"type": "string"},
                },
            },
            "Tensor": _TENSOR,
            # a JSON request's tensors carry their `data`; binary ones (`binary_data_size`)
            # travel with Inference-Header-Content-Length, which this description leaves out
            "InputTensor": {**_TENSOR, "required": [*_TENSOR["required"], "data"]},
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
                    "parameters": {"type": "object"},
                    "inputs": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"$ref": "#/components/schemas/InputTensor"},
                    },
                    "outputs": {"type": "array", "items": {"type": "object"}},
                },
            },
            **_APP_SCHEMAS,
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
    has one: they say so, and that they may answer 401."""
    document["components"]["securitySchemes"] = {
        "adminToken": {"type": "http", "scheme": "bearer", "description": "--admin-token"}
    }
    for path, operations in document["paths"].items():
        parts = [p for p in path.split("/") if p]
        for method, operation in operations.items():
            if is_admin(method.upper(), parts):
                operation["security"] = [{"adminToken": []}, {}]  # {}: a server without one
                operation["responses"]["401"] = _ERROR


_mark_admin_routes(OPENAPI)
