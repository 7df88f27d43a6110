"""The admin token's rules, without a server: which routes are admin, the refusals, the warning."""

from __future__ import annotations

import orjson
import pytest

from headway.api.auth import AdminToken, exposure_warning, is_admin


@pytest.mark.parametrize(
    ("method", "path", "admin"),
    [
        ("POST", "/v2/repository/models/m/load", True),
        ("POST", "/v2/repository/models/m/unload", True),
        ("PUT", "/apps/a", True),
        ("DELETE", "/apps/a", True),
        ("POST", "/apps/a/feedback", True),
        ("POST", "/apps/a/models", True),
        ("POST", "/apps/a/active", True),
        ("POST", "/apps/a/predict", False),
        ("GET", "/apps/a", False),
        ("GET", "/apps", False),
        ("GET", "/apps/a/users/u", False),
        ("POST", "/v2/repository/index", False),
        ("POST", "/v2/models/m/infer", False),
        ("GET", "/v2/health/ready", False),
        ("GET", "/metrics", False),
    ],
)
def test_admin_routes_are_those_that_change_state(method: str, path: str, admin: bool) -> None:
    assert is_admin(method, [p for p in path.split("/") if p]) is admin


def test_the_token_is_required_and_must_match() -> None:
    token = AdminToken("abc")
    assert token.refusal({b"authorization": b"Bearer abc"}) is None
    assert token.refusal({b"authorization": b"bearer abc"}) is None
    for headers, challenge in (
        ({}, b'Bearer realm="headway"'),
        ({b"authorization": b"Basic abc"}, b'Bearer realm="headway"'),
        ({b"authorization": b"Bearer ab"}, b'Bearer realm="headway", error="invalid_token"'),
        ({b"authorization": b"Bearer abcd"}, b'Bearer realm="headway", error="invalid_token"'),
    ):
        refusal = token.refusal(headers)
        assert refusal is not None
        status, body, extra = refusal
        assert status == 401 and (b"www-authenticate", challenge) in extra
        assert "token" in orjson.loads(body)["error"]


def test_an_exposed_server_without_a_token_is_warned_about() -> None:
    for host in ("0.0.0.0", "::", "192.168.1.4", "example.org"):
        warning = exposure_warning(host, None)
        assert warning is not None and "HEADWAY_ADMIN_TOKEN" in warning and host in warning
        assert exposure_warning(host, "t") is None
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert exposure_warning(host, None) is None


def test_the_openapi_document_marks_exactly_the_admin_routes() -> None:
    from headway.api.openapi import OPENAPI

    marked = {
        f"{method.upper()} {path}"
        for path, operations in OPENAPI["paths"].items()
        for method, operation in operations.items()
        if "security" in operation and "401" in operation["responses"]
    }
    assert marked == {
        "POST /v2/repository/models/{name}/load",
        "POST /v2/repository/models/{name}/unload",
        "PUT /apps/{app}",
        "DELETE /apps/{app}",
        "POST /apps/{app}/feedback",
        "POST /apps/{app}/models",
        "POST /apps/{app}/active",
        "GET /lookups/{key}",
        "PUT /lookups/{key}",
        "DELETE /lookups/{key}",
    }
    assert OPENAPI["components"]["securitySchemes"]["adminToken"]["scheme"] == "bearer"
