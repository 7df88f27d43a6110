"""The pieces the OpenAPI document is written with: path parameters, the error answer, JSON
bodies and references to the document's schemas."""

from __future__ import annotations

from typing import Any

ERROR = {
    "description": "Error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def path_parameter(name: str, pattern: str) -> dict[str, Any]:
    """A path parameter: a string the server can route (no '/') and act on."""
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "pattern": pattern}}  # fmt: skip


#: A model's or an application's name, as the repository and `headway.yaml` allow it.
NAMED = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
NAME = path_parameter("name", NAMED)
VERSION = path_parameter("version", "^[0-9]+$")
APP = path_parameter("app", NAMED)
USER = path_parameter("user", "^[^/]+$")
KEY = path_parameter("key", "^[^/]{1,512}$")


def json_body(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def request_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}
