"""The OpenAPI document's application schema describes both kinds of app the server takes."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft4Validator

from headway.api.openapi import OPENAPI


def _app_config() -> Draft4Validator:
    # OpenAPI 3.0 schemas are JSON Schema draft 4 with extensions (boolean exclusiveMinimum).
    schema = {"$ref": "#/components/schemas/AppConfig", "components": OPENAPI["components"]}
    return Draft4Validator(schema)


@pytest.mark.parametrize(
    "config",
    [
        {"models": ["iris-forest", "iris-logistic@1"], "policy": "exp3", "slo_ms": 100},
        {"flow": "examples/flows/cascade.py:flow", "slo_ms": 200, "default_output": -1},
        {"flow": "flows/f.py:build", "fusion": False, "compete": True, "compete_replicas": 3},
    ],
)
def test_documented_app_configs_validate(config: dict[str, Any]) -> None:
    assert list(_app_config().iter_errors(config)) == []


@pytest.mark.parametrize(
    "config",
    [
        {"flow": "cascade.py"},  # no object named
        {"flow": "cascade.txt:flow"},
        {"flow": "f.py:flow", "policy": "exp3"},  # a selection key on a flow app
        {"flow": "f.py:flow", "compete_replicas": 0},
        {"fusion": True},  # neither models nor flow
    ],
)
def test_app_configs_the_server_refuses_do_not_validate(config: dict[str, Any]) -> None:
    assert list(_app_config().iter_errors(config)) != []
