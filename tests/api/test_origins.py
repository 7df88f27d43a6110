"""Browser requests on the routes that change state, without a server: the rules of
`api.origins`, and the app's routing through them (`HeadwayApp.handle` over a stub)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from headway.api.app import HeadwayApp
from headway.api.auth import exposure_warning
from headway.api.errors import Response
from headway.api.origins import (
    OriginPolicy,
    host_name,
    is_loopback_bind,
    is_loopback_name,
    origins_warning,
    parse_origins,
)
from headway.control.controller import Controller
from headway.errors import ConfigError
from headway.repository import Repository
from headway.testing import FakeEngine

LOCAL = {b"host": b"127.0.0.1:8000"}


def _error(response: Response | None) -> tuple[int, str]:
    assert response is not None
    status, body, _ = response
    return status, orjson.loads(body)["error"]


def test_clients_that_are_not_browsers_pass() -> None:
    policy = OriginPolicy()
    for headers in (
        {},  # no Host at all (HTTP/1.0)
        LOCAL,
        {b"host": b"localhost:8000", b"content-type": b"application/json"},
        {b"host": b"[::1]:8000", b"content-type": b"application/json; charset=utf-8"},
        {b"host": b"127.0.0.1", b"content-type": b"application/vnd.api+json"},
        {b"host": b"app.localhost:8000"},
    ):
        assert policy.refusal("POST", headers) is None, headers


def test_another_origin_is_refused_naming_it_and_the_flag() -> None:
    policy = OriginPolicy()
    for origin in (b"http://evil.example", b"null", b"http://127.0.0.1:9999", b"file://"):
        status, error = _error(policy.refusal("POST", {**LOCAL, b"origin": origin}))
        assert status == 403 and origin.decode() in error and "--allow-origin" in error


def test_the_servers_own_origin_passes() -> None:
    policy = OriginPolicy()
    for host, origin in (
        (b"127.0.0.1:8000", b"http://127.0.0.1:8000"),
        (b"localhost:8000", b"http://LOCALHOST:8000"),
        (b"localhost", b"https://localhost"),
    ):
        assert policy.refusal("PUT", {b"host": host, b"origin": origin}) is None


def test_an_allowed_origin_passes() -> None:
    policy = OriginPolicy(allowed=["https://tools.example.com, http://localhost:3000/"])
    for origin in (b"https://tools.example.com", b"http://localhost:3000"):
        assert policy.refusal("POST", {**LOCAL, b"origin": origin}) is None
    assert policy.refusal("POST", {**LOCAL, b"origin": b"https://other.example"}) is not None
    anything = OriginPolicy(allowed=["*"])
    assert anything.refusal("POST", {**LOCAL, b"origin": b"http://evil.example"}) is None


def test_a_body_a_page_may_send_anywhere_is_415_naming_what_to_send() -> None:
    policy = OriginPolicy()
    for kind in (
        b"text/plain",
        b"text/plain;charset=UTF-8",
        b"application/x-www-form-urlencoded",
        b"multipart/form-data; boundary=x",
        b"application/octet-stream",
    ):
        status, error = _error(policy.refusal("POST", {**LOCAL, b"content-type": kind}))
        assert status == 415 and "application/json" in error, kind
    assert policy.refusal("GET", {**LOCAL, b"content-type": b"text/plain"}) is None


def test_on_loopback_the_host_must_be_a_loopback_name() -> None:
    policy = OriginPolicy()
    for host in (
        b"evil.example:8000",
        b"evil.example",
        b"10.0.0.1:8000",
        b"localhost.evil.example",
    ):
        status, error = _error(policy.refusal("POST", {b"host": host}))
        assert status == 403 and host_name(host) in error and "--allow-host" in error
    # DNS rebinding: the page's origin is the attacker's name, and so is Host
    rebound = {b"host": b"evil.example:8000", b"origin": b"http://evil.example:8000"}
    assert _error(policy.refusal("POST", rebound))[0] == 403
    assert (
        OriginPolicy(hosts=["proxy.example"]).refusal("POST", {b"host": b"proxy.example"}) is None
    )
    exposed = OriginPolicy(loopback=False)
    assert exposed.refusal("POST", {b"host": b"server.example:8000"}) is None


def test_names_and_binds() -> None:
    assert host_name(b"[::1]:8000") == "::1" and host_name(b"LocalHost:1") == "localhost"
    assert host_name(b"example.org") == "example.org"
    for name in ("localhost", "a.localhost", "127.0.0.1", "127.1.2.3", "::1"):
        assert is_loopback_name(name), name
    for name in ("example.org", "10.0.0.1", "::", "0.0.0.0", "localhost.example", "1.2.3"):
        assert not is_loopback_name(name), name
    for host in ("127.0.0.1", "::1", "localhost", "[::1]"):
        assert is_loopback_bind(host)
    for host in ("0.0.0.0", "::", "example.org", "192.168.1.2"):
        assert not is_loopback_bind(host)


def test_allowed_origins_are_checked_at_start() -> None:
    assert parse_origins(["HTTPS://A.example/", "http://b:3000,null", " * "]) == {
        "https://a.example", "http://b:3000", "null", "*",
    }  # fmt: skip
    for bad in ("a.example", "https://a.example/path", "https://"):
        with pytest.raises(ConfigError, match="--allow-origin"):
            parse_origins([bad])
    assert origins_warning(["*"]) is not None and origins_warning(["https://a.example"]) is None


def test_a_preflight_from_an_allowed_origin_gets_cors() -> None:
    policy = OriginPolicy(allowed=["https://tools.example.com"])
    asked = {
        b"origin": b"https://tools.example.com",
        b"access-control-request-method": b"PUT",
        b"access-control-request-headers": b"content-type, authorization",
    }
    status, _, headers = policy.preflight(asked)
    found = dict(headers)
    assert status == 204
    assert found[b"access-control-allow-origin"] == b"https://tools.example.com"
    assert b"PUT" in found[b"access-control-allow-methods"]
    assert found[b"access-control-allow-headers"] == b"content-type, authorization"
    status, error = _error(policy.preflight({**asked, b"origin": b"http://evil.example"}))
    assert status == 403 and "--allow-origin" in error
    assert OriginPolicy().preflight(asked)[0] == 403


def test_answers_to_an_allowed_origin_carry_cors() -> None:
    policy = OriginPolicy(allowed=["https://tools.example.com"])
    got: list[Response] = []
    reply = policy.answering({b"origin": b"https://tools.example.com"}, got.append)
    reply((200, b"{}", []))
    assert (b"access-control-allow-origin", b"https://tools.example.com") in got[0][2]
    assert policy.answering({b"origin": b"http://evil.example"}, got.append) == got.append
    assert policy.answering({}, got.append) == got.append


def test_the_exposure_warning_says_anyone_can_run_code() -> None:
    warning = exposure_warning("0.0.0.0", None)
    assert warning is not None and "run code" in warning and "flow" in warning


# -- through the routes ---------------------------------------------------------------------
def _app(tmp_path: Path, **kwargs: Any) -> tuple[HeadwayApp, list[str]]:
    """An app over an empty repository whose unload route records the model it unloads."""
    app = HeadwayApp(Controller(Repository.scan(tmp_path), FakeEngine()), **kwargs)
    app.started = True
    unloaded: list[str] = []

    async def unload(name: str) -> Response:
        unloaded.append(name)
        return 200, b"", []

    app._unload = unload  # type: ignore[method-assign]
    return app, unloaded


def _handle(app: HeadwayApp, method: str, path: str, headers: dict[bytes, bytes]) -> Response:
    return asyncio.run(app.handle(method, path, headers, b""))


UNLOAD = "/v2/repository/models/digits/unload"


def test_a_browsers_cross_site_unload_changes_nothing(tmp_path: Path) -> None:
    app, unloaded = _app(tmp_path)
    page = {**LOCAL, b"origin": b"http://evil.example", b"content-type": b"text/plain"}
    assert _handle(app, "POST", UNLOAD, page)[0] == 403
    assert _handle(app, "POST", UNLOAD, {**LOCAL, b"content-type": b"text/plain"})[0] == 415
    assert _handle(app, "POST", UNLOAD, {b"host": b"evil.example:8000"})[0] == 403
    assert unloaded == []
    assert _handle(app, "POST", UNLOAD, {**LOCAL, b"content-type": b"application/json"})[0] == 200
    assert _handle(app, "POST", UNLOAD, LOCAL)[0] == 200  # tritonclient: no Content-Type
    assert unloaded == ["digits", "digits"]


def test_the_origin_is_checked_before_the_token(tmp_path: Path) -> None:
    app, _ = _app(tmp_path, admin_token="t")
    page = {**LOCAL, b"origin": b"http://evil.example", b"authorization": b"Bearer t"}
    assert _handle(app, "POST", UNLOAD, page)[0] == 403
    assert _handle(app, "POST", UNLOAD, LOCAL)[0] == 401


def test_cors_through_the_routes(tmp_path: Path) -> None:
    app, _ = _app(tmp_path, origins=OriginPolicy(allowed=["https://tools.example.com"]))
    preflight = {
        **LOCAL,
        b"origin": b"https://tools.example.com",
        b"access-control-request-method": b"POST",
    }
    status, _, headers = _handle(app, "OPTIONS", UNLOAD, preflight)
    assert status == 204 and dict(headers)[b"access-control-allow-origin"]
    call = {**LOCAL, b"origin": b"https://tools.example.com", b"content-type": b"application/json"}
    status, _, headers = _handle(app, "POST", UNLOAD, call)
    assert (
        status == 200 and (b"access-control-allow-origin", b"https://tools.example.com") in headers
    )
    # an OPTIONS that is no preflight is routed as before
    assert _handle(app, "OPTIONS", UNLOAD, LOCAL)[0] == 405


def test_the_flags_and_their_environment_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from headway.cli import main
    from headway.cli.serve import ServeSettings

    captured: list[ServeSettings] = []
    monkeypatch.setattr(main, "run", captured.append)
    flags = ["--allow-origin", "https://a.example", "--allow-origin", "http://b:3000,null"]
    for args, env in (
        (flags, {}),
        ([], {"HEADWAY_ALLOW_ORIGIN": "https://a.example http://b:3000,null"}),
    ):
        result = CliRunner().invoke(main.cli, ["serve", "-r", str(tmp_path), *args], env=env)
        assert result.exit_code == 0, result.output
        settings = captured.pop()
        policy = OriginPolicy.for_bind(settings.host, settings.allow_origin, settings.allow_host)
        assert policy.allowed == {"https://a.example", "http://b:3000", "null"}
        assert policy.loopback and policy.cors
    result = CliRunner().invoke(
        main.cli, ["serve", "-r", str(tmp_path)], env={"HEADWAY_ALLOW_HOST": "proxy.example"}
    )
    assert result.exit_code == 0 and captured.pop().allow_host == ("proxy.example",)
