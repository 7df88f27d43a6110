"""The application API's routes and schemas (`api/apps.py`): selection and flow apps, their
predictions and feedback, and the values flows look up."""

from __future__ import annotations

from typing import Any

from headway.api.openapi.parts import (
    APP,
    ERROR,
    KEY,
    USER,
    json_body,
    request_body,
    schema_ref,
)


def app_routes() -> dict[str, Any]:
    """The application API (`api/apps.py`)."""
    app_json = json_body(schema_ref("AppDescription"))
    return {
        "/apps": {
            "get": {"summary": "List applications", "responses": {"200": json_body({"type": "object"})}}
        },
        "/apps/{app}": {
            "get": {
                "summary": "Application configuration and statistics",
                "parameters": [APP],
                "responses": {"200": app_json, "404": ERROR},
            },
            "put": {
                "summary": "Create or replace an application",
                "parameters": [APP],
                "requestBody": request_body(schema_ref("AppConfig")),
                "responses": {"200": app_json, "201": app_json, "400": ERROR, "404": ERROR},
            },
            "delete": {
                "summary": "Remove an application",
                "parameters": [APP],
                "responses": {"200": json_body({"type": "object"}), "404": ERROR},
            },
        },
        "/apps/{app}/predict": {
            "post": {
                "summary": "Predict: one input row, or a list of rows",
                "parameters": [APP],
                "requestBody": request_body(schema_ref("AppPredictRequest")),
                "responses": {
                    "200": json_body(
                        {"oneOf": [schema_ref("AppPrediction"), {"type": "object", "properties": {
                            "outputs": {"type": "array", "items": schema_ref("AppPrediction")}}}]}
                    ),
                    "400": ERROR,
                    "404": ERROR,
                    "413": ERROR,
                },
            }
        },
        "/apps/{app}/feedback": {
            "post": {
                "summary": "Feedback: the true label of a query",
                "parameters": [APP],
                "requestBody": request_body(schema_ref("AppFeedback")),
                "responses": {"200": json_body({"type": "object"}), "400": ERROR, "404": ERROR},
            }
        },
        "/apps/{app}/models": {
            "post": {
                "summary": "Link one more model (it starts at the mean weight)",
                "parameters": [APP],
                "requestBody": request_body(
                    {"type": "object", "required": ["model"],
                     "properties": {"model": {"type": "string"}}}
                ),
                "responses": {"200": app_json, "400": ERROR, "404": ERROR},
            }
        },
        "/apps/{app}/active": {
            "post": {
                "summary": "Fixed policy: set the active model (rollback) or a traffic split",
                "parameters": [APP],
                "requestBody": request_body(
                    {"type": "object", "properties": {
                        "model": {"type": "string"},
                        "split": {"type": "object", "additionalProperties": {"type": "number"}},
                    }}
                ),
                "responses": {"200": app_json, "400": ERROR, "404": ERROR},
            }
        },
        "/lookups/{key}": {
            "get": {
                "summary": "A value that flows look up",
                "parameters": [KEY],
                "responses": {"200": json_body(schema_ref("Lookup")), "404": ERROR},
            },
            "put": {
                "summary": "Put a value that flows look up (kept in the store)",
                "parameters": [KEY],
                "requestBody": request_body(
                    {"type": "object", "required": ["value"], "additionalProperties": False,
                     "properties": {"value": {}}}
                ),
                "responses": {"200": json_body(schema_ref("Lookup")), "400": ERROR},
            },
            "delete": {
                "summary": "Remove a looked-up value",
                "parameters": [KEY],
                "responses": {"200": json_body({"type": "object"}), "404": ERROR},
            },
        },
        "/apps/{app}/users/{user}": {
            "get": {
                "summary": "The selection weights that serve one user",
                "parameters": [APP, USER],
                "responses": {"200": json_body({"type": "object"}), "404": ERROR},
            }
        },
    }  # fmt: skip


#: A model as an application names it: `name` or `name@version`.
MODEL_REF = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(@[1-9][0-9]{0,17})?$"

APP_SCHEMAS: dict[str, Any] = {
    "AppConfig": {
        "description": "A selection application (`models`, a policy) or a flow application (`flow`)",
        "oneOf": [schema_ref("SelectionAppConfig"), schema_ref("FlowAppConfig")],
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
                "items": {"type": "string", "pattern": MODEL_REF},
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
            "active": {"type": "string", "pattern": MODEL_REF},
        },
    },
    "AppDescription": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "config": {"$ref": "#/components/schemas/AppConfig"},
            "statistics": {"type": "object"},
            "plan": {
                "type": "object",
                "description": "The plan in force (`headway serve --plan`): per stage, what it "
                "runs with and each field not applied, with the reason",
                "properties": {
                    "app": {"type": "string"},
                    "workers": {"type": "integer"},
                    "stages": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "stage": {"type": "string"},
                                "model": {"type": "string"},
                                "hardware": {"type": "string"},
                                "threads": {"type": "integer", "nullable": True},
                                "device": {"type": "string"},
                                "max_batch_size": {"type": "integer"},
                                "replicas": {"type": "integer"},
                                "applied": {"type": "array", "items": {"type": "string"}},
                                "not_applied": {
                                    "type": "object",
                                    "additionalProperties": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            },
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
