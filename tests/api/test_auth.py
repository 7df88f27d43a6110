"""The tokens' rules, without a server: which routes need which, the refusals, the warning."""

from __future__ import annotations

import orjson
import pytest

from headway.api.auth import exposure_warning, for_admin, for_inference, is_admin, is_open


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
    token = for_admin("abc")
    assert token is not None and for_admin(None) is None and for_admin("") is None
    for sent in (b"Bearer abc", b"bearer abc", b"  BEARER   abc "):
        assert token.allows(sent) and token.refusal(sent) is None
    for sent, challenge in (
        (None, b'Bearer realm="headway"'),
        (b"Basic abc", b'Bearer realm="headway"'),
        (b"Bearer ", b'Bearer realm="headway"'),
        (b"Bearer ab", b'Bearer realm="headway", error="invalid_token"'),
        (b"Bearer abcd", b'Bearer realm="headway", error="invalid_token"'),
    ):
        assert not token.allows(sent)
        refusal = token.refusal(sent)
        assert refusal is not None
        status, body, extra = refusal
        assert status == 401 and (b"www-authenticate", challenge) in extra
        assert "admin token" in orjson.loads(body)["error"]


def test_the_inference_token_or_the_admin_token_opens_the_inference_routes() -> None:
    assert for_inference(None, "admin") is None
    token = for_inference("infer", "admin")
    assert token is not None
    assert token.allows(b"Bearer infer") and token.allows(b"Bearer admin")
    assert token.allows(b"bearer  admin")
    assert not token.allows(b"Bearer inferx") and not token.allows(None)
    assert "--inference-token" in token.message(None)
    assert "not one of the server's" in token.message(b"Bearer guess")
    alone = for_inference("infer")
    assert alone is not None and not alone.allows(b"Bearer admin")


@pytest.mark.parametrize(
    ("path", "open_"),
    [
        ("/v2/health/live", True),
        ("/v2/health/ready", True),
        ("/openapi.json", True),
        ("/docs", True),
        ("/docs/swagger-ui.css", True),
        ("/v2/health", False),
        ("/v2/health/ready/more", False),
        ("/v2", False),
        ("/v2/models/m/ready", False),
        ("/v2/models/m", False),
        ("/v2/models/m/infer", False),
        ("/apps/a/predict", False),
        ("/metrics", False),
        ("/dashboard", False),
        ("/", False),
    ],
)
def test_only_the_health_probes_and_the_api_description_are_open(path: str, open_: bool) -> None:
    assert is_open([p for p in path.split("/") if p]) is open_


def test_an_exposed_server_without_a_token_is_warned_about() -> None:
    for host in ("0.0.0.0", "::", "192.168.1.4", "example.org"):
        warning = exposure_warning(host, None)
        assert warning is not None and "HEADWAY_ADMIN_TOKEN" in warning and host in warning
        assert exposure_warning(host, "t") is None
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert exposure_warning(host, None) is None
        assert exposure_warning(host, None, "i") is None
    warning = exposure_warning("0.0.0.0", None, "i")
    assert warning is not None and "inference token" in warning and "ADMIN_TOKEN" in warning


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
